"""The phase of a session, and `AgentSession.status` as a pure projection of the folded state.

`phase_of` is the one place a phase is decided; every view calls it (`belay brief` and `belay
sessions`, the AgentSession status and its printer columns, `kubectl belay`). Whether the attempt
the record shows running is still alive is not in the record: the caller passes a `Liveness` (the
store's lease and its last renewal, the caller's `now`, and, on one machine, whether the holder's
process still exists), so the fold stays pure. An attempt that stopped proving it is alive is
`Interrupted` where a person resumes it (`belay resume`), and `Recovering` where the operator
starts the next attempt itself.

Every list is bounded (`STATUS_LIST_LIMIT` entries plus a count of the rest), so the object stays
small at any history length. Conditions follow the Kubernetes API conventions and kstatus:
`Ready` is always present; `Reconciling` and `Stalled` are "abnormal-true" and appear only while
True; Belay's own `WaitingOnUser`, `WaitingOnExternal`, `ReadyForReview` and `Recovering` are
always present, True or False. Types and reasons are named constants. `lastTransitionTime` is
carried over from the previous status by `with_transition_times`, which the controller calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import AliasGenerator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from belay.journal import commands
from belay.journal.events import ArtifactRef, EffectClass, LifecycleKind, TaskStatus, WaitKind
from belay.journal.recovery import RecoveryAction, RecoveryActionKind, recovery_plan
from belay.journal.state import SessionState

STATUS_LIST_LIMIT = 20
# A running attempt renews its lease this often; one silent for LIVENESS_TIMEOUT_S (ten missed
# renewals) has stopped proving it is alive.
HEARTBEAT_INTERVAL_S = 3.0
LIVENESS_TIMEOUT_S = 30.0


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    WAITING_ON_USER = "WaitingOnUser"
    WAITING_ON_EXTERNAL = "WaitingOnExternal"
    READY_FOR_REVIEW = "ReadyForReview"
    # No live attempt, and only a person can start the next one (`belay resume`).
    INTERRUPTED = "Interrupted"
    # The operator replaces a lost attempt, or a sandbox is being restored.
    RECOVERING = "Recovering"
    # A recovery failed (e.g. UndeclaredState): another attempt would fail the same way.
    RECOVERY_FAILED = "RecoveryFailed"
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
    HARNESS_SILENT = "HarnessSilent"  # its lease is no longer renewed; not yet recorded as lost
    HARNESS_STOPPED = "HarnessStopped"  # it stopped cleanly on a signal; the next attempt starts
    INTERRUPTED = "Interrupted"
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
    model_calls: int = 0
    tokens: int = 0  # input and output, as the model adapters recorded them


RecoveredBy = Literal["resume", "operator"]


class Liveness(StatusModel):
    """What is known, at `now`, about the attempt holding the session's lease: not folded from
    the record (that would need a clock), passed in by the view."""

    now: datetime
    lease: int = 0  # the session's current fencing lease (0: no attempt ever took one)
    holder: str = ""  # who holds it, for a person to read
    renewed_lease: int = 0  # the lease the last renewal was for
    renewed_at: datetime | None = None
    # Whether the holder's process exists, where the caller can see it (one machine); None where
    # it cannot (a cluster), and the renewal alone decides.
    holder_alive: bool | None = None
    # Who starts the next attempt: a person (`belay resume`), or the operator.
    recovered_by: RecoveredBy = "resume"
    timeout_s: float = LIVENESS_TIMEOUT_S

    @property
    def renewed_current_lease(self) -> bool:
        return self.lease > 0 and self.renewed_lease == self.lease and self.renewed_at is not None

    def renewal_overdue(self) -> bool:
        """The current lease was renewed, but not within the timeout."""
        if not self.renewed_current_lease or self.renewed_at is None:
            return False
        return self.now - self.renewed_at > timedelta(seconds=self.timeout_s)


class InterruptedOperation(StatusModel):
    operation_id: str
    tool: str
    effect: EffectClass
    subagent: str | None = None
    step: str | None = None
    action: RecoveryActionKind
    settled: str  # "interrupted, will be settled on resume: <effect class and what it does>"


class Interruption(StatusModel):
    """The attempt that stopped proving it is alive: since when, what it was doing, what comes next."""

    attempt: int
    since: datetime | None = None  # its last sign of life: the later of its last renewal and event
    why: str
    doing: str
    command: str | None = None  # the exact command a person runs next; None when the operator acts
    next: str  # what happens next, in words
    operations: list[InterruptedOperation] = []
    operations_omitted: int = 0


class SessionLinkStatus(StatusModel):
    """The session that started this one, or one this session started for a part of its
    objective (with how it ended, once it has)."""

    session: str
    part: str
    objective: str = ""
    phase: str = ""


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
    interruption: Interruption | None = None  # set while no attempt proves it is alive
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
    last_event_at: datetime | None = None  # for the fleet view's age of the last event
    parent: SessionLinkStatus | None = None
    children: list[SessionLinkStatus] = []
    children_omitted: int = 0

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


# --------------------------------------------------------------------------------------------------
# Liveness: is the attempt the record shows running still alive?


def attempt_alive(state: SessionState, liveness: Liveness) -> bool:
    """Whether an attempt is alive: it holds the current lease, its holder's process (where that
    can be seen) exists, and it renewed the lease within the timeout. An attempt whose end the
    record shows (it finished without ending the session) is not, unless a newer one took the
    lease since."""
    lifecycle = state.lifecycle
    if liveness.lease == 0 or liveness.holder_alive is False:
        return False
    if not lifecycle.harness_running and liveness.lease <= lifecycle.lease:
        return False
    if liveness.renewed_current_lease:
        return not liveness.renewal_overdue()
    # Not renewed yet: an attempt that just took the lease, if its process is seen to exist.
    return liveness.holder_alive is True


def _settles(action: RecoveryAction, by: RecoveredBy) -> str:
    when = "on resume" if by == "resume" else "by the next attempt"
    match action.action:
        case RecoveryActionKind.RERUN:
            what = f"{action.effect.value}: runs again under the same operation id"
        case RecoveryActionKind.RERUN_WITH_KEY:
            what = f"keyed: runs again with the same idempotency key ({action.idempotency_key})"
        case RecoveryActionKind.SKIP_COMPLETED_STEP:
            what = f"{action.effect.value}: not run again, step {action.step} is complete"
        case _:
            what = (
                f"{action.effect.value}: never repeated; its outcome is recorded unknown and probed, "
                "and if the probe cannot tell, you reconcile it"
            )
    return f"interrupted, will be settled {when}: {what}"


def _last_end(state: SessionState) -> str:
    """Why the last attempt that finished without ending the session stopped, if it did."""
    for entry in reversed(state.lifecycle.recent):
        if entry.kind == LifecycleKind.HARNESS_FINISHED:
            return entry.detail or entry.reason or "no reason recorded"
        if entry.kind == LifecycleKind.HARNESS_STARTED:
            break
    return ""


def clean_stop(state: SessionState) -> str:
    """When the last attempt stopped cleanly on a signal and none has started since: how it
    stopped, for a person ("on SIGTERM: ..."); otherwise ""."""
    if state.lifecycle.harness_running:
        return ""
    for entry in reversed(state.lifecycle.recent):
        if entry.kind == LifecycleKind.HARNESS_STOPPED:
            return f"on {entry.reason or 'a signal'}: {entry.detail}".rstrip(": ")
        if entry.kind in (LifecycleKind.HARNESS_STARTED, LifecycleKind.HARNESS_FINISHED):
            break
    return ""


def interruption_of(state: SessionState, liveness: Liveness | None) -> Interruption | None:
    """What a session without a live attempt was doing, and what happens next; None while an
    attempt is alive, before one has started, or once the session ended or its recovery failed."""
    phase = phase_of(state, liveness)
    if liveness is None or phase not in (Phase.INTERRUPTED, Phase.RECOVERING):
        return None
    if phase == Phase.RECOVERING and attempt_alive(state, liveness):
        return None  # a live attempt is restoring; nothing is interrupted
    lifecycle = state.lifecycle
    attempt = lifecycle.attempt
    signs = [t for t in (liveness.renewed_at, state.last_event_at) if t is not None]
    since = max(signs) if signs else None
    ended = _last_end(state) if not lifecycle.harness_running else ""
    stopped = clean_stop(state)
    reopened = lifecycle.reopened_seq is not None and not any(
        e.kind == LifecycleKind.HARNESS_STARTED and e.seq > (lifecycle.reopened_seq or 0)
        for e in lifecycle.recent
    )
    if lifecycle.harness_starts == 0:
        why = "no harness attempt has started on the recorded request"
    elif reopened and not lifecycle.harness_running:
        why = f"the session ended and was reopened ({lifecycle.reopened_because}); no attempt has run since"
    elif stopped:
        why = f"attempt {attempt} stopped cleanly {stopped}"
    elif ended:
        why = f"attempt {attempt} stopped without ending the session: {ended}"
    elif liveness.holder_alive is False:
        why = f"attempt {attempt} is gone: its {liveness.holder or 'harness'} no longer exists"
    elif liveness.renewal_overdue() and liveness.renewed_at is not None:
        last = liveness.renewed_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
        why = f"attempt {attempt} stopped renewing its lease (last renewal {last})"
    elif liveness.lease > lifecycle.lease and not liveness.renewed_current_lease:
        why = f"attempt {attempt} was fenced (lease {liveness.lease}); its replacement has not started yet"
    else:
        why = f"attempt {attempt} is not renewing its lease"
    running = sorted(t.task_id for t in state.tasks.values() if t.status == TaskStatus.RUNNING)
    doing_parts = []
    if state.current_step:
        doing_parts.append(f"step {state.current_step}")
    if running:
        doing_parts.append("running " + ", ".join(running[:5]) + (" ..." if len(running) > 5 else ""))
    plan = recovery_plan(state)
    actions = [a for a in plan.actions if a.operation_id not in state.unknown_outcomes]
    if actions:
        doing_parts.append(f"{len(actions)} operation(s) without a result")
    doing = "; ".join(doing_parts) or "nothing recorded in progress"
    shown, omitted = _bounded(actions, STATUS_LIST_LIMIT)
    if liveness.recovered_by == "resume":
        command: str | None = commands.resume(state.session_id)
        step = f", from step {plan.next_step}" if plan.next_step else ""
        next_text = (
            f"run `{command}`: a new attempt takes the next lease, restores every subagent from its "
            f"last verified checkpoint{step}, and settles the interrupted operations"
        )
    elif stopped:
        command = None
        next_text = (
            f"the operator starts attempt {max(attempt, liveness.lease) + 1}, which restores from the "
            "last verified checkpoint (a clean stop is not a lost attempt)"
        )
    else:
        command = None
        next_text = (
            f"the operator records attempt {attempt} lost, fences it and starts attempt "
            f"{max(attempt, liveness.lease) + 1}, which restores from the last verified checkpoint"
        )
    return Interruption(
        attempt=attempt,
        since=since,
        why=why,
        doing=doing,
        command=command,
        next=next_text,
        operations=[
            InterruptedOperation(
                operation_id=a.operation_id,
                tool=a.tool,
                effect=a.effect,
                subagent=a.subagent,
                step=a.step,
                action=a.action,
                settled=_settles(a, liveness.recovered_by),
            )
            for a in shown
        ],
        operations_omitted=omitted,
    )


# --------------------------------------------------------------------------------------------------
# The phase


def phase_of(state: SessionState, liveness: Liveness | None = None) -> Phase:
    """The one phase every view shows. Without `liveness` the record alone decides (an attempt it
    shows running is taken to be alive)."""
    lc = state.lifecycle
    if lc.failed:
        return Phase.FAILED
    if lc.completed:
        return Phase.SUCCEEDED
    if recovery_failed(state):
        return Phase.RECOVERY_FAILED
    if liveness is not None and not attempt_alive(state, liveness):
        if liveness.recovered_by == "operator":
            # The operator starts the first attempt, and replaces a lost one.
            first = lc.harness_starts == 0 and lc.harness_lost == 0
            return Phase.PENDING if first else Phase.RECOVERING
        # Nobody but a person starts the next attempt here.
        return Phase.INTERRUPTED if state.request.goal else Phase.PENDING
    if lc.recovering:
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


def recovery_failed(state: SessionState) -> bool:
    """A recovery failed (for instance on undeclared state) and no restore has succeeded since:
    another attempt would fail the same way."""
    failure = state.lifecycle.last_recovery_failure
    if failure is None:
        return False
    later_restore = any(e.kind == "restored" and e.seq > failure.seq for e in state.lifecycle.recent)
    return not later_restore


def _recovering_reason(state: SessionState, interruption: Interruption | None) -> Reason:
    if state.lifecycle.lost_sandboxes:
        return Reason.SANDBOX_REPLACED
    if state.lifecycle.recovering or interruption is None:
        return Reason.HARNESS_LOST  # recorded lost; its replacement restores
    if clean_stop(state):
        return Reason.HARNESS_STOPPED
    return Reason.HARNESS_SILENT  # not renewing its lease; the operator records it lost next


def conditions_of(
    state: SessionState, phase: Phase, interruption: Interruption | None = None
) -> list[Condition]:
    lc = state.lifecycle
    conditions: list[Condition] = []

    stalled = phase == Phase.RECOVERY_FAILED
    failure = lc.last_recovery_failure
    recovering_reason = _recovering_reason(state, interruption)
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
    elif phase == Phase.INTERRUPTED and interruption is not None:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.INTERRUPTED,
            message=f"{interruption.why}; {interruption.next}",
        )
    elif phase == Phase.RECOVERING and recovering_reason == Reason.SANDBOX_REPLACED:
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=Reason.SANDBOX_REPLACED,
            message=f"sandbox of {', '.join(lc.lost_sandboxes)} lost; the same harness attempt restores "
            "its replacement from the last verified checkpoint",
        )
    elif (
        phase == Phase.RECOVERING
        and recovering_reason in (Reason.HARNESS_SILENT, Reason.HARNESS_STOPPED)
        and interruption
    ):
        ready = Condition(
            type=ConditionType.READY,
            status="False",
            reason=recovering_reason,
            message=f"{interruption.why}; {interruption.next}",
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
            message="no request recorded yet" if not state.request.goal else "no harness attempt started yet",
        )
    else:
        ready = Condition(type=ConditionType.READY, status="True", reason=Reason.RUNNING, message=phase.value)
    conditions.append(ready)

    if phase in (Phase.PENDING, Phase.RECOVERING):
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
    elif phase == Phase.INTERRUPTED:
        # Nothing goes on until a person resumes the session.
        conditions.append(
            Condition(
                type=ConditionType.STALLED, status="True", reason=Reason.INTERRUPTED, message=ready.message
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
        if stalled:
            shown_reason = Reason.RECOVERY_FAILED
        elif recovering_reason == Reason.HARNESS_LOST:
            shown_reason = Reason.RESTORING
        else:
            shown_reason = recovering_reason
        conditions.append(
            Condition(
                type=ConditionType.RECOVERING,
                status="True",
                reason=shown_reason,
                message=ready.message,
            )
        )
    else:
        conditions.append(
            Condition(type=ConditionType.RECOVERING, status="False", reason=Reason.NOT_RECOVERING)
        )
    return conditions


def waiting_on(state: SessionState, phase: Phase, interruption: Interruption | None = None) -> str:
    """One line for a table column: what the session waits on."""
    if phase == Phase.INTERRUPTED and interruption is not None:
        return interruption.command or "resume"
    if phase == Phase.RECOVERY_FAILED and state.lifecycle.last_recovery_failure is not None:
        return f"recovery failed: {state.lifecycle.last_recovery_failure.reason}"
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


def session_status(
    state: SessionState,
    *,
    locate: ArtifactLocator = _default_location,
    liveness: Liveness | None = None,
) -> SessionStatus:
    phase = phase_of(state, liveness)
    interruption = interruption_of(state, liveness)
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
        model_calls=state.model_calls,
        tokens=state.input_tokens + state.output_tokens,
    )

    return SessionStatus(
        phase=phase,
        waiting_on=waiting_on(state, phase, interruption),
        current_step=state.current_step,
        request_version=state.request.version,
        last_seq=state.last_seq,
        attempt=state.lifecycle.attempt,
        lease=state.lifecycle.lease,
        restores=state.lifecycle.restores,
        harness_lost=state.lifecycle.harness_lost,
        conditions=conditions_of(state, phase, interruption),
        interruption=interruption,
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
        **_links_status(state),
    )


def _links_status(state: SessionState) -> dict[str, object]:
    """The record's own clock and the sessions it is linked with, for the fleet and objective views."""
    children, omitted = _bounded(sorted(state.children), STATUS_LIST_LIMIT)
    parent = state.parent
    return {
        "last_event_at": state.last_event_at,
        "parent": SessionLinkStatus(session=parent.session, part=parent.part, objective=parent.objective)
        if parent is not None
        else None,
        "children": [
            SessionLinkStatus(
                session=name,
                part=state.children[name].part,
                objective=state.children[name].objective,
                phase=state.children[name].phase,
            )
            for name in children
        ],
        "children_omitted": omitted,
    }


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
