"""`AgentSession.status` as a pure projection of the folded state, for `kubectl get`.

Every list is bounded (`STATUS_LIST_LIMIT` entries plus a count of the rest), so the object stays
small at any history length. Conditions follow the Kubernetes API conventions and kstatus:
`Ready` is always present; `Reconciling` and `Stalled` are "abnormal-true" and appear only while
True; Belay's own `WaitingOnUser`, `WaitingOnExternal`, `ReadyForReview` and `Recovering` are
always present, True or False. Types and reasons are named constants. `lastTransitionTime` is
carried over from the previous status by `with_transition_times`, which the controller calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import AliasGenerator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from belay.journal import commands
from belay.journal.events import ArtifactRef, TaskStatus, WaitKind
from belay.journal.state import SessionState

STATUS_LIST_LIMIT = 20


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    WAITING_ON_USER = "WaitingOnUser"
    WAITING_ON_EXTERNAL = "WaitingOnExternal"
    READY_FOR_REVIEW = "ReadyForReview"
    RECOVERING = "Recovering"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionType(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    WAITING_ON_USER = "WaitingOnUser"
    WAITING_ON_EXTERNAL = "WaitingOnExternal"
    READY_FOR_REVIEW = "ReadyForReview"
    RECOVERING = "Recovering"


class Reason(StrEnum):
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    IDLE = "Idle"
    COMPLETED = "Completed"
    FAILED = "Failed"
    HARNESS_LOST = "HarnessLost"
    SANDBOX_REPLACED = "SandboxReplaced"
    RESTORING = "Restoring"
    RECOVERY_FAILED = "RecoveryFailed"
    AWAITING_APPROVAL = "AwaitingApproval"
    AWAITING_RECONCILIATION = "AwaitingReconciliation"
    AWAITING_DECISION = "AwaitingDecision"
    NOTHING_PENDING = "NothingPending"
    EXTERNAL_CONDITION = "ExternalCondition"
    DELIVERABLE_READY = "DeliverableReady"
    NO_DELIVERABLE = "NoDeliverable"
    NOT_RECOVERING = "NotRecovering"


ConditionStatus = Literal["True", "False", "Unknown"]


class StatusModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(serialization_alias=to_camel, validation_alias=to_camel),
        populate_by_name=True,
        frozen=True,
        extra="forbid",
    )


class Condition(StatusModel):
    type: ConditionType
    status: ConditionStatus
    reason: Reason | str
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class PendingApprovalStatus(StatusModel):
    approval_id: str
    operation_id: str
    tool: str
    payload_sha256: str
    summary: str = ""
    expires_at: datetime | None = None
    command: str
    # Where to read what the approval binds before deciding: the operation's canonical payload,
    # and the bytes it sends out (a deliverable's content), when there are some.
    payload_location: str | None = None
    content_sha256: str | None = None
    content_location: str | None = None


class WaitStatus(StatusModel):
    wait_id: str
    kind: WaitKind
    reason: str
    condition: str | None = None
    artifact: str | None = None


class DeliverableStatus(StatusModel):
    name: str
    sha256: str
    size: int
    media_type: str
    location: str
    subagent: str | None = None
    ready_for_review: bool = False
    command: str


class SubagentStatus(StatusModel):
    name: str
    tasks: int = 0
    running: int = 0
    done: int = 0
    sandbox_replacements: int = 0


class CheckpointStatus(StatusModel):
    checkpoint_id: str
    seq: int
    covers_seq: int
    verified: bool
    next_step: str | None = None


class Counts(StatusModel):
    events: int = 0
    tasks: int = 0
    tasks_running: int = 0
    tasks_done: int = 0
    tasks_verified: int = 0
    operations: int = 0
    open_operations: int = 0
    unknown_outcomes: int = 0
    pending_approvals: int = 0
    open_waits: int = 0
    artifacts: int = 0
    deliverables: int = 0
    results: int = 0
    invalid_results: int = 0
    checkpoints: int = 0
    notes: int = 0


class SessionStatus(StatusModel):
    phase: Phase
    waiting_on: str = ""  # one line for the printer column
    current_step: str | None = None
    request_version: int = 0
    last_seq: int = 0
    attempt: int = 0
    lease: int = 0
    restores: int = 0
    harness_lost: int = 0
    conditions: list[Condition]
    counts: Counts
    last_checkpoint: CheckpointStatus | None = None
    last_verified_checkpoint: CheckpointStatus | None = None
    pending_approvals: list[PendingApprovalStatus] = []
    pending_approvals_omitted: int = 0
    waits: list[WaitStatus] = []
    waits_omitted: int = 0
    deliverables: list[DeliverableStatus] = []
    deliverables_omitted: int = 0
    subagents: list[SubagentStatus] = []
    subagents_omitted: int = 0
    unknown_outcomes: list[str] = []
    unknown_outcomes_omitted: int = 0

    def condition(self, type_: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def to_status(self) -> dict[str, object]:
        """The JSON body for the custom resource's status subresource."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


