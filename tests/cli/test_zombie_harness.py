"""A harness that was only frozen, not dead, wakes up beside its replacement: the fencing lease
keeps it from writing anything after the new attempt started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from belay.harness.attempt import FAULT_ENV
from tests.belay_cli import completed, deliverables, read_events, start_belay, wait_until_stopped
from tests.harness.example import MANIFEST, SESSION
from tests.testenv.polling import wait_until

POINT = "tool_request:implementer.fix.1"


def test_a_frozen_attempt_cannot_write_behind_its_replacement(tmp_path: Path) -> None:
    home = tmp_path / "home"
    zombie = start_belay(home, "run", "--quiet", str(MANIFEST), stop_after=POINT)
    try:
        deadline = time.monotonic() + 120  # for both waits
        wait_until_stopped(zombie, POINT, timeout=120)
        frozen_at = len(read_events(home, SESSION))

        replacement = start_belay(home, "resume", "--quiet", SESSION)
        # Wake the zombie while its replacement runs, once the replacement has its sandboxes.
        wait_until(
            lambda: any(
                e.type == "lifecycle" and e.payload.kind == "restored" and e.actor.attempt == 2
                for e in read_events(home, SESSION)
            ),
            "the resume to restore the sandboxes",
            timeout=deadline - time.monotonic(),
            interval=0.01,
            while_running=replacement,
        )
        os.killpg(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=120) != 0
        assert replacement.wait(timeout=120) == 0
    finally:
        if zombie.poll() is None:
            os.killpg(zombie.pid, signal.SIGKILL)
            zombie.wait()
    assert FAULT_ENV not in os.environ
    events = read_events(home, SESSION)
    assert completed(events) and set(deliverables(events)) == {"fix.patch", "report.md"}
    assert not [e for e in events[frozen_at:] if e.actor.kind == "harness" and e.actor.attempt == 1]
