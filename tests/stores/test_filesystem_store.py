"""What is specific to the filesystem artifact store and the shared materialize."""

from __future__ import annotations

import hashlib
import io
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.journal.events import DeclaredArtifact
from belay.stores.base import ArtifactCorrupted, UnsafePath
from belay.stores.filesystem import FilesystemArtifactStore
from belay.stores.materialize import materialize_from
from tests.conformance.backends import corrupt_filesystem_blob


def blob_files(store: FilesystemArtifactStore) -> list[Path]:
    return sorted(p for p in (store.root / "blobs").rglob("*") if p.is_file())


def test_blobs_live_at_their_fanned_out_address_read_only(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    data = b"hello"
    digest = hashlib.sha256(data).hexdigest()
    ref = store.put(data)
    path = tmp_path / "artifacts" / "blobs" / digest[:2] / digest
    assert blob_files(store) == [path]
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert ref.uri == path.as_uri()
    assert store.location(digest) == str(path)


class FailingStream(io.RawIOBase):
    """Yields some bytes, then fails like a dropped connection."""

    def __init__(self) -> None:
        self.calls = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise ConnectionResetError("source went away")
        return b"x" * 1024


def test_a_put_that_fails_midway_leaves_no_blob_and_no_temporary_file(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    with pytest.raises(ConnectionResetError):
        store.put(FailingStream())
    assert blob_files(store) == []
    assert list((tmp_path / "artifacts" / "tmp").iterdir()) == []


def test_putting_the_right_bytes_again_repairs_a_damaged_copy(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    ref = store.put(b"precious bytes")
    corrupt_filesystem_blob(store, ref.sha256)
    store.put(b"precious bytes")
    assert store.get(ref.sha256) == b"precious bytes"
    assert len(blob_files(store)) == 1


def test_concurrent_puts_of_the_same_bytes_store_one_blob(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    data = os.urandom(256 * 1024)
    with ThreadPoolExecutor(max_workers=8) as pool:
        refs = list(pool.map(lambda _: store.put(data), range(16)))
    assert {ref.sha256 for ref in refs} == {hashlib.sha256(data).hexdigest()}
    assert len(blob_files(store)) == 1
    assert store.get(refs[0].sha256) == data


class SwapsInASymlink(FilesystemArtifactStore):
    """Replaces a checked directory with a symlink to elsewhere between the checks and the writes,
    the race an attacker sharing the workspace would try."""

    def __init__(self, root: Path, victim: Path, elsewhere: Path) -> None:
        super().__init__(root)
        self.victim, self.elsewhere = victim, elsewhere

    def exists(self, sha256: str) -> bool:
        if self.victim.is_dir() and not self.victim.is_symlink():
            self.victim.rmdir()
            self.victim.symlink_to(self.elsewhere)
        return super().exists(sha256)


def test_a_symlink_swapped_in_after_the_checks_is_still_refused(tmp_path: Path) -> None:
    workspace, elsewhere = tmp_path / "workspace", tmp_path / "elsewhere"
    (workspace / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    store = SwapsInASymlink(tmp_path / "artifacts", workspace / "sub", elsewhere)
    ref = store.put(b"payload")
    entry = DeclaredArtifact(name="sub/file.txt", sha256=ref.sha256, size=ref.size)
    with pytest.raises(UnsafePath):
        materialize_from(store, [entry], workspace)
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_workspace_root_is_refused(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    ref = store.put(b"payload")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    entry = DeclaredArtifact(name="file.txt", sha256=ref.sha256, size=ref.size)
    with pytest.raises(UnsafePath):
        store.materialize([entry], tmp_path / "link")
    assert list((tmp_path / "real").iterdir()) == []


def test_materialize_never_grants_setuid_from_a_manifest(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    ref = store.put(b"#!/bin/sh\n")
    entry = DeclaredArtifact(name="run.sh", sha256=ref.sha256, size=ref.size, mode=0o4755)
    [path] = store.materialize([entry], tmp_path / "workspace")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_a_wrong_declared_size_is_refused(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    ref = store.put(b"twelve bytes")
    entry = DeclaredArtifact(name="f.txt", sha256=ref.sha256, size=ref.size + 1)
    with pytest.raises(ArtifactCorrupted, match="declared"):
        store.materialize([entry], tmp_path / "workspace")
    assert not (tmp_path / "workspace" / "f.txt").exists()
