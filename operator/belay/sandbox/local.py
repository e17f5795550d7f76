"""Local sandbox processes: one sandbox server per subagent, each with its own workspace.

Layout under `base_dir/<name>/`: `workspace-<n>/` (a fresh one per start), `token`, `server.json`
(the running server's pid and instance marker) and `server-<n>.log`. The server runs in its own
session and process group, so killing the harness's process group leaves it alive; the next start
for the same name (a resumed harness) finds it through `server.json` and stops it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

from belay.sandbox import isolation
from belay.sandbox.client import SandboxClient, SandboxUnavailable
from belay.sandbox.isolation import NETWORK_PROFILES
from belay.sandbox.protocol import INSTANCE_ENV, ReadyFile

# Every process a local sandbox starts inherits INSTANCE_ENV, so stop() can find them all, even
# those that left the server's process group; the server reports it as its instance id.
# What a sandbox inherits from the harness's environment: enough to run programs, never the
# harness's credentials (model API keys, store secrets).
INHERITED_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM", "PYTHONPATH")
START_TIMEOUT_S = 20.0
STOP_GRACE_S = 3.0
# Unix socket paths are limited to 108 bytes; longer ones go to a short temporary directory.
MAX_SOCKET_PATH = 100
TEMPORARY_SOCKET_PREFIX = "belay-sbx-"


class ServerRecord(BaseModel):
    instance: str  # the marker in the server's environment: enough to find and stop it
    workspace: str
    pid: int | None = None  # known once spawned
    endpoint: str | None = None  # known once ready


def processes_with_marker(instance: str) -> list[int]:
    """Pids of live processes whose environment carries this sandbox instance's marker."""
    needle = f"{INSTANCE_ENV}={instance}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environment.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_instance(instance: str) -> None:
    for pid in processes_with_marker(instance):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def sandbox_environment(instance: str) -> dict[str, str]:
    inherited = {name: os.environ[name] for name in INHERITED_ENVIRONMENT if name in os.environ}
    if isolation.UNSHARE_ENV in os.environ:
        inherited[isolation.UNSHARE_ENV] = os.environ[isolation.UNSHARE_ENV]
    return {**inherited, INSTANCE_ENV: instance}


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, with no moment where it is readable by others."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def next_workspace_number(sandbox_dir: Path) -> int:
    numbers = [
        int(path.name.removeprefix("workspace-"))
        for path in sandbox_dir.glob("workspace-*")
        if path.name.removeprefix("workspace-").isdigit()
    ]
    return max(numbers, default=0) + 1


