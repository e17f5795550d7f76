"""Network profile `none`: commands cannot reach the host's loopback when isolation is reported,
and the health report says plainly when isolation is not in force."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.sandbox import isolation
from belay.sandbox.client import SandboxClient
from belay.sandbox.local import LocalSandbox
from belay.sandbox.protocol import ReadyFile
from belay.sandbox.walls import WALLS_ENV
from tests.sandbox.helpers import wait_gone
from tests.sandbox.netns import PrivateNetwork, private_network
from tests.testenv.polling import wait_until_async


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


@pytest.mark.parametrize("walls", ["on", "off"])
async def test_profile_none_blocks_the_host_loopback_when_isolated(
    walls: str, tmp_path: Path, host_listener: HostListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With walls, bwrap's network namespace; without, the server re-executed under unshare."""
    monkeypatch.setenv(WALLS_ENV, walls)
    sandbox = await LocalSandbox.start(tmp_path, "isolated", "none", isolation_level="best-effort")
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
    monkeypatch.setenv(WALLS_ENV, "off")
    monkeypatch.setenv(isolation.UNSHARE_ENV, str(tmp_path / "no-unshare-here"))
    sandbox = await LocalSandbox.start(tmp_path, "open", "none", isolation_level="best-effort")
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
    monkeypatch.setenv(WALLS_ENV, "off")
    monkeypatch.setenv(isolation.UNSHARE_ENV, str(refusing))
    sandbox = await LocalSandbox.start(tmp_path, "restricted", "none", isolation_level="best-effort")
    try:
        health = await sandbox.client.health()
        assert health.network_isolated is False
        assert "not enforced" in health.detail
        assert "Operation not permitted" in health.detail
        assert (await sandbox.client.call("run_command", {"command": "echo still works"}))["ok"] is True
    finally:
        await sandbox.stop()


async def test_profile_internet_is_the_host_network_inside_the_other_walls(
    tmp_path: Path, host_listener: HostListener
) -> None:
    sandbox = await LocalSandbox.start(tmp_path, "online", "internet")
    try:
        health = await sandbox.client.health()
        assert (health.profile, health.network_isolated) == ("internet", False)
        assert "profile internet" in health.detail
        assert "shares the host's net" in health.detail and "own pid, mnt" in health.detail
        assert sandbox.walls_in_force and "net" not in sandbox.walls.split("own ")[1].split(" namespaces")[0]
        result = await sandbox.client.call("run_command", {"command": connect_command(host_listener.port)})
        assert result["output"]["stdout"] == "connected\n", result
        assert host_listener.connections == 1
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
        await wait_until_async(
            lambda: ready_file.exists() or process.returncode is not None,
            "the sandbox server's ready file",
            timeout=20,
            interval=0.02,
        )
        ready = ReadyFile.model_validate_json(ready_file.read_text())
        assert ready.endpoint.startswith("http://127.0.0.1:")
        async with SandboxClient(ready.endpoint, "pod-token") as client:
            health = await client.health()
            if not health.network_isolated:
                pytest.skip(f"this machine cannot isolate the sandbox network: {health.detail}")
            assert "each command" in health.detail
            # No bubblewrap here: the report names what stands in for the walls, and what it lacks.
            assert (
                "walls: no bubblewrap walls" in health.detail and "can read its token file" in health.detail
            )
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
        await wait_gone(process.pid)


class HttpListener(HostListener):
    """Answers every HTTP request with `hello from <address>`."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            body = f"hello from {writer.get_extra_info('sockname')[0]}".encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            await writer.drain()
        writer.close()


@pytest.fixture
async def web_servers() -> AsyncIterator[tuple[PrivateNetwork, HttpListener, HttpListener, HttpListener]]:
    """The same port on two addresses of another machine (one the allowlist opens, one it does
    not), and on this host's loopback, which no allowlist opens."""
    with private_network() as network:
        allowed, refused, host = HttpListener(), HttpListener(), HttpListener()
        first, second = network.remote_addresses
        allowed.server = await asyncio.start_server(allowed.handle, sock=network.remote_listener(first))
        port = allowed.server.sockets[0].getsockname()[1]
        refused.server = await asyncio.start_server(
            refused.handle, sock=network.remote_listener(second, port)
        )
        host.server = await asyncio.start_server(host.handle, "127.0.0.1", port)
        allowed.port = refused.port = host.port = port
        try:
            yield network, allowed, refused, host
        finally:
            for listener in (allowed, refused, host):
                assert listener.server is not None
                listener.server.close()
                await listener.server.wait_closed()


FETCH = """
import socket, sys, urllib.request
port, allowed, refused = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for host in (allowed, refused):
    try:
        print(host, urllib.request.urlopen(f"http://{host}:{port}/", timeout=10).read().decode())
    except Exception as error:
        print(host, "refused:", error)
try:
    socket.create_connection((allowed, port), timeout=5)
    print("direct connected")
except OSError as error:
    print("direct failed:", error)
# A listed host name that is this host, through the proxy by hand (the proxy variables skip localhost).
with socket.create_connection(("127.0.0.1", 3128)) as proxy:
    proxy.sendall(f"GET http://localhost:{port}/ HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n".encode())
    print("by name:", proxy.makefile("rb").read().decode().split("\\r\\n")[0])
"""


async def test_profile_allowlist_opens_only_what_it_lists(
    tmp_path: Path, web_servers: tuple[PrivateNetwork, HttpListener, HttpListener, HttpListener]
) -> None:
    network, allowed, refused, host = web_servers
    first, second = network.remote_addresses
    sandbox = await LocalSandbox.start(
        tmp_path, "fetcher", "allowlist", allowlist=[first, "localhost", "not a host"]
    )
    try:
        health = await sandbox.client.health()
        assert health.network_isolated is True
        assert f"opens only localhost, {first}/32 (any port)" in health.detail
        assert "ignored entries (neither a host name nor an address): not a host" in health.detail
        await sandbox.client.call("write_file", {"path": "fetch.py", "content": FETCH})
        result = await sandbox.client.call(
            "run_command", {"command": ["python", "fetch.py", str(allowed.port), first, second]}
        )
        lines = result["output"]["stdout"].splitlines()
    finally:
        await sandbox.stop()
    assert lines[0] == f"{first} hello from {first}", result
    assert lines[1].startswith(f"{second} refused: HTTP Error 403"), result
    assert lines[2].startswith("direct failed:"), result
    assert lines[3] == "by name: HTTP/1.1 403 Forbidden", result
    assert (allowed.connections, refused.connections, host.connections) == (1, 0, 0)
    log = (sandbox.sandbox_dir / "egress-1.log").read_text()
    assert f"opened: {first}" in log and f"refused: {second}" in log
    assert "127.0.0.1 is a loopback address: the proxy never connects to the host it runs on" in log
