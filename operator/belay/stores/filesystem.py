"""The embedded artifact store: a content-addressed directory.

Layout: `root/blobs/ab/abcdef…` (the sha256 of the bytes, fanned out by its first two hex digits) and
`root/tmp/` for writes in progress. A blob is written to tmp, fsynced, then renamed into place, so a
reader (or a crash) never sees half a blob under its address. Every read re-hashes the bytes.

The store is its owner's alone, whatever the umask: directories 0700, writes in progress 0600,
blobs 0400 (read-only: a blob never changes under its address). Storing bytes that are there
already touches the blob's modification time, so a collector that spares what was written since
it started (`belay.local.garbage`) spares a blob a writer is about to name.

`materialize` is the backend-independent `belay.stores.materialize.materialize_from`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from belay.journal.events import ArtifactRef, DeclaredArtifact, canonical_json
from belay.stores.base import MANIFEST_MEDIA_TYPE, ArtifactCorrupted, ArtifactNotFound, StoreError, UnsafePath
from belay.stores.materialize import materialize_from

CHUNK_BYTES = 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_address(sha256: str) -> str:
    """An address is a lowercase sha256 hex digest and nothing else, so it can never name a path."""
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise UnsafePath(f"not a sha256 address: {sha256!r}")
    return sha256


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _chunks(source: bytes | BinaryIO) -> Iterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]
        return
    while chunk := source.read(CHUNK_BYTES):
        yield chunk


class FilesystemArtifactStore:
    """`ArtifactStore` in a local directory; safe for concurrent writers (renames are atomic)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).absolute()
        self._blobs = self.root / "blobs"
        self._tmp = self.root / "tmp"
        for directory in (self.root, self._blobs, self._tmp):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def blob_path(self, sha256: str) -> Path:
        check_address(sha256)
        return self._blobs / sha256[:2] / sha256

    # ---------------------------------------------------------------------------------------------
    # writes

    def put(self, source: bytes | BinaryIO, *, media_type: str = "application/octet-stream") -> ArtifactRef:
        hasher = hashlib.sha256()
        size = 0
        tmp = self._tmp / f"{uuid.uuid4().hex}.partial"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                for chunk in _chunks(source):
                    hasher.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            sha256 = hasher.hexdigest()
            final = self.blob_path(sha256)
            if final.exists() and self._verifies(final, sha256):
                tmp.unlink()  # already stored: content addressing deduplicates
                with contextlib.suppress(OSError):
                    os.utime(final)  # stored again now, as far as a collector can tell
            else:
                # Absent, or present but damaged: the fresh copy takes its place.
                final.parent.mkdir(mode=0o700, exist_ok=True)
                os.chmod(tmp, 0o400)
                os.replace(tmp, final)
                _fsync_directory(final.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return ArtifactRef(sha256=sha256, size=size, media_type=media_type, uri=final.as_uri())

    def put_manifest(self, entries: Sequence[DeclaredArtifact]) -> ArtifactRef:
        body = canonical_json([entry.model_dump(mode="json") for entry in entries])
        return self.put(body, media_type=MANIFEST_MEDIA_TYPE)

    def delete(self, sha256: str) -> bool:
        path = self.blob_path(sha256)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        _fsync_directory(path.parent)
        return True

    # ---------------------------------------------------------------------------------------------
    # reads

    def _open_blob(self, sha256: str) -> BinaryIO:
        try:
            return open(self.blob_path(sha256), "rb")
        except FileNotFoundError as exc:
            raise ArtifactNotFound(f"no artifact {sha256}") from exc

    def _verifies(self, path: Path, sha256: str) -> bool:
        hasher = hashlib.sha256()
        with open(path, "rb") as blob:
            while chunk := blob.read(CHUNK_BYTES):
                hasher.update(chunk)
        return hasher.hexdigest() == sha256

    def open(self, sha256: str) -> Iterator[bytes]:
        blob = self._open_blob(sha256)  # eager, so a missing blob fails at the call, not the first next()
        return self._verified_chunks(blob, sha256)

    @staticmethod
    def _verified_chunks(blob: BinaryIO, sha256: str) -> Iterator[bytes]:
        hasher = hashlib.sha256()
        with blob:
            while chunk := blob.read(CHUNK_BYTES):
                hasher.update(chunk)
                yield chunk
        if hasher.hexdigest() != sha256:
            raise ArtifactCorrupted(f"artifact {sha256} reads back as {hasher.hexdigest()}")

    def get(self, sha256: str) -> bytes:
        return b"".join(self.open(sha256))

    def exists(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def location(self, sha256: str, *, expires_in: int = 3600) -> str:
        path = self.blob_path(sha256)
        if not path.is_file():
            raise ArtifactNotFound(f"no artifact {sha256}")
        return str(path)

    def get_manifest(self, sha256: str) -> list[DeclaredArtifact]:
        try:
            raw = json.loads(self.get(sha256))
        except json.JSONDecodeError as exc:
            raise StoreError(f"artifact {sha256} is not a manifest: {exc}") from exc
        if not isinstance(raw, list):
            raise StoreError(f"artifact {sha256} is not a manifest (not a JSON list)")
        return [DeclaredArtifact.model_validate(item) for item in raw]

    # ---------------------------------------------------------------------------------------------

    def materialize(self, entries: Sequence[DeclaredArtifact], root: Path) -> list[Path]:
        return materialize_from(self, entries, root)
