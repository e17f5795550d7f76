"""A harness that was only frozen, not dead, wakes up beside its replacement: the fencing lease
keeps it from writing anything after the new attempt started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from belay.harness.attempt import FAULT_ENV
from tests.belay_cli import completed, deliverables, is_stopped, read_events, start_belay
from tests.harness.example import MANIFEST, SESSION

POINT = "tool_request:implementer.fix.1"


def test_a_frozen_attempt_cannot_write_behind_its_replacement(tmp_path: Path) -> None:
    home = tmp_path / "home"
    zombie = start_belay(home, "run", "--quiet", str(MANIFEST), stop_after=POINT)
    try:
        deadline = time.monotonic() + 120
        while not is_stopped(zombie.pid):
            assert zombie.poll() is None and time.monotonic() < deadline, "never reached the point"
            time.sleep(0.01)
        frozen_at = len(read_events(home, SESSION))

        replacement = start_belay(home, "resume", "--quiet", SESSION)
        # Wake the zombie while its replacement runs, once the replacement has its sandboxes.
        while not any(
            e.type == "lifecycle" and e.payload.kind == "restored" and e.actor.attempt == 2
            for e in read_events(home, SESSION)
        ):
            assert replacement.poll() is None and time.monotonic() < deadline, "the resume never restored"
            time.sleep(0.01)
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
