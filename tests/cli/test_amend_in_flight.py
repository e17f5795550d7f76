"""An amend recorded while a call of a later step was in flight (the run killed between the
request and its result): the resume redoes the steps the change reopened, in order, on the
rewound workspace, and never replays the stale call ahead of them."""

from __future__ import annotations

from pathlib import Path

import yaml

from belay.journal.events import ToolResultEvent
from tests.belay_cli import kill_group, read_events, run_belay, start_belay, wait_until_stopped
from tests.harness.example import MANIFEST, SESSION

# The implementer's first call of its fix step (it writes the fixed parser): the kill leaves it
# without a result, after the regression test (which must fail before the fix) was verified.
IN_FLIGHT = "implementer.fix.1"


def test_an_amend_while_a_later_steps_call_is_in_flight_redoes_the_reopened_steps_first(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    run = start_belay(home, "run", str(MANIFEST), stop_after=f"tool_request:{IN_FLIGHT}")
    wait_until_stopped(run, IN_FLIGHT)
    kill_group(run)

    goal = yaml.safe_load(MANIFEST.read_text())["spec"]["request"]["goal"]
    amend = run_belay(home, "amend", SESSION, "--goal", f"{goal} Keep the report short.")
    assert amend.returncode == 0, amend.stderr
    assert "implementer/regression-test" in amend.stdout

    resume = run_belay(home, "resume", SESSION)
    assert resume.returncode == 0, resume.stdout[-2000:] + resume.stderr
    events = read_events(home, SESSION)
    # The stale call never ran: it is answered "not run" (a provider waiting on it gets that
    # answer), and the fix step made its own calls.
    results = {e.payload.operation_id: e.payload for e in events if isinstance(e, ToolResultEvent)}
    stale = results[IN_FLIGHT]
    assert not stale.ok and stale.error is not None and stale.error.startswith("not run: "), stale
    assert any(op.startswith("implementer.fix") and op != IN_FLIGHT and r.ok for op, r in results.items())
    brief = run_belay(home, "brief", SESSION)
    assert brief.stdout.startswith(f"Session {SESSION}: Succeeded"), brief.stdout[:500]
