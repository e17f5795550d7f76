"""Local sandbox processes: one sandbox server per subagent, each with its own workspace.

Layout under `base_dir/<name>/`: `workspace-<n>/` (a fresh one per start; in walls, only the
number's claim: the workspace itself is on the sandbox's own disk, a tmpfs that ends with it),
`run-<n>/` (the server's socket, made by the harness), `server.json` (what the next start needs
to stop this server) and `server-<n>.log`. With profile `allowlist`, `egress-<n>/` holds the
harness's proxy socket and `egress-<n>.log` what it opened and refused.

The server runs inside walls (`belay.sandbox.walls`): its own PID namespace, so stopping it kills
the namespace's first process and the kernel kills everything else in it; `--die-with-parent`
ends it with the harness process that started it. A harness that was frozen rather than killed
leaves its sandboxes running: the next start for the same name (a resumed harness) finds the
namespace through `server.json` and kills it.

Without walls (a subagent with `isolation: best-effort` on a machine that cannot build them, or
`BELAY_SANDBOX_WALLS=off` in the security tests), the server is a plain process as the harness's
user: every process it starts inherits an instance marker in its environment, and stopping it
kills whatever still carries the marker, which a process that clears its environment escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from belay import lifetime
from belay.api.resources import SandboxResources
from belay.sandbox import isolation, limits, walls
from belay.sandbox.client import SandboxClient, SandboxUnavailable
from belay.sandbox.egress import Allowlist, EgressProxy, proxy_environment
from belay.sandbox.isolation import NETWORK_PROFILES
from belay.sandbox.protocol import INSTANCE_ENV, ReadyFile
from belay.sandbox.walls import ISOLATION_LEVELS, WALLS_ENV, WallsUnavailable
from belay.views.escaping import one_line

# What a sandbox without walls inherits from the harness's environment: enough to run programs,
# never the harness's credentials (model API keys, store secrets).
INHERITED_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM", "PYTHONPATH")
START_TIMEOUT_S = 20.0
STOP_GRACE_S = 3.0
# Unix socket paths are limited to 108 bytes; longer ones go to a short temporary directory.
MAX_SOCKET_PATH = 100
TEMPORARY_SOCKET_PREFIX = "belay-sbx-"


class ServerRecord(BaseModel):
    instance: str  # the marker in the server's environment
    workspace: str
    pid: int | None = None  # known once spawned
    endpoint: str | None = None  # known once ready
    # A sandbox in walls: its PID namespace and that namespace's first process (host pid, start).
    pid_namespace: int | None = None
    first_pid: int | None = None
    first_start: int | None = None

    def namespace(self) -> walls.PidNamespace | None:
        if self.pid_namespace is None or self.first_pid is None:
            return None
        return walls.PidNamespace(self.pid_namespace, self.first_pid, self.first_start)


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


def short_directory(preferred: Path, socket_name: str) -> Path:
    """`preferred`, or a short temporary directory when a socket in it would exceed the limit."""
    if len(str(preferred / socket_name)) <= MAX_SOCKET_PATH:
        preferred.mkdir(mode=0o700)
        return preferred
    return Path(tempfile.mkdtemp(prefix=TEMPORARY_SOCKET_PREFIX))


def socket_path_for(sandbox_dir: Path, number: int) -> Path:
    preferred = sandbox_dir / f"sandbox-{number}.sock"
    if len(str(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    return Path(tempfile.mkdtemp(prefix=TEMPORARY_SOCKET_PREFIX)) / "s.sock"


@dataclass(frozen=True)
class WallsChoice:
    walled: bool
    description: str  # what is in force, or why nothing is, for the record
    version: str = ""


def choose_walls(name: str, isolation_level: str) -> WallsChoice:
    """Walls when the machine can build them; otherwise only what the subagent's isolation accepts."""
    if isolation_level not in ISOLATION_LEVELS:
        raise ValueError(f"unknown isolation {isolation_level!r}; expected one of {ISOLATION_LEVELS}")
    switch = os.environ.get(WALLS_ENV)
    if switch not in (None, "", "on", "off"):
        raise WallsUnavailable(
            f"{WALLS_ENV}={switch!r} is not understood; leave it unset (or 'off' in tests)"
        )
    if switch == "off":
        if isolation_level != "best-effort":
            raise WallsUnavailable(
                f"subagent {name}: {WALLS_ENV}=off would remove the walls its `isolation: required` "
                f"demands; the switch is for the security tests, unset it"
            )
        return WallsChoice(
            False,
            f"NONE: switched off by {WALLS_ENV}=off (a test switch; the subagent's isolation is best-effort)",
        )
    found = walls.availability()
    if found.available:
        return WallsChoice(True, "", found.version)
    if isolation_level == "required":
        raise WallsUnavailable(
            f"subagent {name} needs walls around its sandbox, but {found.reason}: install Debian's "
            "bubblewrap (`apt-get install bubblewrap`; `make setup` does so as root) or accept a sandbox "
            "without walls with `isolation: best-effort` on the subagent"
        )
    return WallsChoice(False, f"NONE: {found.reason}; the subagent's `isolation: best-effort` accepted that")


