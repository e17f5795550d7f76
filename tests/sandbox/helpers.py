from __future__ import annotations

import asyncio
from pathlib import Path

from belay.sandbox.local import LocalSandbox


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


async def eventually_gone(pid: int, attempts: int = 250) -> bool:
    """Wait (up to a few seconds) for a killed process to disappear; the kill is asynchronous."""
    for _ in range(attempts):
        if not is_running(pid):
            return True
        await asyncio.sleep(0.02)
    return False


def host_pid(sandbox: LocalSandbox, pid: int) -> int | None:
    """The host pid of a process a command reported (`$!`): in walls, pids are the sandbox's own.
    None when no process of the sandbox has that pid (any more)."""
    if sandbox.pid_namespace is None:
        return pid if is_running(pid) else None
    for candidate in sandbox.pid_namespace.processes():
        try:
            status = Path(f"/proc/{candidate}/status").read_text()
        except FileNotFoundError:
            continue
        spaces = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if int(spaces[-1]) == pid:
            return candidate
    return None


async def eventually_gone_inside(sandbox: LocalSandbox, pid: int, attempts: int = 250) -> bool:
    """Like eventually_gone, for a pid a command reported from inside the sandbox."""
    for _ in range(attempts):
        found = host_pid(sandbox, pid)
        if found is None or not is_running(found):
            return True
        await asyncio.sleep(0.02)
    return False
