"""Liveness on one machine: which process holds a session's lease, whether it still exists, the
sandbox servers it runs, and the servers a dead attempt left behind.

A local harness takes the lease as `local:<pid>@<start>`, where `<start>` is the process's start
time in clock ticks since boot (`/proc/<pid>/stat`, field 22), so a pid the kernel has since given
to another process is not taken for the harness. The process disappearing is the most direct
sign that an attempt is dead (a SIGKILL leaves no time to record anything); the lease renewal
covers what the process table cannot show (a frozen or wedged harness).

Every `belay` command starts by stopping the sandbox servers of attempts whose harness is gone
(`reap_orphans`): a sandbox server runs in its own session, so killing the harness (or its whole
process group) leaves it running. The reaper and a starting sandbox take the session's sandbox
lock (`sandboxes.lock`), shared by starts and exclusive for the reaper, so a server a new attempt
is starting is never taken for an orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from belay.api.agentsession import SubagentSpec
from belay.harness.recovery import SandboxHandle, SandboxProvider
from belay.journal.events import now_utc
from belay.journal.phase import Liveness
from belay.lifetime import process_alive, process_start
from belay.stores.base import EventStore, Lease, StoreError
from belay.views.briefing.model import SandboxItem

LOCAL_HOLDER_PREFIX = "local:"
SANDBOX_LOCK = "sandboxes.lock"
SERVER_RECORD = "server.json"


# --------------------------------------------------------------------------------------------------
# Processes


def this_holder() -> str:
    """The lease holder name of this process."""
    pid = os.getpid()
    return f"{LOCAL_HOLDER_PREFIX}{pid}@{process_start(pid)}"


def holder_process(holder: str) -> tuple[int, int | None] | None:
    """(pid, start) of a local holder; None for a holder that is not a local process."""
    if not holder.startswith(LOCAL_HOLDER_PREFIX):
        return None
    pid_text, _, start_text = holder.removeprefix(LOCAL_HOLDER_PREFIX).partition("@")
    if not pid_text.isdigit():
        return None
    return int(pid_text), int(start_text) if start_text.isdigit() else None


def describe_holder(holder: str) -> str:
    process = holder_process(holder)
    return f"harness process {process[0]}" if process is not None else f"harness {holder}"


def holder_alive(holder: str) -> bool | None:
    """Whether a lease holder's process exists; None when the holder is not a local process."""
    process = holder_process(holder)
    if process is None:
        return None
    return process_alive(*process)


async def local_liveness(store: EventStore, session_id: str, starter: str | None = None) -> Liveness:
    """Liveness as `belay` sees it on this machine: a person resumes an interrupted session. With
    `starter` (a child's coordinator), of a session no attempt has taken yet: whether the
    coordinator's attempt, which starts it, is alive."""
    lease = await store.current_lease(session_id)
    renewal = await store.lease_renewal(session_id)
    liveness = liveness_from(lease, renewal.number if renewal else 0, renewal.renewed_at if renewal else None)
    if lease is not None or starter is None:
        return liveness
    starting = await store.current_lease(starter)
    return liveness.model_copy(update={"starter_alive": bool(starting and holder_alive(starting.holder))})


def liveness_from(lease: Lease | None, renewed_lease: int, renewed_at: datetime | None) -> Liveness:
    return Liveness(
        now=now_utc(),
        lease=lease.number if lease else 0,
        holder=describe_holder(lease.holder) if lease else "",
        renewed_lease=renewed_lease,
        renewed_at=renewed_at,
        holder_alive=holder_alive(lease.holder) if lease else None,
        recovered_by="resume",
    )


# --------------------------------------------------------------------------------------------------
# Sandbox servers


@dataclass(frozen=True)
class LocalServer:
    """A sandbox server as its record (`<sandboxes>/<subagent>/server.json`) names it."""

    subagent: str
    directory: Path
    instance: str
    workspace: str
    pid: int | None

    def processes(self) -> list[int]:
        """Its live processes: every process carrying its instance marker, and the recorded pid if
        that process still runs on this server's workspace (a pid alone may have been reused)."""
        from belay.sandbox.local import processes_with_marker

        found = set(processes_with_marker(self.instance))
        if self.pid is not None and process_alive(self.pid) and self.workspace in command_line(self.pid):
            found.add(self.pid)
        return sorted(pid for pid in found if process_alive(pid))


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stop_server(server: LocalServer, grace_s: float = 5.0) -> list[int]:
    """Stop a recorded server the way its own module does, then kill whatever of it is left;
    returns the pids that were alive before. Returns once none of them is (or after `grace_s`)."""
    from belay.sandbox.local import stop_recorded_server

    before = server.processes()
    stop_recorded_server(server.directory)
    for pid in before:
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while any(process_alive(pid) for pid in before) and time.monotonic() < deadline:
        time.sleep(0.01)
    return before