@dataclass(frozen=True)
class StartRequest:
    choice: WallsChoice
    sandbox_dir: Path
    number: int  # of the workspace, and of everything else this start makes
    workspace: Path
    token: str
    profile: str
    allowlist: tuple[str, ...]
    record: ServerRecord
    log_path: Path
    server_options: tuple[str, ...]  # the resource walls' figures (belay.sandbox.limits)
    disk_bytes: int  # the size of a walled sandbox's disk: the disk figure


@dataclass
class Started:
    process: asyncio.subprocess.Process  # bwrap, or the server itself without walls
    record: ServerRecord
    endpoint: str = ""  # as the harness reaches it
    ready: ReadyFile | None = None  # the server's own report, once it accepts requests
    walls: str = ""
    walls_in_force: bool = False
    run_dir: Path | None = None
    proxy: EgressProxy | None = None


class LocalSandbox:
    def __init__(
        self,
        *,
        base_dir: Path,
        name: str,
        profile: str,
        isolation_level: str,
        allowlist: tuple[str, ...],
        resources: SandboxResources,
        workspace: Path,
        token: str,
        instance: str,
        started: Started,
    ) -> None:
        self.resources = resources
        self.base_dir = base_dir
        self.name = name
        self.profile = profile
        self.isolation_level = isolation_level
        self.allowlist = allowlist
        self.workspace = workspace
        self.endpoint = started.endpoint
        self.token = token
        # The process the harness started and stops: bwrap, or the server itself without walls.
        self.pid = started.process.pid
        self.instance = instance
        assert started.ready is not None
        self.network_isolated = started.ready.network_isolated
        self.isolation_detail = started.ready.detail
        self.walls = started.walls
        self.walls_in_force = started.walls_in_force
        self.pid_namespace = started.record.namespace()
        self.client = SandboxClient(started.endpoint, token, instance=instance)
        self._started = started

    def __repr__(self) -> str:
        return f"LocalSandbox(name={self.name!r}, pid={self.pid}, workspace={str(self.workspace)!r})"

    @property
    def sandbox_dir(self) -> Path:
        return self.base_dir / self.name

    @property
    def files(self) -> Path:
        """The workspace's files as the host sees them while the sandbox runs: in walls, through
        the sandbox's server (the workspace is on the sandbox's own disk, not in `workspace`, and
        without root the server has a mount namespace of its own); without walls, `workspace`."""
        namespace = self.pid_namespace
        if namespace is None:
            return self.workspace
        servers = walls.children_in_namespace(namespace.inode, namespace.first_pid)
        return Path(f"/proc/{servers[0] if servers else namespace.first_pid}/root{walls.WORKSPACE}")

    @classmethod
    async def start(
        cls,
        base_dir: Path,
        name: str,
        profile: str,
        *,
        isolation_level: str = "required",
        allowlist: Sequence[str] = (),
        resources: SandboxResources | None = None,
    ) -> LocalSandbox:
        """Start a server on a fresh, empty workspace and wait until it answers /healthz, inside
        the resource walls `resources` gives (the manifest's defaults when None)."""
        if profile not in NETWORK_PROFILES:
            raise ValueError(f"unknown network profile {profile!r}; expected one of {NETWORK_PROFILES}")
        choice = choose_walls(name, isolation_level)
        base_dir = base_dir.absolute()
        sandbox_dir = base_dir / name
        sandbox_dir.mkdir(parents=True, exist_ok=True)
        stop_recorded_server(sandbox_dir)
        number = next_workspace_number(sandbox_dir)
        workspace = sandbox_dir / f"workspace-{number}"
        workspace.mkdir()
        token = secrets.token_urlsafe(32)
        instance = uuid.uuid4().hex
        record_path = sandbox_dir / "server.json"
        # Recorded before the spawn: a harness killed while the server starts still leaves a
        # record the next start uses to stop it.
        record = ServerRecord(instance=instance, workspace=str(workspace))
        record_path.write_text(record.model_dump_json())
        log_path = sandbox_dir / f"server-{number}.log"
        resources = resources or SandboxResources()
        request = StartRequest(
            choice,
            sandbox_dir,
            number,
            workspace,
            token,
            profile,
            tuple(allowlist),
            record,
            log_path,
            local_server_options(resources, choice.walled),
            resources.disk_mib * limits.MIB,
        )
        started = await (start_walled if choice.walled else start_plain)(request)
        sandbox = cls(
            base_dir=base_dir,
            name=name,
            profile=profile,
            isolation_level=isolation_level,
            allowlist=tuple(allowlist),
            resources=resources,
            workspace=workspace,
            token=token,
            instance=instance,
            started=started,
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
        await kill_started(self._started)
        if self._started.run_dir is None:
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
        return await LocalSandbox.start(
            self.base_dir,
            self.name,
            self.profile,
            isolation_level=self.isolation_level,
            allowlist=self.allowlist,
            resources=self.resources,
        )


async def kill_started(started: Started) -> None:
    record = started.record
    namespace = record.namespace()
    # Walls stopped before bwrap said which PID namespace it made: bwrap's first child holds it
    # (a session of its own, no marker), and once bwrap is gone it is nobody's child to find.
    unreported = started.run_dir is not None and namespace is None
    bwrap_children = bwrap_descendants(started.process) if unreported else {}
    if namespace is not None:
        namespace.kill()
    kill_instance(record.instance)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(started.process.pid, signal.SIGKILL)
    for pid in bwrap_children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    await started.process.wait()
    deadline = time.monotonic() + STOP_GRACE_S
    while still_running(bwrap_children) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if namespace is not None:
        await asyncio.to_thread(namespace.wait_until_gone)
    else:
        deadline = time.monotonic() + STOP_GRACE_S
        while processes_with_marker(record.instance) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    if started.proxy is not None:
        await started.proxy.stop()
        shutil.rmtree(started.proxy.socket_path.parent, ignore_errors=True)
    if started.run_dir is not None:
        shutil.rmtree(started.run_dir, ignore_errors=True)


def bwrap_descendants(bwrap: asyncio.subprocess.Process) -> dict[int, int]:
    """bwrap's live descendants, each with its start time (a pid given to another process later is
    not taken for it). bwrap is stopped first, so that it cannot start another one after the scan.
    Only for walls: without them, what the server started is its own to stop (and the attacks in
    tests/security show what escapes a sandbox without walls)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(bwrap.pid, signal.SIGSTOP)
    table = lifetime.process_table()
    return {pid: table[pid][1] for pid in lifetime.descendants(bwrap.pid) if pid in table}


def still_running(processes: dict[int, int]) -> bool:
    table = lifetime.process_table()
    return any(pid in table and table[pid][1] == start for pid, start in processes.items())


def local_server_options(resources: SandboxResources, walled: bool) -> tuple[str, ...]:
    """No cgroup of its own is writable on every host: rlimits, and the server's own count. Inside
    the walls /tmp shares the workspace's disk: it counts against the disk figure (without walls
    /tmp is the host's, not the sandbox's)."""
    disk_paths = ("/tmp",) if walled else ()
    return tuple(limits.server_arguments(resources, rlimits=True, cgroups=(), disk_paths=disk_paths))


async def start_plain(request: StartRequest) -> Started:
    """The server as a plain process of the harness's user: no walls but the network namespace."""
    sandbox_dir, number, record = request.sandbox_dir, request.number, request.record
    token_file = sandbox_dir / "token"
    write_private(token_file, request.token)
    socket_path = socket_path_for(sandbox_dir, number)
    ready_file = sandbox_dir / f"ready-{number}.json"
    ready_file.unlink(missing_ok=True)
    with request.log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "belay.sandbox.server",
            "--workspace",
            str(request.workspace),
            "--socket",
            str(socket_path),
            "--token-file",
            str(token_file),
            "--network-profile",
            request.profile,
            "--ready-file",
            str(ready_file),
            *request.server_options,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=sandbox_environment(record.instance),
            start_new_session=True,
            # Like bwrap's --die-with-parent for a walled one: the harness's death stops it (SIGTERM:
            # it kills what its commands started on the way out).
            preexec_fn=lifetime.die_with_parent(signal.SIGTERM),
        )
    started = Started(process, record, walls=request.choice.description)
    try:
        started.ready = await wait_until_ready(process, ready_file, request.log_path)
    except BaseException:
        await kill_started(started)
        raise
    started.endpoint = started.ready.endpoint
    record.pid, record.endpoint = process.pid, started.endpoint
    (sandbox_dir / "server.json").write_text(record.model_dump_json())
    return started


