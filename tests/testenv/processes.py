"""Child processes that are always stopped: each runs in its own process group, is stopped with its
whole group, and a guard stops whatever is still running when the interpreter exits or is told to
terminate. Under pytest the kernel also kills them if the test process itself dies, even by
SIGKILL: each gets the parent-death signal (`belay.lifetime.die_with_parent`). See
docs/testenv.md, "When a test run is killed"."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from belay.lifetime import die_with_parent, tie_to_parent
from tests.testenv.polling import settle

_live: dict[int, ManagedProcess] = {}
_live_lock = threading.Lock()
_exit_guard_installed = False
_signal_guard_installed = False


def dies_with_this_process() -> Callable[[], None] | None:
    """The `preexec_fn` for a long-lived child a test starts: the kernel SIGKILLs it when this
    process dies, so even `kill -9` of the test run leaves nothing behind. None from a thread other
    than the main one: the signal would come when that thread ends (belay.lifetime)."""
    return die_with_parent() if tie_to_parent() else None


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def pid_start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot: with the pid, it names one process
    even after the pid is reused (pid_max can be as low as 32768)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3


def pid_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is pgid."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def stop_group(pgid: int, timeout: float = 10.0) -> None:
    """SIGTERM the group, then SIGKILL whatever still runs after the timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    settle(lambda: group_members(pgid), until=lambda members: not members, timeout=timeout, interval=0.05)
    if group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        settle(lambda: group_members(pgid), until=lambda members: not members, timeout=5, interval=0.05)


class ManagedProcess:
    """A server process with its output in a log file.

    `detached=True` is for `python -m tests.testenv up`: the process must outlive the command that
    started it, so it is neither guarded nor tied to its parent; `down` stops it by its group id.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_path: Path,
        env: dict[str, str] | None = None,
        detached: bool = False,
    ) -> None:
        self.name = name
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = log_path
        self.env = env
        self.detached = detached
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if not self.detached:
            install_guard()
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,
                preexec_fn=dies_with_this_process() if not self.detached else None,
            )
        if not self.detached:
            with _live_lock:
                _live[self._popen.pid] = self

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_code(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self._popen is None:
            return
        # Only while the leader is unreaped does its pid still name our group; once reaped, the
        # pid may already lead someone else's group.
        if self._popen.poll() is None:
            stop_group(self._popen.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=5)
        with _live_lock:
            _live.pop(self._popen.pid, None)

    def kill(self) -> None:
        """SIGKILL the whole group at once: a crash, not a shutdown."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait(timeout=10)
        with _live_lock:
            _live.pop(self._popen.pid, None)


def live_processes() -> list[ManagedProcess]:
    with _live_lock:
        return list(_live.values())


def stop_all() -> None:
    for process in live_processes():
        with contextlib.suppress(Exception):
            process.stop(timeout=5)


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_guard() -> None:
    """Stop every guarded child at interpreter exit and on SIGTERM/SIGHUP (SIGINT already unwinds
    through pytest's fixture teardown and then atexit)."""
    global _exit_guard_installed, _signal_guard_installed
    if not _exit_guard_installed:
        _exit_guard_installed = True
        atexit.register(stop_all)
    # Signal handlers can only be set from the main thread; a first start from a worker thread
    # (asyncio.to_thread) leaves that to a later start from the main thread.
    if not _signal_guard_installed and threading.current_thread() is threading.main_thread():
        _signal_guard_installed = True
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_terminate)
