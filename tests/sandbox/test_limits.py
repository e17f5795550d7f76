"""Bounded input: a request body above the sandbox server's limit gets a clear 413 without being
held in memory, a file put is streamed, and a command above the command limit is a clear tool
error, not a failed exec."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from belay.sandbox.app import MAX_REQUEST_BYTES
from belay.sandbox.local import LocalSandbox
from belay.sandbox.protocol import MAX_COMMAND_BYTES

CHUNK = b"x" * (1024 * 1024)


def peak_memory_bytes(pid: int) -> int:
    """The process's peak resident set size (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def session_for(sandbox: LocalSandbox) -> aiohttp.ClientSession:
    connector = aiohttp.UnixConnector(path=sandbox.endpoint.removeprefix("unix://"))
    return aiohttp.ClientSession(connector=connector, headers={"Authorization": f"Bearer {sandbox.token}"})


async def body_of(megabytes: int, prefix: bytes = b"") -> AsyncIterator[bytes]:
    """Sent chunked: no Content-Length, so only reading can find out how big it is."""
    yield prefix
    for _ in range(megabytes):
        yield CHUNK


async def test_a_300_mib_tool_call_is_refused_with_413_and_never_held_in_memory(
    sandbox: LocalSandbox,
) -> None:
    before = peak_memory_bytes(sandbox.pid)
    async with (
        session_for(sandbox) as session,
        session.post(
            "http://sandbox/v1/tools/write_file",
            data=body_of(300, b'{"path": "big.txt", "content": "'),
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        assert response.status == 413
        error = (await response.json())["error"]
    assert f"limit of {MAX_REQUEST_BYTES} bytes" in error and "PUT /v1/files" in error
    assert peak_memory_bytes(sandbox.pid) - before < 4 * MAX_REQUEST_BYTES
    assert not (sandbox.files / "big.txt").exists()
    assert (await sandbox.client.health()).ok


async def test_a_declared_body_above_the_limit_is_refused_before_it_is_read(sandbox: LocalSandbox) -> None:
    oversized = b"x" * (MAX_REQUEST_BYTES + 1)
    async with (
        session_for(sandbox) as session,
        session.post("http://sandbox/v1/manifest", data=oversized) as response,
    ):
        assert response.status == 413
        assert "limit of" in (await response.json())["error"]


async def test_a_file_put_is_streamed_to_disk_not_held_in_memory(sandbox: LocalSandbox) -> None:
    megabytes = 96
    digest = hashlib.sha256(CHUNK * megabytes).hexdigest()
    before = peak_memory_bytes(sandbox.pid)
    async with (
        session_for(sandbox) as session,
        session.put(
            "http://sandbox/v1/files/data/big.bin",
            data=body_of(megabytes),
            headers={"X-Content-Sha256": digest},
        ) as response,
    ):
        assert response.status == 200, await response.text()
    assert peak_memory_bytes(sandbox.pid) - before < megabytes * 1024 * 1024 // 2
    assert (sandbox.files / "data" / "big.bin").stat().st_size == megabytes * 1024 * 1024


async def test_a_command_above_the_limit_is_a_clear_tool_error(sandbox: LocalSandbox) -> None:
    too_long = "echo " + "x" * (128 * 1024)
    response = await sandbox.client.call("run_command", {"command": too_long})
    assert response["ok"] is False
    assert f"limit of {MAX_COMMAND_BYTES}" in response["error"] and "write_file" in response["error"]
    as_argv = await sandbox.client.call("run_command", {"command": ["echo", "x" * MAX_COMMAND_BYTES]})
    assert as_argv["ok"] is False and "limit of" in as_argv["error"]
    fits = await sandbox.client.call("run_command", {"command": "echo " + "x" * 1000})
    assert fits["ok"] is True and fits["output"]["exit_code"] == 0