async def start_walled(request: StartRequest) -> Started:
    """The server inside bubblewrap (see belay.sandbox.walls). Its listening socket is made here,
    in `run-<n>/` on the harness's side, and handed to it: no path inside the walls holds it."""
    sandbox_dir, number, record = request.sandbox_dir, request.number, request.record
    bwrap = walls.bubblewrap_binary()
    if bwrap is None:
        raise WallsUnavailable("bubblewrap (bwrap) disappeared since it was found")
    run_dir = short_directory(sandbox_dir / f"run-{number}", "server.sock")
    walls.give_to_sandbox_user(request.workspace)
    socket_path = run_dir / "server.sock"
    listener = listening_socket(socket_path)
    try:
        proxy, egress_environment = await start_egress_proxy(request)
    except BaseException:
        listener.close()
        raise
    launch = walls.build_launch(
        bwrap=bwrap,
        profile=request.profile,
        listener=listener.fileno(),
        disk_bytes=request.disk_bytes,
        token=request.token,
        instance_env={INSTANCE_ENV: record.instance},
        egress_socket=proxy.socket_path if proxy is not None else None,
        egress_environment=egress_environment,
        server_options=request.server_options,
    )
    listener.detach()  # its descriptor is among the launch's, closed once bwrap has it
    try:
        process, cut_short = await spawn_bwrap(launch, request.log_path)
    except BaseException:
        os.close(launch.status_fd)
        os.close(launch.ready_fd)
        if proxy is not None:
            await proxy.stop()
        raise
    started = Started(process, record, endpoint=f"unix://{socket_path}", run_dir=run_dir, proxy=proxy)
    try:
        if cut_short:
            os.close(launch.status_fd)
            os.close(launch.ready_fd)
            raise asyncio.CancelledError
        await wait_behind_walls(started, request, launch.status_fd, launch.ready_fd)
    except BaseException:
        await kill_started(started)
        raise
    record.endpoint = started.endpoint
    (sandbox_dir / "server.json").write_text(record.model_dump_json())
    return started


