"""A sandbox server told to stop (SIGTERM, as the kubelet stops a sandbox pod): it refuses new
requests, lets the running ones finish within its drain, and exits taking every process its
commands started with it, however they detached (their own session, a double fork)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from belay.sandbox.client import SandboxClient, SandboxUnavailable
from belay.sandbox.protocol import ReadyFile
from tests.sandbox.helpers import is_running, wait_gone
from tests.testenv.polling import wait_until_async
from tests.testenv.processes import dies_with_this_process

TOKEN = "pod-token"
# Leaves a process in a session of its own and a double-forked one, then waits for `go`.
DETACHING = (
    "setsid sleep 600 & echo $! > detached.pid; "
    "(sh -c 'sleep 600 & echo $! > orphan.pid') ; "
    "while [ ! -f go ]; do sleep 0.05; done; echo finished"
)


@dataclass
class Server:
    process: asyncio.subprocess.Process
    workspace: Path
    endpoint: str


@pytest.fixture
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    drain_s = getattr(request, "param", 600)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    ready_file = tmp_path / "ready.json"
    workspace = tmp_path / "ws"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "belay.sandbox.server",
        *("--workspace", str(workspace), "--port", "0", "--token-file", str(token_file)),
        *("--network-profile", "none", "--ready-file", str(ready_file), "--drain-s", str(drain_s)),
        start_new_session=True,
        preexec_fn=dies_with_this_process(),
    )
    try:
        await wait_until_async(
            lambda: ready_file.exists() or process.returncode is not None,
            "the sandbox server's ready file",
            timeout=20,
            interval=0.02,
        )
        ready = ReadyFile.model_validate_json(ready_file.read_text())
        yield Server(process, workspace, ready.endpoint)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


async def wait_for_file(path: Path) -> int:
    return await wait_until_async(
        lambda: int(path.read_text()),
        f"a pid in {path}",
        timeout=20,
        interval=0.02,
        ignoring=(OSError, ValueError),
    )


async def test_sigterm_lets_the_running_request_finish_refuses_new_ones_and_kills_every_process(
    server: Server,
) -> None:
    async with SandboxClient(server.endpoint, TOKEN) as client:
        running = asyncio.create_task(client.call("run_command", {"command": ["sh", "-c", DETACHING]}))
        detached = await wait_for_file(server.workspace / "detached.pid")
        orphan = await wait_for_file(server.workspace / "orphan.pid")
        assert is_running(detached) and is_running(orphan)

        server.process.send_signal(signal.SIGTERM)

        async def refused() -> SandboxUnavailable | None:
            try:
                await client.health()
            except SandboxUnavailable as refusal:
                return refusal
            return None

        # Until the signal is handled: then no request is taken.
        refusal = await wait_until_async(
            refused, "the server to refuse new requests", timeout=20, interval=0.02
        )
        assert "stopping" in str(refusal)
        assert not running.done()  # still running: the drain waits for it

        (server.workspace / "go").touch()
        result = await running
    assert result["output"]["stdout"] == "finished\n", result
    assert await server.process.wait() == 0
    await wait_gone(detached)
    await wait_gone(orphan)


@pytest.mark.parametrize("server", [0], indirect=True)
async def test_without_a_drain_sigterm_kills_the_running_command_at_once(server: Server) -> None:
    async with SandboxClient(server.endpoint, TOKEN) as client:
        running = asyncio.create_task(client.call("run_command", {"command": ["sh", "-c", DETACHING]}))
        detached = await wait_for_file(server.workspace / "detached.pid")
        orphan = await wait_for_file(server.workspace / "orphan.pid")
        server.process.send_signal(signal.SIGTERM)
        assert await server.process.wait() == 0
        try:
            result = await running
        except SandboxUnavailable:
            pass  # cut off: the server went away before answering
        else:  # or it answered that the command was killed
            assert result["output"]["exit_code"] != 0 and "finished" not in result["output"]["stdout"], result
    await wait_gone(detached)
    await wait_gone(orphan)
