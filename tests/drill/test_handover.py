"""`belay drill --executor A --handover-to B`: every interrupted run of the drill is resumed on
another executor with `belay resume --executor B`, and passes the drill's checks plus the
handover's, for a managed -> self-hosted and a self-hosted -> managed pair; the handover's own
checks fail on a record that redoes a verified step or runs under a widened approval; a bad
--handover-to is refused before anything is run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from belay.journal.events import ApprovalEvent, CheckpointEvent, Event, ExecutorChangeEvent
from belay.local.drill.handover import NOT_REDONE, NOT_WIDENED, verified_again, widened_approvals
from tests.belay_cli import failed_checks, read_events, run_belay
from tests.harness.example import MANIFEST

pytestmark = pytest.mark.slow

PAIRS = [("anthropic-managed", "self-hosted"), ("self-hosted", "openai-agents")]
INTERRUPTING = (
    "kill after a tool request",
    "kill after an unsafe request",
    "kill after a verified checkpoint, nothing declared",
)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda pair: "->".join(pair))
def handover(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, Any, Path]:
    """(A, B, the drill's JSON report, its workdir)."""
    source, target = request.param
    home = tmp_path_factory.mktemp(f"drill-{source}-{target}")
    result = run_belay(
        home, "drill", str(MANIFEST), "--json", "--executor", source, "--handover-to", target, timeout=900
    )
    report = json.loads(result.stdout)
    assert result.returncode == (0 if report["passed"] else 1), result.stderr[-2000:]
    [workdir] = (home / "drill").iterdir()
    return source, target, report, workdir


def test_the_handover_drill_passes_and_names_both_executors(handover: tuple[str, str, Any, Path]) -> None:
    source, target, report, _ = handover
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True
    assert report["handover_to"] == target
    assert report["executor"].startswith(source) and f"handed over to {target}" in report["executor"]
    names = [c["name"] for c in report["checks"]]
    ran = [p["scenario"] for p in report["points"]]
    # A kill between a tool result and its delivery is a boundary of a managed executor only.
    boundary = {"kill between a tool result and its delivery"} if source != "self-hosted" else set()
    assert set(ran) == set(INTERRUPTING) | boundary, ran
    # Each interrupting scenario ends with both new checks, passing.
    assert names.count(NOT_REDONE) == len(ran) and names.count(NOT_WIDENED) == len(ran)
    assert names.count(f"the move from {source} to {target} is recorded once, at the kill") == len(ran)
    assert all(p["executor"] == report["executor"] for p in report["points"])


def test_the_resumed_records_moved_and_the_grant_covers_its_own_payload(
    handover: tuple[str, str, Any, Path],
) -> None:
    """The drill's record of the kill after a tool request: moved once, and the declarative grant
    (the publish, after the handover) is the only one, for the payload it was asked for."""
    _, target, _, workdir = handover
    events = read_events(workdir / "kill-after-request", "parser-fix")
    [change] = [e for e in events if isinstance(e, ExecutorChangeEvent)]
    assert change.payload.to_type == ("scripted" if target == "self-hosted" else target)
    checked, widened = widened_approvals(events, change.seq)
    assert not widened and "implementer.publish.3" in checked[1]


def kill_seq(events: list[Event]) -> int:
    return next(e for e in events if isinstance(e, ExecutorChangeEvent)).payload.at_seq


def test_the_new_checks_fail_on_a_record_that_redoes_or_widens(handover: tuple[str, str, Any, Path]) -> None:
    """The same real record, changed the way a handover must never change it: a checkpoint
    verified before the kill verified again after it; the grant under which the publish ran
    named another payload hash."""
    _, _, _, workdir = handover
    events = read_events(workdir / "kill-after-request", "parser-fix")
    at = kill_seq(events)
    before = [e for e in events if e.seq <= at]
    count, again = verified_again(before, events)
    assert count > 0 and not again
    verified = next(e for e in before if isinstance(e, CheckpointEvent) and e.payload.verified)
    redone = [*events, verified.model_copy(update={"seq": events[-1].seq + 1})]
    assert verified_again(before, redone)[1] == [
        f"checkpoint {verified.payload.checkpoint_id} verified 2 times"
    ]
    other = "0" * 64
    widened = [
        e.model_copy(update={"payload": e.payload.model_copy(update={"payload_sha256": other})})
        if isinstance(e, ApprovalEvent)
        else e
        for e in events
    ]
    _, found = widened_approvals(widened, at)
    assert any("granted for implementer.publish.3 sha256 000000000000" in line for line in found), found
    assert any("implementer.publish.3 dispatched at seq" in line for line in found), found


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--handover-to", "nowhere"], "--handover-to must be one of self-hosted, openai-agents, "),
        (
            ["--executor", "openai-agents", "--handover-to", "openai-agents"],
            "--handover-to openai-agents is the",
        ),
        (["--handover-to", "self-hosted"], "--handover-to self-hosted is the executor the run starts on"),
    ],
)
def test_a_bad_handover_is_refused_before_anything_runs(
    options: list[str], message: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    result = run_belay(home, "drill", str(MANIFEST), *options)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and not result.stdout
    assert not (home / "drill").exists()