def listening_socket(path: Path) -> socket.socket:
    """A Unix socket listening at `path`, which only the harness's user may connect to."""
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    return listener


async def start_egress_proxy(request: StartRequest) -> tuple[EgressProxy | None, dict[str, str]]:
    """For profile `allowlist`: the filtering proxy on the harness's side, and the environment
    that points the sandbox's clients at it. Nothing for any other profile."""
    if request.profile != "allowlist":
        return None, {}
    rules = Allowlist.parse(request.allowlist)
    egress_dir = short_directory(request.sandbox_dir / f"egress-{request.number}", "proxy.sock")
    proxy = await EgressProxy(
        rules, egress_dir / "proxy.sock", request.sandbox_dir / f"egress-{request.number}.log"
    ).start()
    environment = {
        **proxy_environment(walls.PROXY_PORT),
        walls.EGRESS_SOCKET_ENV: walls.EGRESS_SOCKET,
        walls.EGRESS_RULES_ENV: rules.describe(),
    }
    return proxy, environment


async def spawn_bwrap(launch: walls.Launch, log_path: Path) -> tuple[asyncio.subprocess.Process, bool]:
    """Start bwrap with the launch's descriptors (closed here once it has them); also whether the
    start was cancelled meanwhile, which the caller answers by stopping what it started."""
    try:
        with log_path.open("ab") as log:
            spawning = asyncio.ensure_future(
                asyncio.create_subprocess_exec(
                    *launch.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=launch.pass_fds,
                    start_new_session=True,
                    cwd="/",
                )
            )
            try:
                return await asyncio.shield(spawning), False
            except asyncio.CancelledError:
                # Cut short, asyncio would kill bwrap alone, and the first child it may have
                # started already would outlive it: the spawn ends, then the caller kills both.
                return await spawning, True
    finally:
        for descriptor in launch.pass_fds:
            os.close(descriptor)


