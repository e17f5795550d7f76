"""What a step asked the person on work a change made invalid is withdrawn with the step's
reopening: its approval (to dispatch, or to retry a failed effect) is no longer pending, and a
question it put is no longer open; what a step the change left alone asked stays."""

from __future__ import annotations

from belay.journal.events import (
    ApprovalRequest,
    DerivedFrom,
    EffectClass,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.state import fold
from tests.journal.fixtures import LogBuilder, sha


def _asked_in_two_steps(tool: str, kind: str) -> LogBuilder:
    """Two running steps, one on part `api`, one on part `docs`, each asking the person."""
    log = LogBuilder()
    log.add(UserInput(goal="Fix the client", parts={"api": "v1", "docs": "v1"}))
    for step, part in (("w/api", "api"), ("w/docs", "docs")):
        log.add(Task(task_id=step, title=step, status=TaskStatus.RUNNING, owner="w", request_parts=(part,)))
        op = f"w.{part}.1"
        # A result before the question, so the step's dependence on its part is on record.
        log.add(
            ToolRequest(operation_id=f"{op}.0", tool="run_command", effect=EffectClass.IDEMPOTENT, step=step)
        )
        log.add(
            ToolResult(
                operation_id=f"{op}.0",
                ok=True,
                result_id=f"r-{part}",
                derived_from=DerivedFrom(request_version=1, request_parts=(part,)),
            )
        )
        log.add(ToolRequest(operation_id=op, tool=tool, effect=EffectClass.IDEMPOTENT, step=step))
        if kind == "question":
            log.add(Wait(wait_id=f"wait-{op}", kind=WaitKind.ON_USER, reason="which release?"))
        else:
            log.add(
                ApprovalRequest(
                    approval_id=f"approve-{op}",
                    operation_id=op,
                    tool=tool,
                    payload_sha256=sha(op),
                    kind=kind,
                    summary="may I?",
                )
            )
    return log


def test_an_approval_asked_on_invalid_work_is_withdrawn_and_one_on_work_left_alone_stays() -> None:
    for kind in ("dispatch", "retry"):
        log = _asked_in_two_steps("request_approval", kind)
        log.add(ScopeChange(request_version=2, summary="api v2", changed_parts={"api": "v2"}))
        state = fold(log.events)
        assert list(state.pending_approvals) == ["approve-w.docs.1"], kind
        withdrawn = state.approvals["approve-w.api.1"]
        assert withdrawn.withdrawn_seq is not None and "request v2" in withdrawn.withdrawn_because
        assert not withdrawn.pending


def test_a_question_asked_on_invalid_work_is_withdrawn_and_one_on_work_left_alone_stays() -> None:
    log = _asked_in_two_steps("wait_on_user", "question")
    log.add(ScopeChange(request_version=2, summary="api v2", changed_parts={"api": "v2"}))
    state = fold(log.events)
    assert list(state.open_waits) == ["wait-w.docs.1"]
    assert state.waits["wait-w.api.1"].resolved
