"""`belay resume` while another attempt of the session is alive is refused in one line that names
the live attempt's process and since when, and records nothing: the live attempt is not recorded
as lost, not fenced out, and goes on to the end. The real command line: the first attempt is held
at a point of its record (alive, holding the session), the second started beside it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from belay.journal.events import Event, LifecycleEvent, LifecycleKind
from tests.belay_cli import (
    completed,
    kill_group,
    read_events,
    run_belay,
    start_belay,
    wait_until_stopped,
)
from tests.executors.example import SESSION, SUBAGENT, example_manifest

pytestmark = pytest.mark.slow

HANG_S = 300.0  # a guard against a hang, never a timing
POINT = f"tool_request:{SUBAGENT}.inspect.1"


def lifecycle(events: list[Event], kind: LifecycleKind) -> list[Event]:
    return [e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == kind]


@pytest.mark.parametrize(
    "second", [("resume", SESSION), ("resume", SESSION, "--executor", "openai-agents", "--model", "gpt-5")]
)
def test_a_resume_beside_a_live_attempt_is_refused_and_records_nothing(
    tmp_path: Path, second: tuple[str, ...]
) -> None:
    manifest = example_manifest(tmp_path / "manifest", "self-hosted")
    home = tmp_path / "home"
    live = start_belay(home, "run", "--quiet", str(manifest), stop_after=POINT)
    try:
        wait_until_stopped(live, POINT, timeout=HANG_S)
        before = read_events(home, SESSION)

        refused = run_belay(home, *second)
        assert refused.returncode != 0
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error: ") and "live attempt" in line, line
        assert f"harness process {live.pid}, since " in line, line
        assert "recorded nothing" in line, line
        assert read_events(home, SESSION) == before  # nothing recorded, the live attempt not lost

        os.kill(live.pid, signal.SIGCONT)
        assert live.wait(timeout=HANG_S) == 0
        events = read_events(home, SESSION)
        assert completed(events)
        assert not lifecycle(events, LifecycleKind.HARNESS_LOST)
        assert len(lifecycle(events, LifecycleKind.HARNESS_STARTED)) == 1
    finally:
        if live.poll() is None:
            kill_group(live)
