"""Process lifetimes: a child that dies with the process that started it, and a process that takes
every process it started with it when it stops.

- `die_with_parent(signal)`, passed as `preexec_fn`, asks the kernel to send the child that signal
  when its parent dies (`PR_SET_PDEATHSIG`), even by SIGKILL. The kernel follows the thread that
  forked, not the process: a child forked from a thread that ends before the child (a worker of a
  thread pool) would get the signal then. `tie_to_parent()` says whether the calling thread may
  tie a long-lived child (the main thread), and callers whose own thread outlives the child (the
  kubelet stand-in's) pass it explicitly.
- `become_subreaper()` makes orphaned descendants (a command's `setsid` daemon, a double fork)
  the children of this process instead of init's, so `kill_descendants()` finds and kills every
  one of them: the sandbox server does this when it stops. Until then, `reap_adopted()` reaps the
  orphans that ended, which would otherwise stay zombies and count against its process limit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(option, value, 0, 0, 0) == 0)


def die_with_parent(number: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn`: between fork and exec, ask for `number` when the parent dies. If the parent
    already died in between, the child was adopted: it signals itself at once."""
    parent = os.getpid()

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, number)
        if os.getppid() != parent:
            os.kill(os.getpid(), number)

    return preexec


def tie_to_parent() -> bool:
    """Whether a long-lived child forked from the calling thread may be tied to it: only the main
    thread lives as long as the process."""
    return threading.current_thread() is threading.main_thread()


def become_subreaper() -> bool:
    """Orphaned descendants become this process's children; False where the kernel refuses."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when there is no such process or
    it has exited (a zombie waiting for its parent is not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_alive(pid: int, start: int | None = None) -> bool:
    """Whether `pid` runs, and is the process that started at `start` (not a later one given its
    pid)."""
    found = process_start(pid)
    return found is not None and (start is None or found == start)


def process_stopped(pid: int) -> bool:
    """Whether the process exists and is stopped (SIGSTOP, a debugger): it runs nothing until
    someone continues it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks since boot) of every live process (a zombie is
    dead: it cannot fork or hold a file). The start time tells a process from a later one that
    was given the same pid."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(pid: int | None = None) -> list[int]:
    """Live descendants of `pid` (default: this process), found from each process's parent."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for child, (parent, _) in process_table().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def kill_descendants(timeout_s: float = 5.0) -> int:
    """SIGKILL every descendant of this process, again and again until none is left (a process may
    fork between a scan and its kill; as a subreaper its orphans come back here). Returns how
    many were killed; stops trying after `timeout_s`."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = descendants()
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.01)
    return len(killed)


def reap_adopted(keep: set[int]) -> int:
    """Reap every ended child of this process but those in `keep` (the children it waits for
    itself: reaping one would take its exit status away). Returns how many were reaped."""
    reaped = 0
    own = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == own:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(int(entry.name), os.WNOHANG)[0]:
                    reaped += 1
    return reaped
