from __future__ import annotations

import hashlib
import stat

import pytest

from belay.sandbox.client import SandboxError
from belay.sandbox.local import LocalSandbox

# Each test here touches only its own paths, so the module shares one sandbox.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def sandbox(shared_sandbox: LocalSandbox) -> LocalSandbox:
    return shared_sandbox


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_put_verifies_the_hash_before_writing(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError, match="sha256 mismatch") as caught:
        await sandbox.client.put_file("data/x.bin", b"real bytes", sha(b"other bytes"))
    assert caught.value.status == 400
    assert not (sandbox.files / "data").exists()


async def test_put_then_get_round_trips_bytes_and_mode(sandbox: LocalSandbox) -> None:
    data = bytes(range(256)) * 100
    entry = await sandbox.client.put_file("deep/dir/blob.bin", data, sha(data), mode=0o600)
    assert (entry.name, entry.sha256, entry.size, entry.mode) == (
        "deep/dir/blob.bin",
        sha(data),
        len(data),
        0o600,
    )
    assert stat.S_IMODE((sandbox.files / "deep/dir/blob.bin").stat().st_mode) == 0o600
    assert await sandbox.client.get_file("deep/dir/blob.bin") == data


async def test_put_without_hash_header_is_refused(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError, match="X-Content-Sha256"):
        await sandbox.client.put_file("a.txt", b"x", "")


async def test_get_missing_file_is_404(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.client.get_file("missing.txt")
    assert caught.value.status == 404


async def test_manifest_describes_declared_files(sandbox: LocalSandbox) -> None:
    await sandbox.client.call("write_file", {"path": "a.txt", "content": "A"})
    await sandbox.client.call("write_file", {"path": "sub/b.sh", "content": "B", "mode": 0o755})
    entries = await sandbox.client.manifest(["sub/b.sh", "a.txt"])
    assert [(e.name, e.sha256, e.size, e.mode) for e in entries] == [
        ("sub/b.sh", sha(b"B"), 1, 0o755),
        ("a.txt", sha(b"A"), 1, 0o644),
    ]


async def test_manifest_with_a_missing_path_is_an_error(sandbox: LocalSandbox) -> None:
    await sandbox.client.call("write_file", {"path": "a.txt", "content": "A"})
    with pytest.raises(SandboxError, match="missing") as caught:
        await sandbox.client.manifest(["a.txt", "undeclared.txt"])
    assert caught.value.status == 404