async def wait_behind_walls(started: Started, request: StartRequest, status_fd: int, ready_fd: int) -> None:
    """Until the walled server is ready: bwrap's status (the sandbox's first pid and namespaces)
    recorded, the server's ready report read from its pipe, the walls described as observed from
    outside."""
    record, process = started.record, started.process
    try:
        status = await asyncio.wait_for(read_status(status_fd), START_TIMEOUT_S)
    except BaseException:
        os.close(ready_fd)
        raise
    record.pid = process.pid
    if status is not None:
        record.pid_namespace = int(status["pid-namespace"])
        record.first_pid = int(status["child-pid"])
        record.first_start = walls.start_ticks(record.first_pid)
    (request.sandbox_dir / "server.json").write_text(record.model_dump_json())
    try:
        ready = await asyncio.wait_for(read_status(ready_fd), START_TIMEOUT_S)
    except TimeoutError:
        ready = None
    if ready is None:
        log_tail = request.log_path.read_text(errors="replace")[-2000:] if request.log_path.exists() else ""
        raise SandboxUnavailable(
            f"sandbox server did not become ready within {START_TIMEOUT_S}s; log: {one_line(log_tail)}"
        )
    started.ready = ReadyFile.model_validate(ready)
    started.walls = describe_walls(request.choice, status, request.profile, request.disk_bytes)
    started.walls_in_force = True


async def read_status(descriptor: int) -> dict[str, Any] | None:
    """The first JSON document of a pipe (bwrap's status: the sandbox's first pid and its
    namespaces; the server's ready report), or None when the writer ended before writing it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(descriptor, "rb", buffering=0)
    )
    decoder = json.JSONDecoder()
    data = b""
    try:
        while chunk := await reader.read(4096):
            data += chunk
            try:
                status, _ = decoder.raw_decode(data.decode().lstrip())
            except ValueError:
                continue
            return status if isinstance(status, dict) else None
        return None
    finally:
        transport.close()


def describe_walls(choice: WallsChoice, status: dict[str, Any] | None, profile: str, disk_bytes: int) -> str:
    """The walls as observed from outside: the namespaces the sandbox does not share with the
    harness, and the uid its server runs as on the host."""
    if status is None:
        raise SandboxUnavailable("bwrap ended before reporting the sandbox's namespaces")
    first_pid = int(status["child-pid"])
    kinds = ("pid", "mnt", "ipc", "uts", "net")
    # bwrap names only the namespaces it created.
    own = [
        kind
        for kind in kinds
        if int(status.get(f"{kind}-namespace", walls.own_namespace(kind))) != walls.own_namespace(kind)
    ]
    if "pid" not in own or "mnt" not in own:
        raise SandboxUnavailable(f"bwrap did not give the sandbox its own pid and mount namespaces: {status}")
    if profile != "internet" and "net" not in own:
        raise SandboxUnavailable(f"bwrap did not give the sandbox its own network namespace: {status}")
    servers = walls.children_in_namespace(int(status["pid-namespace"]), first_pid)
    uid = walls.host_uid(servers[0]) if servers else None
    expected = walls.SANDBOX_UID if walls.privileged() else os.geteuid()
    if uid != expected:
        raise SandboxUnavailable(f"the sandbox server runs as host uid {uid}, expected {expected}")
    who = (
        f"uid {walls.SANDBOX_UID} on the host"
        if walls.privileged()
        else f"uid {walls.SANDBOX_UID} inside, the harness's own uid {uid} on the host (it has no other)"
    )
    return (
        f"{choice.version}: {walls.WORKSPACE} and a private {walls.TMP} the only writable paths, on one "
        f"tmpfs of {disk_bytes // limits.MIB} MiB, everything else read-only, "
        f"own {', '.join(own)} namespaces, {who}, clean environment"
    )


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
    """Kill a server left running by an earlier harness process (killed or frozen before it could
    stop it): its whole PID namespace when it ran in walls, whatever carries its marker otherwise."""
    record_path = sandbox_dir / "server.json"
    try:
        record = ServerRecord.model_validate_json(record_path.read_text())
    except (FileNotFoundError, ValueError):
        return
    kill_instance(record.instance)
    namespace = record.namespace()
    if namespace is not None:
        namespace.kill()
        namespace.wait_until_gone()
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
    raise SandboxUnavailable(f"sandbox server {state} within {START_TIMEOUT_S}s; log: {one_line(log_tail)}")
