"""The recovery plan a new harness attempt follows (docs/architecture.md, "Recovery", and
docs/cli.md, "What a resume does, precisely").

Restore from the last verified checkpoint; never run a completed step again; for each tool request
without a result, apply the effect table:

| effect       | action                                                          |
| ------------ | --------------------------------------------------------------- |
| read_only    | run again                                                       |
| idempotent   | run again                                                       |
| keyed        | run again with the same idempotency key (no key: as unsafe)     |
| unsafe       | outcome unknown: wait on reconciliation, never run again        |

Operations whose unknown outcome was already reconciled are listed, not retried.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from belay.journal.events import Checkpoint, DeclaredArtifact, EffectClass, TaskStatus
from belay.journal.state import OperationRecord, SessionState


class RecoveryActionKind(StrEnum):
    RERUN = "rerun"
    RERUN_WITH_KEY = "rerun_with_key"
    AWAIT_RECONCILIATION = "await_reconciliation"
    SKIP_COMPLETED_STEP = "skip_completed_step"
    SKIP_SUPERSEDED = "skip_superseded"


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecoveryAction(Model):
    operation_id: str
    tool: str
    effect: EffectClass
    action: RecoveryActionKind
    request_seq: int
    step: str | None = None
    subagent: str | None = None
    idempotency_key: str | None = None
    reason: str
    # True when no `operation_outcome: unknown` is recorded yet: the new attempt records one.
    record_unknown_outcome: bool = False


class ReconciledOperation(Model):
    operation_id: str
    tool: str
    succeeded: bool | None
    detail: str = ""


class RestorePoint(Model):
    checkpoint_id: str
    seq: int
    covers_seq: int
    repository_revision: str | None = None
    runtime_image: str | None = None
    declared_artifacts: tuple[DeclaredArtifact, ...] = ()
    verification_command: str
    next_step: str | None = None
    subagent: str | None = None

    @classmethod
    def of(cls, seq: int, checkpoint: Checkpoint) -> RestorePoint:
        assert checkpoint.verification is not None
        return cls(
            checkpoint_id=checkpoint.checkpoint_id,
            seq=seq,
            covers_seq=checkpoint.covers_seq,
            repository_revision=checkpoint.repository_revision,
            runtime_image=checkpoint.runtime_image,
            declared_artifacts=checkpoint.declared_artifacts,
            verification_command=checkpoint.verification.command,
            next_step=checkpoint.next_step,
            subagent=checkpoint.subagent,
        )


class RecoveryPlan(Model):
    session_id: str
    attempt: int  # the attempt that follows this plan
    restore_from: RestorePoint | None  # None: no verified checkpoint yet, start from a clean sandbox
    completed_steps: tuple[str, ...]  # never run again
    next_step: str | None
    actions: tuple[RecoveryAction, ...]
    reconciled: tuple[ReconciledOperation, ...]

    def rerun(self) -> list[RecoveryAction]:
        return [
            a
            for a in self.actions
            if a.action in (RecoveryActionKind.RERUN, RecoveryActionKind.RERUN_WITH_KEY)
        ]

    def awaiting_reconciliation(self) -> list[RecoveryAction]:
        return [a for a in self.actions if a.action == RecoveryActionKind.AWAIT_RECONCILIATION]


COMPLETED = (TaskStatus.DONE, TaskStatus.VERIFIED)


def completed_steps(state: SessionState) -> tuple[str, ...]:
    """Steps the last verified checkpoint lists, plus every task recorded done or verified."""
    steps: set[str] = set()
    if state.latest_verified_checkpoint is not None:
        steps.update(state.latest_verified_checkpoint.checkpoint.completed_steps)
    steps.update(t.task_id for t in state.tasks.values() if t.status in COMPLETED or t.ever_verified)
    return tuple(sorted(steps))


# The effect classes a new attempt runs again, without a key, when a request has no result. A
# request of these need not reach the disk before its tool runs: lost with the machine, it is asked
# for again and run again, which is what recovery would do with it.
RUN_AGAIN_BLINDLY = frozenset({EffectClass.READ_ONLY, EffectClass.IDEMPOTENT})


def action_for(
    op: OperationRecord, done_steps: frozenset[str], unknown_recorded: bool, superseded_at: int | None = None
) -> RecoveryAction:
    """The effect table, for one tool request that has no result. `superseded_at`: the seq of a
    change that reopened the request's subagent after it was asked (its sandbox is rewound to
    before that work, and the redone steps make their own calls)."""
    common = {
        "operation_id": op.operation_id,
        "tool": op.tool,
        "effect": op.effect,
        "request_seq": op.request_seq,
        "step": op.step,
        "subagent": op.subagent,
        "idempotency_key": op.idempotency_key,
    }
    keyed_with_key = op.effect == EffectClass.KEYED and op.idempotency_key
    if op.effect == EffectClass.UNSAFE or (op.effect == EffectClass.KEYED and not keyed_with_key):
        reason = (
            "unsafe effect: the outcome is unknown; a probe or a person reconciles it, it is never repeated"
            if op.effect == EffectClass.UNSAFE
            else "keyed tool requested without a key: the external system cannot deduplicate it"
        )
        return RecoveryAction(
            **common,
            action=RecoveryActionKind.AWAIT_RECONCILIATION,
            reason=reason,
            record_unknown_outcome=not unknown_recorded,
        )
    if superseded_at is not None:
        # Running it again would act on a workspace rewound to before it, ahead of the steps
        # the change reopened (a fix written before the regression test that must fail first).
        return RecoveryAction(
            **common,
            action=RecoveryActionKind.SKIP_SUPERSEDED,
            reason=f"asked before the change at seq {superseded_at} reopened {op.subagent}'s work: "
            "its step makes its calls again",
        )
    if op.step is not None and op.step in done_steps:
        return RecoveryAction(
            **common,
            action=RecoveryActionKind.SKIP_COMPLETED_STEP,
            reason=f"step {op.step} is already complete",
        )
    if op.effect == EffectClass.KEYED:
        return RecoveryAction(
            **common,
            action=RecoveryActionKind.RERUN_WITH_KEY,
            reason="keyed: the external system deduplicates by the same key",
        )
    return RecoveryAction(
        **common, action=RecoveryActionKind.RERUN, reason=f"{op.effect.value}: safe to run again"
    )


def _superseded_at(state: SessionState, op: OperationRecord) -> int | None:
    """The seq of the change that reopened the request's subagent after the request, if one did."""
    subagent = state.subagents.get(op.subagent) if op.subagent else None
    reopened = subagent.reopened_seq if subagent is not None else None
    return reopened if reopened is not None and reopened > op.request_seq else None


def recovery_plan(state: SessionState) -> RecoveryPlan:
    """What attempt N+1 does, from the folded record alone. Reads only the open-operation and
    reconciliation indexes, never the whole operation history."""
    done = completed_steps(state)
    done_set = frozenset(done)
    actions = tuple(
        action_for(op, done_set, op.operation_id in state.unknown_outcomes, _superseded_at(state, op))
        for op in state.open_operation_records()
    )
    reconciled = tuple(
        ReconciledOperation(
            operation_id=op_id,
            tool=state.operations[op_id].tool,
            succeeded=state.operations[op_id].reconciled_succeeded,
            detail=state.operations[op_id].outcome_detail,
        )
        for op_id in sorted(state.reconciled_operations, key=lambda o: (state.reconciled_operations[o], o))
    )
    verified = state.latest_verified_checkpoint
    restore = RestorePoint.of(verified.seq, verified.checkpoint) if verified is not None else None
    next_step = restore.next_step if restore is not None else None
    return RecoveryPlan(
        session_id=state.session_id,
        attempt=state.lifecycle.attempt + 1,
        restore_from=restore,
        completed_steps=done,
        next_step=next_step,
        actions=actions,
        reconciled=reconciled,
    )