ArtifactLocator = Callable[[ArtifactRef], str]


def _default_location(ref: ArtifactRef) -> str:
    return ref.uri or f"sha256:{ref.sha256}"


T = TypeVar("T")


def _bounded(items: Sequence[T], limit: int) -> tuple[list[T], int]:
    return list(items[:limit]), max(0, len(items) - limit)


def phase_of(state: SessionState) -> Phase:
    lc = state.lifecycle
    if lc.failed:
        return Phase.FAILED
    if lc.completed:
        return Phase.SUCCEEDED
    if lc.recovering or _recovery_stalled(state):
        return Phase.RECOVERING
    if state.pending_approvals or state.unknown_outcomes or _open_waits(state, WaitKind.ON_USER):
        return Phase.WAITING_ON_USER
    if _open_waits(state, WaitKind.ON_EXTERNAL):
        return Phase.WAITING_ON_EXTERNAL
    running_tasks = any(t.status == TaskStatus.RUNNING for t in state.tasks.values())
    if running_tasks or state.open_operations:
        return Phase.RUNNING
    if _open_waits(state, WaitKind.READY_FOR_REVIEW):
        return Phase.READY_FOR_REVIEW
    # The request alone (recorded before the first harness pod exists) is not yet running.
    if state.lifecycle.harness_starts == 0 or not state.request.goal:
        return Phase.PENDING
    return Phase.RUNNING


def _open_waits(state: SessionState, kind: WaitKind) -> list[str]:
    return [w.wait_id for w in state.open_wait_records() if w.kind == kind]


def _recovery_stalled(state: SessionState) -> bool:
    """A recovery failed and no restore has succeeded since."""
    failure = state.lifecycle.last_recovery_failure
    if failure is None:
        return False
    later_restore = any(e.kind == "restored" and e.seq > failure.seq for e in state.lifecycle.recent)
    return not later_restore


