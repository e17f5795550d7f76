"""Container images for the node, made without a registry.

- The pause image and the CoreDNS image are written here as OCI image layouts (one layer holding
  one static binary built by hack/), the format `ctr images import` reads.
- The Belay image is built by hack/build-harness-image.sh in the project's own Docker engine;
  `docker save` turns it into a tarball that `ctr images import` reads too. Saved once per tag.

Each tarball is cached under $BELAY_CACHE/node/images, named by what it is made from.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tests.testenv.binaries import cache_dir, component

# Containerd reads this annotation to name an image it imports from an OCI layout.
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
# The uid and gid the single-binary images run as (the restricted profile wants a non-root user).
NONROOT = 65532


def images_dir() -> Path:
    return cache_dir() / "node" / "images"


@dataclass(frozen=True)
class ImageArchive:
    """A tarball `ctr images import` reads, and the reference the image gets."""

    reference: str
    path: Path


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(binary: Path, target: str) -> bytes:
    """A tar of the binary at `target` (and the folders it is in) plus the empty /tmp and /etc a
    program expects, with fixed timestamps, so the same binary always gives the same layer."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        parents = [str(folder).strip("/") for folder in reversed(Path(target).parents)]
        for folder, mode in (("etc", 0o755), ("tmp", 0o1777), *((folder, 0o755) for folder in parents)):
            if not folder:
                continue
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(info)
        passwd = f"root:x:0:0:root:/:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}::/:/sbin/nologin\n".encode()
        for name, content in (
            ("etc/passwd", passwd),
            ("etc/group", f"root:x:0:\nnonroot:x:{NONROOT}:\n".encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            tar.addfile(info, io.BytesIO(content))
        data = binary.read_bytes()
        info = tarfile.TarInfo(target.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def write_oci_archive(
    path: Path, reference: str, binary: Path, target: str, entrypoint: list[str], user: str = f"{NONROOT}"
) -> None:
    """An OCI image layout tarball with one layer: `binary` at `target`."""
    layer = _layer(binary, target)
    compressed = gzip.compress(layer, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "User": user, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
            "history": [{"created_by": f"tests/testenv/images.py: {binary.name}"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(compressed),
                    "size": len(compressed),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "annotations": {IMAGE_NAME_ANNOTATION: reference},
                }
            ],
        }
    ).encode()
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": index,
        **{f"blobs/sha256/{_digest(blob)[7:]}": blob for blob in (compressed, config, manifest)},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for folder in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            tar.addfile(info, io.BytesIO(content))
    partial.replace(path)


def single_binary_image(name: str, binary: Path, target: str, entrypoint: list[str]) -> ImageArchive:
    """The image of one static binary, tagged with the first 12 hex digits of its hash."""
    tag = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    reference = f"belay.local/{name}:{tag}"
    path = images_dir() / f"{name}-{tag}.tar"
    if not path.exists():
        write_oci_archive(path, reference, binary, target, entrypoint)
    return ImageArchive(reference, path)


def etcd_image() -> ImageArchive:
    """The etcd the tests build, as an image laid out as etcd's own release image (the binary at
    /usr/local/bin/etcd): what the chart's evaluation etcd runs on the node (etcd.image)."""
    etcd = component("etcd").path("etcd")
    return single_binary_image("etcd", etcd, "/usr/local/bin/etcd", ["/usr/local/bin/etcd"])
