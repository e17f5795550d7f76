"""A single `kill -9` of a coordinator stops each running child once, and its record says so: the
child's `belay` gets the parent-death signal once per thread of the dying coordinator, which is
one stop, recorded as the coordinator's end, never as "a second SIGTERM" that cut its calls off.
The real command line: each child killed under with a call in flight."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from belay.journal.events import LifecycleEvent, LifecycleKind
from tests.belay_cli import kill_group, read_events, start_belay
from tests.cli.test_coordinator_kill_next_step import CHILDREN, HANG_S, running_the_command, slow_children
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow


def stops(home: Path, child: str) -> list[LifecycleEvent]:
    return [
        e
        for e in read_events(home, child)
        if isinstance(e, LifecycleEvent) and e.payload.kind == LifecycleKind.HARNESS_STOPPED
    ]


def test_one_kill_of_the_coordinator_is_one_stop_of_each_child_said_as_it_happened(tmp_path: Path) -> None:
    manifest = slow_children(tmp_path / "example")
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", "--quiet", str(manifest))
    try:
        wait_until(
            lambda: all(running_the_command(home, child) for child in CHILDREN),
            "both children to run their command",
            timeout=HANG_S,
            while_running=coordinator,
        )
        os.kill(coordinator.pid, signal.SIGKILL)  # once, the coordinator alone
        coordinator.wait()
    finally:
        if coordinator.poll() is None:
            kill_group(coordinator)
    wait_until(lambda: all(stops(home, child) for child in CHILDREN), "both children to stop", timeout=HANG_S)
    for child in CHILDREN:
        [stopped] = stops(home, child)
        assert "second" not in stopped.payload.detail, stopped.payload.detail
        assert "cut off by" not in stopped.payload.detail, stopped.payload.detail
        assert stopped.payload.reason.startswith(
            f"SIGTERM (the process that started it, pid {coordinator.pid}"
        )
        assert "is gone" in stopped.payload.reason, stopped.payload.reason
