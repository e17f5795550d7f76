"""`belay reconcile`, `answer`, `approve` on a record written directly to a home's event store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from belay.cli.main import app
from belay.journal.events import (
    ApprovalRequest,
    EffectClass,
    EventDraft,
    OperationOutcome,
    Payload,
    ToolRequest,
    UserInput,
    Wait,
    WaitKind,
)
from belay.local.runtime import LocalHome
from tests.belay_cli import read_events

runner = CliRunner()
SESSION = "decisions"


def write(home: Path, *payloads: Payload) -> None:
    async def append() -> None:
        store = LocalHome(home).open_event_store()
        try:
            await store.append(SESSION, [EventDraft(payload=p) for p in payloads])
        finally:
            await store.close()

    asyncio.run(append())


def invoke(home: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.output


def test_reconcile_an_unknown_outcome_and_answer_a_wait(tmp_path: Path) -> None:
    write(
        tmp_path,
        UserInput(goal="g"),
        ToolRequest(operation_id="op-1", tool="create_ticket", effect=EffectClass.UNSAFE),
        OperationOutcome(operation_id="op-1", outcome="unknown"),
        Wait(wait_id="question", kind=WaitKind.ON_USER, reason="which branch?"),
    )
    code, output = invoke(tmp_path, "reconcile", SESSION, "op-1")
    assert code != 0 and "--succeeded or --failed" in output
    code, output = invoke(tmp_path, "reconcile", SESSION, "op-2", "--failed")
    assert code != 0 and "has no unknown outcome" in output and "op-1" in output
    code, _ = invoke(tmp_path, "reconcile", SESSION, "op-1", "--failed", "-m", "no ticket in the tracker")
    assert code == 0
    code, _ = invoke(tmp_path, "answer", SESSION, "question", "main")
    assert code == 0
    code, output = invoke(tmp_path, "approve", SESSION, "no-such-id")
    assert code != 0 and "no approval or wait 'no-such-id'" in output

    events = read_events(tmp_path, SESSION)
    outcome = events[-2].payload
    assert isinstance(outcome, OperationOutcome)
    assert (outcome.outcome, outcome.succeeded, events[-2].actor.kind) == ("reconciled", False, "user")
    wait = events[-1].payload
    assert isinstance(wait, Wait) and wait.resolved and "main" in wait.reason


def test_an_id_decided_already_is_answered_with_the_decision_that_stands(tmp_path: Path) -> None:
    write(
        tmp_path,
        UserInput(goal="g"),
        ToolRequest(operation_id="op-1", tool="create_ticket", effect=EffectClass.UNSAFE),
        OperationOutcome(operation_id="op-1", outcome="unknown"),
        Wait(wait_id="question", kind=WaitKind.ON_USER, reason="which branch?"),
        ToolRequest(operation_id="op-2", tool="create_ticket", effect=EffectClass.UNSAFE),
        ApprovalRequest(
            approval_id="approve-op-2",
            operation_id="op-2",
            tool="create_ticket",
            payload_sha256="ab" * 32,
            summary="file it",
        ),
    )
    assert invoke(tmp_path, "answer", SESSION, "question", "main", "--by", "dana")[0] == 0
    assert invoke(tmp_path, "approve", SESSION, "op-2", "--by", "lee")[0] == 0
    assert invoke(tmp_path, "reconcile", SESSION, "op-1", "--failed", "--by", "sam")[0] == 0
    recorded = len(read_events(tmp_path, SESSION))

    for args, said in [
        (("answer", SESSION, "question", "dev"), "answer question: yes by dana at "),
        (("approve", SESSION, "question"), "answer question: yes by dana at "),
        (("reject", SESSION, "question", "--reason", "no"), "answer question: yes by dana at "),
        (("reconcile", SESSION, "op-1", "--succeeded"), "reconciliation op-1: took no effect by sam at "),
        (("approve", SESSION, "op-2"), "approval approve-op-2: granted by lee at "),
        (("approve", SESSION, "approve-op-2"), "approval approve-op-2: granted by lee at "),
    ]:
        code, output = invoke(tmp_path, *args)
        assert code != 0 and f"already decided in session {SESSION}: {said}" in output, (args, output)
        assert "nothing was recorded" in output
    assert len(read_events(tmp_path, SESSION)) == recorded
