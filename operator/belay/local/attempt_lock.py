"""One attempt of a session at a time on this machine.

The fencing lease keeps two attempts from both writing (the newer one wins), but a `belay resume`
that starts while another attempt is alive would still take the session over: it records the
live attempt as lost and fences it out, whose person is then told to resume again. So `belay run`
and `belay resume` hold the session's attempt lock (`<home>/sessions/<id>/attempt.lock`, an
exclusive `flock`) from before they read the record to decide until their attempt ends; one that
finds it held records nothing and says which process holds it, since when. The kernel releases the
lock when its process dies, however it dies, so a killed attempt never keeps it. A holder that is
stopped (SIGSTOP: frozen, not running) does not keep the session either: the new attempt goes on
without the lock, and the fencing lease refuses whatever the frozen one writes once it is woken
(`tests/cli/test_fenced_effects.py`, `tests/cli/test_zombie_harness.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from belay.lifetime import process_stopped
from belay.local.runtime import HomeError, LocalHome

LOCK_FILE = "attempt.lock"
READ_S = 1.0  # how long to wait for the holder to write who it is, having just taken the lock


class AttemptLive(HomeError):
    """Another process runs an attempt of the session: nothing was recorded."""

    def __init__(self, session_id: str, pid: int | None, since: str | None) -> None:
        who = f"harness process {pid}, since {since}" if pid is not None else "a harness process"
        super().__init__(
            f"session {session_id} has a live attempt ({who}): it goes on there, and this command "
            "recorded nothing (to stop it: Ctrl-C or SIGTERM where it runs, or `kill -9` the process if "
            "it does not answer; then resume)"
        )
        self.pid = pid


@contextlib.contextmanager
def attempt_lock(home: LocalHome, session_id: str) -> Iterator[None]:
    """Held while this process decides and runs an attempt of the session; AttemptLive at once when
    another process holds it."""
    path = home.session_dir(session_id) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, since = _holder(descriptor)
            if pid is not None and process_stopped(pid):
                yield  # frozen: fenced out by the lease this attempt takes
                return
            raise AttemptLive(session_id, pid, since) from None
        since = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps({"pid": os.getpid(), "since": since}).encode(), 0)
        yield
    finally:
        os.close(descriptor)


def _holder(descriptor: int) -> tuple[int | None, str | None]:
    """Who holds the lock, as it wrote itself into the file (it may not have yet: wait a moment)."""
    deadline = time.monotonic() + READ_S
    while True:
        try:
            holder = json.loads(os.pread(descriptor, 4096, 0))
            return int(holder["pid"]), str(holder["since"])
        except (ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return None, None
            time.sleep(0.02)
