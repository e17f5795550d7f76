from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from belay.journal.events import DeclaredArtifact
from belay.sandbox.local import LocalSandbox
from belay.sandbox.restore import (
    RestoreVerificationFailed,
    check_declared_names,
    manifest_mismatches,
    restore,
    verify_restored,
)
from belay.stores.base import UnsafePath
from belay.stores.filesystem import FilesystemArtifactStore

# Each test here restores under a directory of its own, so the module shares one sandbox.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def sandbox(shared_sandbox: LocalSandbox) -> LocalSandbox:
    return shared_sandbox


def declare(store: FilesystemArtifactStore, name: str, data: bytes, mode: int = 0o644) -> DeclaredArtifact:
    ref = store.put(data)
    return DeclaredArtifact(name=name, sha256=ref.sha256, size=ref.size, uri=ref.uri, mode=mode)


async def test_restore_writes_exactly_the_declared_files(tmp_path: Path, sandbox: LocalSandbox) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    entries = [
        declare(store, "exact/repo/confparse/parser.py", b"def parse(text):\n    return {}\n"),
        declare(store, "exact/repo/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755),
        declare(store, "exact/notes/empty.txt", b""),
    ]
    manifest = await restore(sandbox.client, store, entries)
    assert [(m.name, m.sha256, m.size, m.mode) for m in manifest] == [
        (e.name, e.sha256, e.size, e.mode) for e in entries
    ]
    listed = await sandbox.client.call("list_files", {"path": "exact"})
    assert listed["output"]["files"] == sorted(e.name for e in entries)
    result = await sandbox.client.call("run_command", {"command": "./exact/repo/run.sh", "timeout_s": 10})
    assert result["output"]["stdout"] == "ok\n"


@pytest.mark.parametrize("bad_name", ["../escape.txt", "/etc/cron.d/x", "a/../../b"])
async def test_restore_refuses_every_unsafe_name_before_writing(
    tmp_path: Path, sandbox: LocalSandbox, bad_name: str
) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    entries = [declare(store, "refused/first.txt", b"1"), declare(store, bad_name, b"2")]
    with pytest.raises(UnsafePath):
        await restore(sandbox.client, store, entries)
    assert not (sandbox.files / "refused").exists()


async def test_a_name_declared_twice_is_refused() -> None:
    entry = DeclaredArtifact(name="a.txt", sha256="0" * 64, size=0)
    with pytest.raises(UnsafePath, match="twice"):
        check_declared_names([entry, entry.model_copy(update={"name": "./a.txt"})])


async def test_verification_catches_a_file_that_differs(tmp_path: Path, sandbox: LocalSandbox) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    entries = [declare(store, "state/plan.json", b'{"step": 3}'), declare(store, "state/b.txt", b"b")]
    await restore(sandbox.client, store, entries)
    # Something in the sandbox changes a declared file after it arrived.
    await sandbox.client.call("run_command", {"command": "printf '{\"step\": 4}' > state/plan.json"})
    with pytest.raises(RestoreVerificationFailed, match=r"state/plan\.json") as caught:
        await verify_restored(sandbox.client, entries)
    changed = hashlib.sha256(b'{"step": 4}').hexdigest()
    assert caught.value.mismatches == [f"state/plan.json: sha256 {changed} but declared {entries[0].sha256}"]


async def test_verification_catches_a_missing_file(tmp_path: Path, sandbox: LocalSandbox) -> None:
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    entries = [declare(store, "removed/a.txt", b"a")]
    await restore(sandbox.client, store, entries)
    await sandbox.client.call("run_command", {"command": "rm removed/a.txt"})
    with pytest.raises(RestoreVerificationFailed, match="missing"):
        await verify_restored(sandbox.client, entries)


async def test_mismatches_compare_hash_and_size() -> None:
    declared = DeclaredArtifact(name="a", sha256="a" * 64, size=1)
    assert manifest_mismatches([declared], [declared]) == []
    assert manifest_mismatches([declared], [declared.model_copy(update={"size": 2})]) == [
        "a: 2 bytes but declared 1"
    ]
    assert manifest_mismatches([declared], []) == ["a: missing"]
