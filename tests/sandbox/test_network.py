"""Network profile `none`: commands cannot reach the host's loopback when isolation is reported,
and the health report says plainly when isolation is not in force."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.sandbox import isolation
from belay.sandbox.client import SandboxClient
from belay.sandbox.local import LocalSandbox
from belay.sandbox.protocol import ReadyFile
from tests.sandbox.helpers import eventually_gone


class HostListener:
    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


@pytest.fixture
async def host_listener() -> AsyncIterator[HostListener]:
    listener = HostListener()
    listener.server = await asyncio.start_server(listener.handle, "127.0.0.1", 0)
    listener.port = listener.server.sockets[0].getsockname()[1]
    yield listener
    listener.server.close()
    await listener.server.wait_closed()


SELF_CONNECT = (
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "socket.create_connection(s.getsockname(), timeout=5); print('self-connected')"
)


def connect_command(port: int) -> list[str]:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    return ["python", "-c", code]


async def test_profile_none_blocks_the_host_loopback_when_isolated(
    tmp_path: Path, host_listener: HostListener
) -> None:
    sandbox = await LocalSandbox.start(tmp_path, "isolated", "none")
    try:
        health = await sandbox.client.health()
        assert health.network_isolated == sandbox.network_isolated
        if not health.network_isolated:
            pytest.skip(f"this machine cannot isolate the sandbox network: {health.detail}")
        assert "namespace" in health.detail
        result = await sandbox.client.call("run_command", {"command": connect_command(host_listener.port)})
        assert result["ok"] is True
        assert result["output"]["exit_code"] != 0
        assert "connected" not in result["output"]["stdout"]
        assert host_listener.connections == 0
        own_loopback = await sandbox.client.call("run_command", {"command": ["python", "-c", SELF_CONNECT]})
        assert own_loopback["output"]["stdout"] == "self-connected\n", own_loopback
    finally:
        await sandbox.stop()


async def test_health_says_so_when_isolation_is_unavailable(
    tmp_path: Path, host_listener: HostListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(isolation.UNSHARE_ENV, str(tmp_path / "no-unshare-here"))
    sandbox = await LocalSandbox.start(tmp_path, "open", "none")
    try:
        health = await sandbox.client.health()
        assert health.network_isolated is False
        assert "unshare is not available" in health.detail
        # The report is honest: the same command that fails when isolated gets through.
        result = await sandbox.client.call("run_command", {"command": connect_command(host_listener.port)})
        assert result["output"]["exit_code"] == 0, result
        assert host_listener.connections == 1
    finally:
        await sandbox.stop()


async def test_health_gives_the_reason_when_unshare_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a pod under the restricted profile: unshare exists but the kernel says no."""
    refusing = tmp_path / "unshare"
    refusing.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setenv(isolation.UNSHARE_ENV, str(refusing))
    sandbox = await LocalSandbox.start(tmp_path, "restricted", "none")
    try:
        health = await sandbox.client.health()
        assert health.network_isolated is False
        assert "not enforced" in health.detail
        assert "Operation not permitted" in health.detail
        assert (await sandbox.client.call("run_command", {"command": "echo still works"}))["ok"] is True
    finally:
        await sandbox.stop()


async def test_profile_internet_is_reported_as_not_isolated(tmp_path: Path) -> None:
    sandbox = await LocalSandbox.start(tmp_path, "online", "internet")
    try:
        health = await sandbox.client.health()
        assert (health.profile, health.network_isolated) == ("internet", False)
        assert "profile internet" in health.detail
    finally:
        await sandbox.stop()


async def test_tcp_server_isolates_each_command(tmp_path: Path, host_listener: HostListener) -> None:
    """A sandbox pod listens on TCP, so the server stays in the pod's namespace and each command
    gets its own."""
    token_file = tmp_path / "token"
    token_file.write_text("pod-token")
    ready_file = tmp_path / "ready.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "belay.sandbox.server",
        "--workspace",
        str(tmp_path / "ws"),
        "--port",
        "0",
        "--token-file",
        str(token_file),
        "--network-profile",
        "none",
        "--ready-file",
        str(ready_file),
        start_new_session=True,
    )
    try:
        for _ in range(1000):
            if ready_file.exists() or process.returncode is not None:
                break
            await asyncio.sleep(0.02)
        ready = ReadyFile.model_validate_json(ready_file.read_text())
        assert ready.endpoint.startswith("http://127.0.0.1:")
        async with SandboxClient(ready.endpoint, "pod-token") as client:
            health = await client.health()
            if not health.network_isolated:
                pytest.skip(f"this machine cannot isolate the sandbox network: {health.detail}")
            assert "each command" in health.detail
            result = await client.call("run_command", {"command": connect_command(host_listener.port)})
            assert result["output"]["exit_code"] != 0
            assert host_listener.connections == 0
            namespaces = await client.call("run_command", {"command": ["readlink", "/proc/self/ns/net"]})
            assert namespaces["output"]["stdout"].strip() != os.readlink("/proc/self/ns/net")
            # The command's own loopback works: it can serve and connect to itself.
            own_loopback = await client.call("run_command", {"command": ["python", "-c", SELF_CONNECT]})
            assert own_loopback["output"]["stdout"] == "self-connected\n", own_loopback
            missing = await client.call("run_command", {"command": ["no-such-program"]})
            assert missing["output"]["exit_code"] == 127
    finally:
        process.terminate()
        await process.wait()
        assert await eventually_gone(process.pid)