def socket_path_for(sandbox_dir: Path, number: int) -> Path:
    preferred = sandbox_dir / f"sandbox-{number}.sock"
    if len(str(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    return Path(tempfile.mkdtemp(prefix=TEMPORARY_SOCKET_PREFIX)) / "s.sock"


class LocalSandbox:
    def __init__(
        self,
        *,
        base_dir: Path,
        name: str,
        profile: str,
        workspace: Path,
        endpoint: str,
        token: str,
        pid: int,
        instance: str,
        network_isolated: bool,
        isolation_detail: str,
        process: asyncio.subprocess.Process,
    ) -> None:
        self.base_dir = base_dir
        self.name = name
        self.profile = profile
        self.workspace = workspace
        self.endpoint = endpoint
        self.token = token
        self.pid = pid
        self.instance = instance
        self.network_isolated = network_isolated
        self.isolation_detail = isolation_detail
        self.client = SandboxClient(endpoint, token, instance=instance)
        self._process = process

    def __repr__(self) -> str:
        return f"LocalSandbox(name={self.name!r}, pid={self.pid}, workspace={str(self.workspace)!r})"

    @property
    def sandbox_dir(self) -> Path:
        return self.base_dir / self.name

    @classmethod
    async def start(cls, base_dir: Path, name: str, profile: str) -> LocalSandbox:
        """Start a server on a fresh, empty workspace and wait until it answers /healthz."""
        if profile not in NETWORK_PROFILES:
            raise ValueError(f"unknown network profile {profile!r}; expected one of {NETWORK_PROFILES}")
        base_dir = base_dir.absolute()
        sandbox_dir = base_dir / name
        sandbox_dir.mkdir(parents=True, exist_ok=True)
        stop_recorded_server(sandbox_dir)
        number = next_workspace_number(sandbox_dir)
        workspace = sandbox_dir / f"workspace-{number}"
        workspace.mkdir()
        token = secrets.token_urlsafe(32)
        token_file = sandbox_dir / "token"
        write_private(token_file, token)
        socket_path = socket_path_for(sandbox_dir, number)
        ready_file = sandbox_dir / f"ready-{number}.json"
        ready_file.unlink(missing_ok=True)
        instance = uuid.uuid4().hex
        record_path = sandbox_dir / "server.json"
        # Recorded before the spawn: a harness killed while the server starts still leaves a
        # record the next start uses to stop it.
        record_path.write_text(ServerRecord(instance=instance, workspace=str(workspace)).model_dump_json())
        log_path = sandbox_dir / f"server-{number}.log"
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "belay.sandbox.server",
                "--workspace",
                str(workspace),
                "--socket",
                str(socket_path),
                "--token-file",
                str(token_file),
                "--network-profile",
                profile,
                "--ready-file",
                str(ready_file),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=sandbox_environment(instance),
                start_new_session=True,
            )
        try:
            ready = await wait_until_ready(process, ready_file, log_path)
        except BaseException:
            kill_instance(instance)
            await process.wait()
            raise
        record = ServerRecord(
            instance=instance, workspace=str(workspace), pid=process.pid, endpoint=ready.endpoint
        )
        record_path.write_text(record.model_dump_json())
        sandbox = cls(
            base_dir=base_dir,
            name=name,
            profile=profile,
            workspace=workspace,
            endpoint=ready.endpoint,
            token=token,
            pid=process.pid,
            instance=instance,
            network_isolated=ready.network_isolated,
            isolation_detail=ready.detail,
            process=process,
        )
        try:
            await sandbox.client.health()
        except BaseException:
            await sandbox.stop()
            raise
        return sandbox

    async def stop(self) -> None:
        """Stop the server and every process it started; returns once none is left."""
        await self.client.close()
        # Nothing to shut down gracefully: the server answers a write only once it is on disk, so
        # killing it loses nothing, and is much quicker than an orderly interpreter exit.
        kill_instance(self.instance)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        await self._process.wait()
        deadline = time.monotonic() + STOP_GRACE_S
        while processes_with_marker(self.instance) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        socket_path = Path(self.endpoint.removeprefix("unix://"))
        socket_path.unlink(missing_ok=True)
        if socket_path.parent.name.startswith(TEMPORARY_SOCKET_PREFIX):
            shutil.rmtree(socket_path.parent, ignore_errors=True)
        record = self.sandbox_dir / "server.json"
        with contextlib.suppress(FileNotFoundError, ValueError):
            if ServerRecord.model_validate_json(record.read_text()).instance == self.instance:
                record.unlink()

    async def replace(self) -> LocalSandbox:
        """Stop this sandbox and start a clean one (a new, empty workspace) under the same name."""
        await self.stop()
        return await LocalSandbox.start(self.base_dir, self.name, self.profile)


def stop_recorded_servers(base_dir: Path) -> list[str]:
    """Stop every sandbox server recorded under base_dir, whatever its name. A new harness attempt
    calls this before starting its sandboxes: it owns them all now, including those of subagents
    it will not restart (already finished) that the killed attempt left running. Returns the names
    whose record was found."""
    names = []
    for record in sorted(base_dir.glob("*/server.json")):
        names.append(record.parent.name)
        stop_recorded_server(record.parent)
    return names


def stop_recorded_server(sandbox_dir: Path) -> None:
    """Kill a server left running by an earlier harness process (killed before it could stop it)."""
    record_path = sandbox_dir / "server.json"
    try:
        record = ServerRecord.model_validate_json(record_path.read_text())
    except (FileNotFoundError, ValueError):
        return
    kill_instance(record.instance)
    record_path.unlink(missing_ok=True)


async def wait_until_ready(
    process: asyncio.subprocess.Process, ready_file: Path, log_path: Path
) -> ReadyFile:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready_file.exists():
            return ReadyFile.model_validate_json(ready_file.read_text())
        if process.returncode is not None:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 0.02)
    log_tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    state = f"exited with {process.returncode}" if process.returncode is not None else "did not become ready"
    raise SandboxUnavailable(f"sandbox server {state} within {START_TIMEOUT_S}s; log:\n{log_tail}")
