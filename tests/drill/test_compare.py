"""`belay drill --compare --json`: the example on the self-hosted executor and on a managed one
(its local stand-in), each killed at the same point and resumed, measured from each side's record
and from the provider's API. Each figure is checked against what the side's record holds, read
here independently; the table the text mode prints carries the same figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from belay.journal.events import (
    ApprovalRequestEvent,
    Event,
    LifecycleEvent,
    ModelOutputEvent,
    RemoteEvent,
    ToolRequestEvent,
)
from belay.local.drill.compare import CompareReport, compare_table
from tests.belay_cli import DEFAULT_MANIFEST, read_events, run_belay

pytestmark = pytest.mark.slow

SESSION = "parser-fix"


def record_of(home: Path, side: str) -> list[Event]:
    """The side's record, found where the drill ran it."""
    [run] = (home / "drill" / "compare" / side).glob("*/compare")
    return read_events(run, SESSION)


@pytest.mark.parametrize("managed", ["openai-agents", "anthropic-managed"])
def test_compare_measures_both_sides_from_their_records(tmp_path: Path, managed: str) -> None:
    home = tmp_path / "home"
    result = run_belay(
        home, "drill", str(DEFAULT_MANIFEST), "--compare", "--executor", managed, "--json", timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = CompareReport.model_validate(json.loads(result.stdout))
    assert report.kill_point.startswith("tool_request:") and report.same_deliverables
    mine, theirs = report.sides
    assert mine.executor.startswith("self-hosted") and theirs.executor.startswith(managed)
    for side, name in ((mine, "self-hosted"), (theirs, managed)):
        events = record_of(home, name)
        assert side.completed and {"report.md", "fix.patch"} <= side.deliverables.keys()
        assert (side.events_lost, side.steps_repeated, side.operations_repeated) == (0, 0, 0)
        assert 0 < side.killed_at_seq == side.events_before_kill < len(events)
        requests = {e.payload.operation_id for e in events if isinstance(e, ToolRequestEvent)}
        assert side.tool_calls == len(requests) == side.in_sandbox + side.in_harness and side.in_sandbox > 0
        assert side.at_provider == 0 and side.walls.startswith("bubblewrap")
        outputs = [e for e in events if isinstance(e, ModelOutputEvent)]
        assert side.model_calls == len(outputs)
        assert side.input_tokens == sum(e.payload.input_tokens for e in outputs)
        approvals = [e for e in events if isinstance(e, ApprovalRequestEvent)]
        assert side.approvals_requested == side.approvals_before_run == len(approvals) == 1
        assert side.approvals_at_provider == 0
        # The resume replaced both subagents' sandboxes with clean ones, as their record shows.
        replaced = [
            e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == "sandbox_replaced"
        ]
        assert side.sandboxes_replaced == len(replaced) == 2
    assert mine.tool_calls == theirs.tool_calls  # the same task, call for call
    assert mine.provider_history is None and mine.remote_sessions == 0 and mine.only_at_provider == 0
    assert mine.conversation.startswith("the record")
    remote = [e for e in record_of(home, managed) if isinstance(e, RemoteEvent)]
    calls = [e for e in remote if e.payload.kind == "call"]
    delivered = [e for e in remote if e.payload.kind == "result_delivered"]
    assert theirs.mirrored == len(calls) + len(delivered) > 0
    assert theirs.provider_history is not None and theirs.provider_history > theirs.mirrored
    assert theirs.only_at_provider == theirs.provider_history - theirs.mirrored
    assert theirs.remote_sessions == 2 and theirs.remote_session_s > 0  # one per subagent
    assert all("local stand-in" in model for model in theirs.decided_by)

    table = compare_table(report)
    lines = table.splitlines()
    assert lines[1].split("|")[0].strip() == mine.executor[: len(lines[1].split("|")[0].strip())]
    for label in (
        "durability: events lost",
        "where tools ran",
        "observable only at the",
        "where approvals were",
        "cost: model calls",
        "cost: provider session",
        "who operates what",
    ):
        assert any(line.startswith(label) for line in lines), label
    [calls_row] = [line for line in lines if line.startswith("cost: model calls")]
    assert calls_row.split()[3:] == [str(mine.model_calls), "|", str(theirs.model_calls)]
    assert table.endswith("deliverables of the work: the same on both sides")


def test_compare_needs_a_managed_executor(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "drill", "--compare", "--executor", "self-hosted")
    assert result.returncode == 1
    assert "--compare runs self-hosted beside a managed executor" in result.stderr
    assert not (tmp_path / "home" / "drill").exists()
