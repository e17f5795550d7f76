"""The ArtifactStore conformance suite: every backend in ARTIFACT_STORE_BACKENDS passes the same tests."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from belay.journal.events import DeclaredArtifact
from belay.stores.base import (
    MANIFEST_MEDIA_TYPE,
    ArtifactCorrupted,
    ArtifactNotFound,
    ArtifactStore,
    UnsafePath,
)
from tests.conformance.backends import ArtifactBackend


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def declared(store: ArtifactStore, name: str, data: bytes, mode: int = 0o644) -> DeclaredArtifact:
    ref = store.put(data)
    return DeclaredArtifact(name=name, sha256=ref.sha256, size=ref.size, uri=ref.uri, mode=mode)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


# --------------------------------------------------------------------------------------------------
# put, get, exists, location


def test_put_returns_a_content_address_and_get_returns_the_bytes(artifact_store: ArtifactStore) -> None:
    data = b"the patch that fixes the parser\n"
    ref = artifact_store.put(data, media_type="text/x-diff")
    assert ref.sha256 == sha(data)
    assert ref.size == len(data)
    assert ref.media_type == "text/x-diff"
    assert ref.uri
    assert artifact_store.get(ref.sha256) == data
    assert b"".join(artifact_store.open(ref.sha256)) == data
    assert artifact_store.exists(ref.sha256)


def test_a_stream_larger_than_one_chunk_round_trips(artifact_store: ArtifactStore) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    ref = artifact_store.put(io.BytesIO(data))
    assert (ref.sha256, ref.size) == (sha(data), len(data))
    assert artifact_store.get(ref.sha256) == data


def test_empty_bytes_are_an_artifact_too(artifact_store: ArtifactStore) -> None:
    ref = artifact_store.put(b"")
    assert (ref.sha256, ref.size) == (sha(b""), 0)
    assert artifact_store.get(ref.sha256) == b""


def test_unknown_address_is_not_found(artifact_store: ArtifactStore) -> None:
    missing = sha(b"never stored")
    assert not artifact_store.exists(missing)
    with pytest.raises(ArtifactNotFound):
        artifact_store.get(missing)
    with pytest.raises(ArtifactNotFound):
        b"".join(artifact_store.open(missing))


def test_location_points_at_the_bytes(
    artifact_backend: ArtifactBackend, artifact_store: ArtifactStore
) -> None:
    data = b"deliverable report\n" * 100
    ref = artifact_store.put(data)
    location = artifact_store.location(ref.sha256)
    assert artifact_backend.read_location(location) == data


# --------------------------------------------------------------------------------------------------
# deduplication and corruption


def test_storing_the_same_bytes_twice_stores_them_once(
    artifact_backend: ArtifactBackend, artifact_store: ArtifactStore
) -> None:
    before = artifact_backend.count_blobs()
    first = artifact_store.put(b"same bytes")
    second = artifact_store.put(io.BytesIO(b"same bytes"), media_type="text/plain")
    assert first.sha256 == second.sha256
    assert artifact_backend.count_blobs() == before + 1
    artifact_store.put(b"other bytes")
    assert artifact_backend.count_blobs() == before + 2


def test_a_corrupted_blob_is_detected_on_every_read(
    artifact_backend: ArtifactBackend, artifact_store: ArtifactStore, tmp_path: Path
) -> None:
    data = os.urandom(4096)
    ref = artifact_store.put(data)
    artifact_backend.corrupt(ref.sha256)
    with pytest.raises(ArtifactCorrupted):
        artifact_store.get(ref.sha256)
    with pytest.raises(ArtifactCorrupted):
        b"".join(artifact_store.open(ref.sha256))
    entry = DeclaredArtifact(name="data.bin", sha256=ref.sha256, size=ref.size)
    workspace = tmp_path / "workspace"
    with pytest.raises(ArtifactCorrupted):
        artifact_store.materialize([entry], workspace)
    assert files_under(workspace) == []


# --------------------------------------------------------------------------------------------------
# manifests


def test_manifests_round_trip_and_are_canonical(artifact_store: ArtifactStore) -> None:
    entries = [
        declared(artifact_store, "src/parser.py", b"def parse(): ...\n"),
        declared(artifact_store, "bin/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755),
    ]
    ref = artifact_store.put_manifest(entries)
    assert ref.media_type == MANIFEST_MEDIA_TYPE  # what retention recognises a manifest by
    assert artifact_store.get_manifest(ref.sha256) == entries
    assert artifact_store.put_manifest(list(entries)).sha256 == ref.sha256
    assert artifact_store.put_manifest(entries[:1]).sha256 != ref.sha256


# --------------------------------------------------------------------------------------------------
# materialize


def test_materialize_writes_every_declared_artifact(artifact_store: ArtifactStore, tmp_path: Path) -> None:
    entries = [
        declared(artifact_store, "src/parser.py", b"def parse(): ...\n"),
        declared(artifact_store, "bin/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755),
        declared(artifact_store, "./top.txt", b"top\n"),
    ]
    workspace = tmp_path / "workspace"
    written = artifact_store.materialize(entries, workspace)
    assert written == [workspace / "src/parser.py", workspace / "bin/run.sh", workspace / "top.txt"]
    assert (workspace / "src/parser.py").read_bytes() == b"def parse(): ...\n"
    assert (workspace / "bin/run.sh").stat().st_mode & 0o777 == 0o755
    assert files_under(workspace) == ["bin/run.sh", "src/parser.py", "top.txt"]
    # Restoring again over an existing workspace replaces the files in place.
    (workspace / "top.txt").write_bytes(b"drifted\n")
    artifact_store.materialize(entries, workspace)
    assert (workspace / "top.txt").read_bytes() == b"top\n"


@pytest.mark.parametrize(
    "name",
    ["../escape.txt", "a/../../escape.txt", "/etc/belay-escape", "", ".", "a/./../.."],
)
def test_names_escaping_the_root_are_refused_before_anything_is_written(
    artifact_store: ArtifactStore, tmp_path: Path, name: str
) -> None:
    good = declared(artifact_store, "good.txt", b"fine\n")
    bad = DeclaredArtifact(name=name, sha256=good.sha256, size=good.size)
    workspace = tmp_path / "workspace"
    with pytest.raises(UnsafePath):
        artifact_store.materialize([good, bad], workspace)
    assert not (workspace / "good.txt").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_a_symlink_on_the_way_is_refused(artifact_store: ArtifactStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "linked-dir").symlink_to(outside)
    (workspace / "linked-file").symlink_to(outside / "target.txt")
    good = declared(artifact_store, "good.txt", b"fine\n")
    for name in ("linked-dir/x.txt", "linked-file"):
        bad = DeclaredArtifact(name=name, sha256=good.sha256, size=good.size)
        with pytest.raises(UnsafePath):
            artifact_store.materialize([good, bad], workspace)
    assert files_under(outside) == []
    assert not (workspace / "good.txt").exists()


def test_a_missing_blob_is_reported_before_anything_is_written(
    artifact_store: ArtifactStore, tmp_path: Path
) -> None:
    good = declared(artifact_store, "good.txt", b"fine\n")
    missing = DeclaredArtifact(name="missing.bin", sha256=sha(b"not stored"), size=10)
    workspace = tmp_path / "workspace"
    with pytest.raises(ArtifactNotFound):
        artifact_store.materialize([good, missing], workspace)
    assert files_under(workspace) == []


@pytest.mark.parametrize("address", ["../../etc/passwd", "ABC", "/etc/passwd", "a" * 63 + "/"])
def test_addresses_that_are_not_a_sha256_are_refused(artifact_store: ArtifactStore, address: str) -> None:
    with pytest.raises(UnsafePath):
        artifact_store.get(address)
    with pytest.raises(UnsafePath):
        artifact_store.exists(address)
    with pytest.raises(UnsafePath):
        artifact_store.delete(address)


# --------------------------------------------------------------------------------------------------
# delete


def test_delete_removes_one_blob_and_deleting_it_again_does_nothing(
    artifact_backend: ArtifactBackend, artifact_store: ArtifactStore
) -> None:
    kept = artifact_store.put(b"kept bytes")
    gone = artifact_store.put(b"deleted bytes")
    assert artifact_store.delete(gone.sha256) is True
    assert not artifact_store.exists(gone.sha256)
    with pytest.raises(ArtifactNotFound):
        artifact_store.get(gone.sha256)
    with pytest.raises(ArtifactNotFound):
        artifact_store.location(gone.sha256)
    assert artifact_store.delete(gone.sha256) is False
    assert artifact_store.get(kept.sha256) == b"kept bytes"
    assert artifact_backend.count_blobs() == 1
    # The same bytes can be stored again under the same address.
    assert artifact_store.put(b"deleted bytes").sha256 == gone.sha256
    assert artifact_store.get(gone.sha256) == b"deleted bytes"


def test_a_deleted_manifest_leaves_its_entries(artifact_store: ArtifactStore) -> None:
    entry = declared(artifact_store, "src/a.py", b"print(1)\n")
    manifest = artifact_store.put_manifest([entry])
    assert artifact_store.delete(manifest.sha256) is True
    assert artifact_store.get(entry.sha256) == b"print(1)\n"
