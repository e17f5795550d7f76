"""A live session moves to another executor: `belay run` on executor A, killed (SIGKILL of its
process group, as `kill -9` leaves it) at a random position of its record after a verified step,
then `belay resume --executor B`, for every ordered pair of the three executors (self-hosted and
both managed ones on their local stand-ins).

Each resume completes with the deliverable the uninterrupted run writes; no checkpoint or step
verified before the kill is verified again after it; no call the record settled is asked for again
(as many tool requests as the uninterrupted run); the record holds the move, and the briefing names
both executors. The positions are drawn by a seeded generator: the seed is printed and named in
every failure, and `BELAY_HANDOVER_SEED=<seed>` draws the same ones again.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest

from belay.harness.attempt import fault_key
from belay.journal.events import (
    CheckpointEvent,
    Event,
    ExecutorChange,
    OperationOutcome,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.local.drill.manifest import DRILL_MODELS, EXECUTORS
from tests.belay_cli import read_events, run_belay, run_until, stop_session_standins, tickets_in
from tests.executors.example import SESSION
from tests.executors.test_resume_by_hand import HANG_S, NO_PROVIDER, check_resumed, uninterrupted

pytestmark = pytest.mark.slow

SEED_ENV = "BELAY_HANDOVER_SEED"
SEED = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 30))
TYPES = {
    "self-hosted": "scripted",
    "openai-agents": "openai-agents",
    "anthropic-managed": "anthropic-managed",
}


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[Event]]]:
    """Each executor's manifest and the record of its uninterrupted run."""
    return {e: uninterrupted(tmp_path_factory.mktemp(f"reference-{e}"), e) for e in EXECUTORS}


def kill_points(reference: list[Event]) -> list[str]:
    """Every request and result after the first verified step and before the last result."""
    first_verified = next(
        e.seq
        for e in reference
        if isinstance(e, CheckpointEvent)
        and e.payload.verified
        and not e.payload.checkpoint_id.endswith("/inputs")
    )
    results = [e.seq for e in reference if isinstance(e, ToolResultEvent)]
    return [
        fault_key(e)
        for e in reference
        if isinstance(e, ToolRequestEvent | ToolResultEvent) and first_verified < e.seq < results[-1]
    ]


def resume_on(target: str) -> list[str]:
    """`belay resume` on `target`, with the model it needs."""
    model = ["--model", DRILL_MODELS[target]] if target in DRILL_MODELS else []
    return ["resume", SESSION, "--quiet", "--executor", target, *model]


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(EXECUTORS, 2)))
def test_a_session_killed_on_one_executor_completes_on_another(
    source: str, target: str, references: dict[str, tuple[Path, list[Event]]], tmp_path: Path
) -> None:
    manifest, reference = references[source]
    point = random.Random(f"{SEED}/{source}/{target}").choice(kill_points(reference))
    where = f"killed at {point} (replay: {SEED_ENV}={SEED})"
    home = tmp_path / "home"
    try:
        reached, _ = run_until(
            home, ["run", "--quiet", str(manifest)], point, timeout=HANG_S, environment=NO_PROVIDER
        )
        assert reached, f"the run ended before {point}; {where}"
        before = read_events(home, SESSION)
        move = ["--executor", target] + (["--model", DRILL_MODELS[target]] if target in DRILL_MODELS else [])
        resumed = run_belay(
            home, "resume", SESSION, "--quiet", *move, environment=NO_PROVIDER, timeout=HANG_S
        )
        after = read_events(home, SESSION)
        brief = run_belay(home, "brief", SESSION, environment=NO_PROVIDER).stdout
    finally:
        stop_session_standins(home)
    assert resumed.returncode == 0, f"{where}\n{resumed.stderr[-3000:]}"
    [change] = [e.payload for e in after if isinstance(e.payload, ExecutorChange)]
    assert (change.from_type, change.to_type) == (TYPES[source], TYPES[target]), where
    check_resumed(reference, before, after, f"{where}\n{resumed.stderr}")
    assert f"moved from {TYPES[source]}" in brief and f"to {TYPES[target]}" in brief, where


@pytest.mark.parametrize(
    ("source", "target"), [("openai-agents", "self-hosted"), ("self-hosted", "anthropic-managed")]
)
def test_an_effect_of_unknown_outcome_stays_in_reconciliation_across_the_handover(
    source: str, target: str, references: dict[str, tuple[Path, list[Event]]], tmp_path: Path
) -> None:
    """Killed right after the unsafe ticket's request was recorded: the new executor never runs it
    blindly; the outcome is recorded unknown, then reconciled (the ticket service's probe finds the
    ticket by its client reference, or that there is none), and the ticket exists at most once."""
    manifest, reference = references[source]
    [ticket] = [e for e in reference if isinstance(e, ToolRequestEvent) and e.payload.tool == "create_ticket"]
    point = fault_key(ticket)
    home = tmp_path / "home"
    try:
        reached, _ = run_until(
            home, ["run", "--quiet", str(manifest)], point, timeout=HANG_S, environment=NO_PROVIDER
        )
        assert reached
        resumed = run_belay(home, *resume_on(target), environment=NO_PROVIDER, timeout=HANG_S)
        after = read_events(home, SESSION)
    finally:
        stop_session_standins(home)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    operation = ticket.payload.operation_id
    outcomes = [
        e.payload.outcome
        for e in after
        if isinstance(e.payload, OperationOutcome) and e.payload.operation_id == operation
    ]
    assert outcomes[:1] == ["unknown"] and "reconciled" in outcomes, outcomes
    # Never requested again under another id, nor dispatched twice.
    tickets = [e for e in after if isinstance(e, ToolRequestEvent) and e.payload.tool == "create_ticket"]
    assert [e.payload.operation_id for e in tickets] == [operation]
    assert tickets_in(home, SESSION) <= 1
