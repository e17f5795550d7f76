"""Kill the whole `belay run` process group with SIGKILL at every step boundary and between every
tool request and its result, then `belay resume`: the session completes, no completed step runs
twice, at most one ticket exists, and the deliverables are byte-identical to an uninterrupted run.

The points come from the event log of an uninterrupted run. The harness stops itself right after
recording the chosen event (BELAY_FAULT_STOP_AFTER), so the kill lands exactly there.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.journal.events import CheckpointEvent, Event
from belay.journal.state import fold
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_text
from tests.belay_cli import (
    completed,
    deliverables,
    interruption_points,
    read_events,
    run_belay,
    run_until,
    steps_run_twice,
    tickets_in,
)
from tests.harness.example import MANIFEST, SESSION, run_example

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[Event]:
    result, events = run_example(tmp_path_factory.mktemp("reference"), "--quiet")
    assert result.returncode == 0, result.stderr
    return events


def interrupt_and_resume(point: str, home: Path, expected: dict[str, str]) -> list[str]:
    """Problems found for one interruption point (empty: all good)."""
    reached, _ = run_until(home, ["run", "--quiet", str(MANIFEST)], point)
    if not reached:
        return [f"{point}: the run ended before reaching it"]
    before = read_events(home, SESSION)
    problems = []
    if not before or before[-1].seq < 1:
        problems.append(f"{point}: nothing recorded before the kill")
    # Right after the kill, the briefing already lists every step checkpointed so far as verified.
    text = render_text(briefing(fold(before)))
    steps = [
        e.payload.checkpoint_id
        for e in before
        if isinstance(e, CheckpointEvent)
        and e.payload.verified
        and not e.payload.checkpoint_id.endswith("/inputs")
    ]
    problems += [f"{point}: brief after the kill misses {s}" for s in steps if f"verified  {s}" not in text]
    result = run_belay(home, "resume", "--quiet", SESSION)
    after = read_events(home, SESSION)
    if result.returncode != 0 or not completed(after):
        problems.append(f"{point}: resume exit {result.returncode}: {result.stderr[-300:]}")
    first_resumed = after[len(before)] if len(after) > len(before) else None
    if first_resumed is None or first_resumed.actor.attempt != 2:
        problems.append(f"{point}: the first event after the kill is not from attempt 2")
    problems += [f"{point}: {p}" for p in steps_run_twice(after)]
    if tickets_in(home, SESSION) > 1:
        problems.append(f"{point}: {tickets_in(home, SESSION)} tickets")
    if deliverables(after) != expected:
        problems.append(f"{point}: deliverables {deliverables(after)} differ from {expected}")
    return problems


def test_kill_at_every_point_then_resume_completes_the_same_work(
    reference: list[Event], tmp_path: Path
) -> None:
    points = interruption_points(reference)
    assert len(points) > 30  # every tool request plus every step boundary
    assert sum(p.startswith("checkpoint:") for p in points) == 7
    expected = deliverables(reference)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = pool.map(
            lambda item: interrupt_and_resume(item[1], tmp_path / f"point-{item[0]}", expected),
            enumerate(points),
        )
        problems = [p for found in results for p in found]
    assert not problems, "\n".join(problems)
