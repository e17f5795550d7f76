from __future__ import annotations

from belay.journal.events import (
    Checkpoint,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    OperationOutcome,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    Verification,
)
from belay.journal.recovery import RecoveryActionKind, action_for, recovery_plan
from belay.journal.state import fold
from tests.journal.fixtures import LogBuilder, realistic_log


def _log_with_open_requests() -> LogBuilder:
    log = LogBuilder()
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(ToolRequest(operation_id="read", tool="read_file", effect=EffectClass.READ_ONLY, step="s1"))
    log.add(ToolRequest(operation_id="fmt", tool="format", effect=EffectClass.IDEMPOTENT, step="s1"))
    log.add(
        ToolRequest(
            operation_id="ticket", tool="create_ticket", effect=EffectClass.KEYED, idempotency_key="k-7"
        )
    )
    log.add(ToolRequest(operation_id="keyless", tool="create_ticket", effect=EffectClass.KEYED))
    log.add(ToolRequest(operation_id="deploy", tool="deploy", effect=EffectClass.UNSAFE, step="s2"))
    log.add(ToolRequest(operation_id="finished", tool="read_file", effect=EffectClass.READ_ONLY))
    log.add(ToolResult(operation_id="finished", ok=True))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1))
    return log


def test_the_effect_table_for_requests_without_a_result() -> None:
    plan = recovery_plan(fold(_log_with_open_requests().events))
    actions = {a.operation_id: a for a in plan.actions}
    assert set(actions) == {"read", "fmt", "ticket", "keyless", "deploy"}  # "finished" has its result
    assert actions["read"].action == RecoveryActionKind.RERUN
    assert actions["fmt"].action == RecoveryActionKind.RERUN
    assert actions["ticket"].action == RecoveryActionKind.RERUN_WITH_KEY
    assert actions["ticket"].idempotency_key == "k-7"
    assert actions["keyless"].action == RecoveryActionKind.AWAIT_RECONCILIATION
    assert actions["deploy"].action == RecoveryActionKind.AWAIT_RECONCILIATION
    assert actions["deploy"].record_unknown_outcome
    assert [a.operation_id for a in plan.rerun()] == ["read", "fmt", "ticket"]
    assert plan.attempt == 2
    assert plan.restore_from is None  # no verified checkpoint: start from a clean sandbox


def test_an_unknown_outcome_already_recorded_is_not_recorded_again_and_a_reconciled_one_is_listed() -> None:
    log = _log_with_open_requests()
    log.add(OperationOutcome(operation_id="deploy", outcome="unknown"))
    log.add(OperationOutcome(operation_id="keyless", outcome="unknown"))
    log.add(
        OperationOutcome(operation_id="keyless", outcome="reconciled", succeeded=True, detail="ticket #12")
    )
    plan = recovery_plan(fold(log.events))
    actions = {a.operation_id: a for a in plan.actions}
    assert not actions["deploy"].record_unknown_outcome
    assert "keyless" not in actions  # reconciled: settled, never retried
    assert [(r.operation_id, r.succeeded, r.detail) for r in plan.reconciled] == [
        ("keyless", True, "ticket #12")
    ]


def test_completed_steps_are_never_run_again() -> None:
    log = _log_with_open_requests()
    log.add(Task(task_id="s1", status=TaskStatus.DONE))
    log.add(Task(task_id="s2", status=TaskStatus.DONE))
    plan = recovery_plan(fold(log.events))
    actions = {a.operation_id: a for a in plan.actions}
    assert actions["read"].action == RecoveryActionKind.SKIP_COMPLETED_STEP
    assert actions["fmt"].action == RecoveryActionKind.SKIP_COMPLETED_STEP
    # An unsafe request stays unknown even in a completed step: it is reconciled, not skipped.
    assert actions["deploy"].action == RecoveryActionKind.AWAIT_RECONCILIATION
    assert plan.completed_steps == ("s1", "s2")
    assert plan.rerun()[0].operation_id == "ticket"


def test_restore_from_the_last_verified_checkpoint_not_the_latest() -> None:
    log = LogBuilder()
    log.add(
        Checkpoint(
            checkpoint_id="cp-ok",
            covers_seq=0,
            completed_steps=("a",),
            next_step="b",
            verification=Verification(command="make check", status="passed"),
        )
    )
    log.add(
        Checkpoint(
            checkpoint_id="cp-bad",
            covers_seq=1,
            completed_steps=("a", "b"),
            verification=Verification(command="make check", status="failed"),
        )
    )
    log.add(Checkpoint(checkpoint_id="cp-unverified", covers_seq=2, completed_steps=("a", "b", "c")))
    plan = recovery_plan(fold(log.events))
    assert plan.restore_from is not None
    assert plan.restore_from.checkpoint_id == "cp-ok"
    assert plan.restore_from.verification_command == "make check"
    assert plan.next_step == "b"
    assert plan.completed_steps == ("a",)


def test_recovery_plan_of_the_realistic_session() -> None:
    plan = recovery_plan(fold(realistic_log()))
    assert plan.restore_from is not None and plan.restore_from.checkpoint_id == "cp-1"
    assert [d.name for d in plan.restore_from.declared_artifacts] == ["parser.patch"]
    assert {a.operation_id: a.action for a in plan.actions} == {
        "op-push-1": RecoveryActionKind.AWAIT_RECONCILIATION,
        "op-publish-1": RecoveryActionKind.AWAIT_RECONCILIATION,
    }
    assert set(plan.completed_steps) >= {"reproduce", "patch", "compat"}
    assert plan.attempt == 3


def test_a_request_asked_before_a_change_reopened_its_subagent_is_not_run_again() -> None:
    """The call was made on work the change made invalid: the sandbox is rewound to before it and
    the reopened steps make their own calls. An unsafe one still goes to reconciliation: it may
    have acted in the world."""
    log = _log_with_open_requests()
    state = fold(log.events)
    ops = state.operations
    for op_id in ("read", "fmt", "ticket"):
        action = action_for(ops[op_id], frozenset(), False, superseded_at=ops[op_id].request_seq + 5)
        assert action.action == RecoveryActionKind.SKIP_SUPERSEDED, op_id
        assert "reopened" in action.reason
    unsafe = action_for(ops["deploy"], frozenset(), False, superseded_at=ops["deploy"].request_seq + 5)
    assert unsafe.action == RecoveryActionKind.AWAIT_RECONCILIATION
    # Without a later change, the same requests run again as the effect table says.
    assert action_for(ops["read"], frozenset(), False).action == RecoveryActionKind.RERUN