def conditions_of(state: SessionState, phase: Phase) -> list[Condition]:
    lc = state.lifecycle
    conditions: list[Condition] = []

    stalled = _recovery_stalled(state)
    failure = lc.last_recovery_failure
    if phase == Phase.FAILED:
        ready = Condition(
            type=ConditionType.READY, status="False", reason=Reason.FAILED, message=lc.end_reason
        )
    elif phase == Phase.SUCCEEDED:
        ready = Condition(
            type=ConditionType.READY, status="True", reason=Reason.COMPLETED, message=lc.end_reason
        )
    elif stalled and failure is not None:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.RECOVERY_FAILED,
            message=f"{failure.reason}: {failure.detail}".strip(": "),
        )
    elif phase == Phase.RECOVERING and lc.lost_sandboxes:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.SANDBOX_REPLACED,
            message=f"sandbox of {', '.join(lc.lost_sandboxes)} lost; the same harness attempt restores "
            "its replacement from the last verified checkpoint",
        )
    elif phase == Phase.RECOVERING:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.HARNESS_LOST,
            message=f"harness attempt {lc.attempt} lost; restoring from the last verified checkpoint",
        )
    elif phase == Phase.PENDING:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.INITIALIZING,
            message="no request recorded yet",
        )
    else:
        ready = Condition(type=ConditionType.READY, status="True", reason=Reason.RUNNING, message=phase.value)
    conditions.append(ready)

    if phase == Phase.PENDING or (phase == Phase.RECOVERING and not stalled):
        reason = Reason.INITIALIZING if phase == Phase.PENDING else Reason.RESTORING
        conditions.append(
            Condition(type=ConditionType.RECONCILING, status="True", reason=reason, message=ready.message)
        )
    if stalled and failure is not None:
        conditions.append(
            Condition(
                type=ConditionType.STALLED,
                status="True",
                reason=failure.reason or Reason.RECOVERY_FAILED,
                message=failure.detail or "recovery failed",
            )
        )
    elif phase == Phase.FAILED:
        conditions.append(
            Condition(type=ConditionType.STALLED, status="True", reason=Reason.FAILED, message=lc.end_reason)
        )

    user_waits = _open_waits(state, WaitKind.ON_USER)
    if state.pending_approvals:
        first = state.pending_approval_records()[0]
        waiting = Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_APPROVAL,
            message=f"{len(state.pending_approvals)} approval(s) pending; "
            f"first: {first.approval_id} ({first.tool})",
        )
    elif state.unknown_outcomes:
        waiting = Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_RECONCILIATION,
            message=f"{len(state.unknown_outcomes)} operation(s) with an unknown outcome: "
            + ", ".join(sorted(state.unknown_outcomes)[:5]),
        )
    elif user_waits:
        waiting = Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_DECISION,
            message=state.waits[user_waits[0]].reason,
        )
    else:
        waiting = Condition(type=ConditionType.WAITING_ON_USER, status="False", reason=Reason.NOTHING_PENDING)
    conditions.append(waiting)

    external = _open_waits(state, WaitKind.ON_EXTERNAL)
    if external:
        first_wait = state.waits[external[0]]
        conditions.append(
            Condition(
                type=ConditionType.WAITING_ON_EXTERNAL,
                status="True",
                reason=Reason.EXTERNAL_CONDITION,
                message=first_wait.condition or first_wait.reason,
            )
        )
    else:
        conditions.append(
            Condition(type=ConditionType.WAITING_ON_EXTERNAL, status="False", reason=Reason.NOTHING_PENDING)
        )

    reviews = _open_waits(state, WaitKind.READY_FOR_REVIEW)
    if reviews:
        names = [state.waits[w].artifact or w for w in reviews]
        conditions.append(
            Condition(
                type=ConditionType.READY_FOR_REVIEW,
                status="True",
                reason=Reason.DELIVERABLE_READY,
                message="ready for review: " + ", ".join(names[:5]),
            )
        )
    else:
        conditions.append(
            Condition(type=ConditionType.READY_FOR_REVIEW, status="False", reason=Reason.NO_DELIVERABLE)
        )

    if phase == Phase.RECOVERING or stalled:
        recovering_reason = Reason.RESTORING
        if stalled:
            recovering_reason = Reason.RECOVERY_FAILED
        elif lc.lost_sandboxes:
            recovering_reason = Reason.SANDBOX_REPLACED
        conditions.append(
            Condition(
                type=ConditionType.RECOVERING,
                status="True",
                reason=recovering_reason,
                message=ready.message,
            )
        )
    else:
        conditions.append(
            Condition(type=ConditionType.RECOVERING, status="False", reason=Reason.NOT_RECOVERING)
        )
    return conditions


def _waiting_on(state: SessionState, phase: Phase) -> str:
    if phase == Phase.WAITING_ON_USER:
        if state.pending_approvals:
            return f"approval {state.pending_approval_records()[0].approval_id}"
        if state.unknown_outcomes:
            return f"reconcile {sorted(state.unknown_outcomes)[0]}"
        return f"user: {state.waits[_open_waits(state, WaitKind.ON_USER)[0]].wait_id}"
    if phase == Phase.WAITING_ON_EXTERNAL:
        wait = state.waits[_open_waits(state, WaitKind.ON_EXTERNAL)[0]]
        return f"external: {wait.condition or wait.wait_id}"
    if phase == Phase.READY_FOR_REVIEW:
        return "review"
    return ""


def _checkpoint_status(state: SessionState, verified: bool) -> CheckpointStatus | None:
    record = state.latest_verified_checkpoint if verified else state.latest_checkpoint
    if record is None:
        return None
    return CheckpointStatus(
        checkpoint_id=record.checkpoint.checkpoint_id,
        seq=record.seq,
        covers_seq=record.checkpoint.covers_seq,
        verified=record.verified,
        next_step=record.checkpoint.next_step,
    )