def recorded_servers(sandboxes_dir: Path) -> list[LocalServer]:
    from belay.sandbox.local import ServerRecord

    servers = []
    for path in sorted(sandboxes_dir.glob(f"*/{SERVER_RECORD}")):
        try:
            record = ServerRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # being written or removed right now
        servers.append(
            LocalServer(path.parent.name, path.parent, record.instance, record.workspace, record.pid)
        )
    return servers


@contextlib.contextmanager
def sandbox_lock(session_dir: Path, *, exclusive: bool) -> Iterator[bool]:
    """The session's sandbox lock: shared (blocking) for a start, exclusive (not waiting) for the
    reaper. Yields whether it was taken."""
    session_dir.mkdir(parents=True, exist_ok=True)
    with (session_dir / SANDBOX_LOCK).open("a") as handle:
        mode = fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(handle, mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.asynccontextmanager
async def starting_sandbox(session_dir: Path) -> AsyncIterator[None]:
    """Held while a sandbox server starts, so the reaper never stops one a live attempt starts."""
    session_dir.mkdir(parents=True, exist_ok=True)
    handle = (session_dir / SANDBOX_LOCK).open("a")
    try:
        await asyncio.to_thread(fcntl.flock, handle, fcntl.LOCK_SH)
        yield
    finally:
        handle.close()  # closing the descriptor releases the lock


@dataclass(frozen=True)
class Reaped:
    session_id: str
    holder: str  # the lease holder that is gone ("" when no lease was ever taken)
    subagents: tuple[str, ...]
    processes: int  # live processes found and stopped

    def message(self) -> str:
        who = f"its {describe_holder(self.holder)} is gone" if self.holder else "no harness holds its lease"
        return (
            f"belay: session {self.session_id}: {who}; stopped the {self.processes} sandbox "
            f"process(es) it left running ({', '.join(self.subagents)})"
        )


async def reap_orphans(
    sessions_dir: Path, store_for: Callable[[str], EventStore], sessions: Sequence[str] | None = None
) -> list[Reaped]:
    """Stop the sandbox servers of every session (or of `sessions`) whose lease holder is gone.
    Records of servers already dead are removed silently; only live processes are reported.
    `store_for(session_id)` opens the store holding that session's lease (its record's store)."""
    candidates = [
        directory.parent
        for directory in sorted(sessions_dir.glob("*/sandboxes"))
        if (sessions is None or directory.parent.name in sessions)
        and any(directory.glob(f"*/{SERVER_RECORD}"))
    ]
    if not candidates:
        return []
    reaped = []
    for session_dir in candidates:
        with sandbox_lock(session_dir, exclusive=True) as taken:
            if not taken:
                continue  # a sandbox is starting: its attempt is alive
            try:
                store = store_for(session_dir.name)
                try:
                    lease = await store.current_lease(session_dir.name)
                finally:
                    await store.close()
            except StoreError:
                continue  # its record's store does not answer: a live attempt may own them
            if lease is not None and holder_alive(lease.holder) is not False:
                continue  # a live attempt (or one this machine cannot see) owns them
            servers = recorded_servers(session_dir / "sandboxes")
            alive = {server.subagent: stop_server(server) for server in servers}
            stopped = {name: pids for name, pids in alive.items() if pids}
            if stopped:
                reaped.append(
                    Reaped(
                        session_id=session_dir.name,
                        holder=lease.holder if lease else "",
                        subagents=tuple(sorted(stopped)),
                        processes=sum(len(pids) for pids in stopped.values()),
                    )
                )
    return reaped


class GuardedSandboxProvider:
    """A sandbox provider whose starts hold the session's sandbox lock (see `reap_orphans`)."""

    def __init__(self, provider: SandboxProvider, session_dir: Path) -> None:
        self.provider = provider
        self.session_dir = session_dir

    async def start(self, subagent: SubagentSpec, replacing: SandboxHandle | None = None) -> SandboxHandle:
        async with starting_sandbox(self.session_dir):
            return await self.provider.start(subagent, replacing)


def observed_sandboxes(sandboxes_dir: Path, profiles: Mapping[str, str]) -> list[SandboxItem]:
    """Each subagent's sandbox as this machine sees it: its recorded server and whether any of
    its processes is alive. `profiles` maps each subagent to its network profile."""
    servers = {server.subagent: server for server in recorded_servers(sandboxes_dir)}
    items = []
    for name, profile in profiles.items():
        server = servers.get(name)
        if server is None:
            items.append(SandboxItem(subagent=name, network_profile=profile, alive=False))
            continue
        processes = server.processes()
        where = f"pid {server.pid}, {server.workspace}" if server.pid else server.workspace
        items.append(SandboxItem(subagent=name, where=where, network_profile=profile, alive=bool(processes)))
    return items
