from __future__ import annotations

from pathlib import Path

from belay.sandbox.local import LocalSandbox
from tests.testenv.polling import wait_until_async

GONE_S = 5.0


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pid: int) -> None:
    """Wait (up to a few seconds) for a killed process to disappear; the kill is asynchronous."""
    await wait_until_async(
        lambda: not is_running(pid), f"process {pid} to be gone", timeout=GONE_S, interval=0.02
    )


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


async def wait_gone_inside(sandbox: LocalSandbox, pid: int) -> None:
    """Like wait_gone, for a pid a command reported from inside the sandbox."""

    def gone() -> bool:
        found = host_pid(sandbox, pid)
        return found is None or not is_running(found)

    await wait_until_async(gone, f"process {pid} of the sandbox to be gone", timeout=GONE_S, interval=0.02)