def session_status(state: SessionState, *, locate: ArtifactLocator = _default_location) -> SessionStatus:
    phase = phase_of(state)
    tasks = list(state.tasks.values())

    approvals, approvals_omitted = _bounded(state.pending_approval_records(), STATUS_LIST_LIMIT)
    open_waits, waits_omitted = _bounded(state.open_wait_records(), STATUS_LIST_LIMIT)
    review_names = {w.artifact for w in state.open_wait_records() if w.kind == WaitKind.READY_FOR_REVIEW}
    deliverable_names = sorted(state.deliverables, key=lambda n: (state.deliverables[n], n))
    deliverables, deliverables_omitted = _bounded(deliverable_names, STATUS_LIST_LIMIT)
    subagent_names, subagents_omitted = _bounded(sorted(state.subagents), STATUS_LIST_LIMIT)
    unknown, unknown_omitted = _bounded(sorted(state.unknown_outcomes), STATUS_LIST_LIMIT)

    subagents = []
    for name in subagent_names:
        owned = [t for t in tasks if t.owner == name]
        subagents.append(
            SubagentStatus(
                name=name,
                tasks=len(owned),
                running=sum(t.status == TaskStatus.RUNNING for t in owned),
                done=sum(t.status in (TaskStatus.DONE, TaskStatus.VERIFIED) for t in owned),
                sandbox_replacements=state.subagents[name].sandbox_replacements,
            )
        )

    counts = Counts(
        events=state.event_count,
        tasks=len(tasks),
        tasks_running=sum(t.status == TaskStatus.RUNNING for t in tasks),
        tasks_done=sum(t.status in (TaskStatus.DONE, TaskStatus.VERIFIED) for t in tasks),
        tasks_verified=sum(t.status == TaskStatus.VERIFIED for t in tasks),
        operations=len(state.operations),
        open_operations=len(state.open_operations),
        unknown_outcomes=len(state.unknown_outcomes),
        pending_approvals=len(state.pending_approvals),
        open_waits=len(state.open_waits),
        artifacts=len(state.artifacts),
        deliverables=len(state.deliverables),
        results=len(state.results),
        invalid_results=sum(not r.valid for r in state.results.values()),
        checkpoints=state.checkpoint_count,
        notes=len(state.notes),
    )

    return SessionStatus(
        phase=phase,
        waiting_on=_waiting_on(state, phase),
        current_step=state.current_step,
        request_version=state.request.version,
        last_seq=state.last_seq,
        attempt=state.lifecycle.attempt,
        lease=state.lifecycle.lease,
        restores=state.lifecycle.restores,
        harness_lost=state.lifecycle.harness_lost,
        conditions=conditions_of(state, phase),
        counts=counts,
        last_checkpoint=_checkpoint_status(state, verified=False),
        last_verified_checkpoint=_checkpoint_status(state, verified=True),
        pending_approvals=[
            PendingApprovalStatus(
                approval_id=a.approval_id,
                operation_id=a.operation_id,
                tool=a.tool,
                payload_sha256=a.payload_sha256,
                summary=a.summary,
                expires_at=a.request_expires_at,
                command=commands.approve(state.session_id, a.approval_id),
                payload_location=locate(a.payload_ref) if a.payload_ref is not None else None,
                content_sha256=a.content_ref.sha256 if a.content_ref is not None else None,
                content_location=locate(a.content_ref) if a.content_ref is not None else None,
            )
            for a in approvals
        ],
        pending_approvals_omitted=approvals_omitted,
        waits=[
            WaitStatus(
                wait_id=w.wait_id, kind=w.kind, reason=w.reason, condition=w.condition, artifact=w.artifact
            )
            for w in open_waits
        ],
        waits_omitted=waits_omitted,
        deliverables=[
            DeliverableStatus(
                name=name,
                sha256=state.artifacts[name].ref.sha256,
                size=state.artifacts[name].ref.size,
                media_type=state.artifacts[name].ref.media_type,
                location=locate(state.artifacts[name].ref),
                subagent=state.artifacts[name].subagent,
                ready_for_review=name in review_names,
                command=commands.download(state.session_id, name),
            )
            for name in deliverables
        ],
        deliverables_omitted=deliverables_omitted,
        subagents=subagents,
        subagents_omitted=subagents_omitted,
        unknown_outcomes=unknown,
        unknown_outcomes_omitted=unknown_omitted,
    )


def with_transition_times(
    previous: Sequence[Condition], current: Sequence[Condition], now: datetime
) -> list[Condition]:
    """Kubernetes semantics for `lastTransitionTime`: it changes only when a condition's status
    does; otherwise the previous time is kept."""
    before = {c.type: c for c in previous}
    merged = []
    for condition in current:
        old = before.get(condition.type)
        if old is not None and old.status == condition.status and old.last_transition_time is not None:
            stamp = old.last_transition_time
        else:
            stamp = now
        merged.append(condition.model_copy(update={"last_transition_time": stamp}))
    return merged
