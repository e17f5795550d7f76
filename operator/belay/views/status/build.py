"""`AgentSession.status` as a pure projection of the folded state: the builder of the status view.

`lastTransitionTime` is carried over from the previous status by `with_transition_times`, which
the controller calls.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from belay.journal import commands
from belay.journal.events import ArtifactRef, LifecycleKind, TaskStatus, WaitKind
from belay.journal.handover import executor_label
from belay.journal.phase import (
    STATUS_LIST_LIMIT,
    Interruption,
    Liveness,
    Phase,
    bounded,
    clean_stop,
    end_reason,
    interruption_of,
    open_wait_ids,
    phase_of,
    stalled_by_failure,
)
from belay.journal.proof import unproven
from belay.journal.state import ExecutorChangeRecord, SessionState
from belay.views.briefing.classify import classify
from belay.views.status.model import (
    CheckpointStatus,
    Condition,
    ConditionType,
    Counts,
    DeliverableStatus,
    PendingApprovalStatus,
    Reason,
    SessionLinkStatus,
    SessionStatus,
    SubagentStatus,
    WaitStatus,
)

ArtifactLocator = Callable[[ArtifactRef], str]


def _default_location(ref: ArtifactRef) -> str:
    return ref.uri or f"sha256:{ref.sha256}"


def _recovering_reason(state: SessionState, interruption: Interruption | None) -> Reason:
    if state.lifecycle.lost_sandboxes:
        return Reason.SANDBOX_REPLACED
    if state.lifecycle.recovering or interruption is None:
        return Reason.HARNESS_LOST  # recorded lost; its replacement restores
    if clean_stop(state):
        return Reason.HARNESS_STOPPED
    return Reason.HARNESS_SILENT  # not renewing its lease; the operator records it lost next


def _ready(state: SessionState, phase: Phase, interruption: Interruption | None) -> Condition:
    """Ready: True while the session runs or waits as it should, or once it succeeded."""
    lc = state.lifecycle
    recovering_reason = _recovering_reason(state, interruption)

    def not_ready(reason: Reason | str, message: str) -> Condition:
        return Condition(type=ConditionType.READY, status="False", reason=reason, message=message)

    if phase == Phase.FAILED:
        return not_ready(Reason.FAILED, end_reason(state))
    if phase == Phase.NEEDS_ATTENTION:
        return not_ready(Reason.UNPROVEN, end_reason(state))
    if phase == Phase.SUCCEEDED:
        return Condition(
            type=ConditionType.READY, status="True", reason=Reason.COMPLETED, message=lc.end_reason
        )
    stalled = stalled_by_failure(state) if phase == Phase.RECOVERY_FAILED else None
    if stalled is not None:
        return not_ready(Reason.RECOVERY_FAILED, f"{stalled[0]}: {stalled[1]}".strip(": "))
    if phase == Phase.INTERRUPTED and interruption is not None:
        return not_ready(Reason.INTERRUPTED, f"{interruption.why}; {interruption.next}")
    if phase == Phase.RECOVERING and recovering_reason == Reason.SANDBOX_REPLACED:
        return not_ready(
            Reason.SANDBOX_REPLACED,
            f"sandbox of {', '.join(lc.lost_sandboxes)} lost; the same harness attempt restores "
            "its replacement from the last verified checkpoint",
        )
    if (
        phase == Phase.RECOVERING
        and recovering_reason in (Reason.HARNESS_SILENT, Reason.HARNESS_STOPPED)
        and interruption
    ):
        return not_ready(recovering_reason, f"{interruption.why}; {interruption.next}")
    if phase == Phase.RECOVERING:
        return not_ready(Reason.HARNESS_LOST, _harness_lost_message(state))
    if phase == Phase.PENDING and interruption is not None:
        return not_ready(Reason.INITIALIZING, f"{interruption.why}; {interruption.next}")
    if phase == Phase.PENDING:
        waiting_for = (
            "no request recorded yet" if not state.request.goal else "no harness attempt started yet"
        )
        return not_ready(Reason.INITIALIZING, waiting_for)
    move = pending_move(state)
    if move is not None:
        to = executor_label(move.to_type, move.to_model)
        message = f"{phase.value}; moves to {to} at the next step boundary (recorded at seq {move.seq})"
        return Condition(
            type=ConditionType.READY, status="True", reason=Reason.EXECUTOR_CHANGE_PENDING, message=message
        )
    return Condition(type=ConditionType.READY, status="True", reason=Reason.RUNNING, message=phase.value)


def _harness_lost_message(state: SessionState) -> str:
    """Which attempt was lost, and which restores: once the replacement started, the highest
    attempt is the one restoring, not the one lost."""
    lc = state.lifecycle
    lost = next(
        (e.attempt for e in reversed(lc.recent) if e.kind == LifecycleKind.HARNESS_LOST and e.attempt),
        lc.attempt,
    )
    if lc.harness_running and lc.attempt > lost:
        return f"harness attempt {lost} lost; attempt {lc.attempt} restores from the last verified checkpoint"
    return f"harness attempt {lost} lost; restoring from the last verified checkpoint"


def pending_move(state: SessionState) -> ExecutorChangeRecord | None:
    """The move to another executor recorded while an attempt runs, which no attempt has started
    on yet: the running one ends at its next step boundary."""
    move = state.executor_changes[-1] if state.executor_changes else None
    if move is None or not state.lifecycle.harness_running:
        return None
    started_since = any(
        entry.kind == LifecycleKind.HARNESS_STARTED and entry.seq > move.seq
        for entry in state.lifecycle.recent
    )
    return None if started_since else move


def _abnormal(state: SessionState, phase: Phase, ready: Condition) -> list[Condition]:
    """Reconciling and Stalled: present only while True, as kstatus reads them."""
    failure = stalled_by_failure(state) if phase == Phase.RECOVERY_FAILED else None
    conditions = []
    if phase in (Phase.PENDING, Phase.RECOVERING):
        reason = Reason.INITIALIZING if phase == Phase.PENDING else Reason.RESTORING
        conditions.append(
            Condition(type=ConditionType.RECONCILING, status="True", reason=reason, message=ready.message)
        )
    if failure is not None:
        stalled = Condition(
            type=ConditionType.STALLED,
            status="True",
            reason=failure[0] or Reason.RECOVERY_FAILED,
            message=failure[1] or "recovery failed",
        )
    elif phase == Phase.INTERRUPTED:
        # Nothing goes on until a person resumes the session.
        stalled = Condition(
            type=ConditionType.STALLED, status="True", reason=Reason.INTERRUPTED, message=ready.message
        )
    elif phase == Phase.FAILED:
        stalled = Condition(
            type=ConditionType.STALLED, status="True", reason=Reason.FAILED, message=end_reason(state)
        )
    elif phase == Phase.NEEDS_ATTENTION:
        # Nothing goes on until a person rejects what is not proven, or amends the request.
        stalled = Condition(
            type=ConditionType.STALLED, status="True", reason=Reason.UNPROVEN, message=end_reason(state)
        )
    else:
        return conditions
    return [*conditions, stalled]


def _waiting_on_user(state: SessionState) -> Condition:
    if state.pending_approvals:
        first = state.pending_approval_records()[0]
        return Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_APPROVAL,
            message=f"{len(state.pending_approvals)} approval(s) pending; "
            f"first: {first.approval_id} ({first.tool})",
        )
    if state.unknown_outcomes:
        return Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_RECONCILIATION,
            message=f"{len(state.unknown_outcomes)} operation(s) with an unknown outcome: "
            + ", ".join(sorted(state.unknown_outcomes)[:5]),
        )
    user_waits = open_wait_ids(state, WaitKind.ON_USER)
    if user_waits:
        return Condition(
            type=ConditionType.WAITING_ON_USER,
            status="True",
            reason=Reason.AWAITING_DECISION,
            message=state.waits[user_waits[0]].reason,
        )
    return Condition(type=ConditionType.WAITING_ON_USER, status="False", reason=Reason.NOTHING_PENDING)


def _waiting_on_external(state: SessionState) -> Condition:
    external = open_wait_ids(state, WaitKind.ON_EXTERNAL)
    if not external:
        return Condition(
            type=ConditionType.WAITING_ON_EXTERNAL, status="False", reason=Reason.NOTHING_PENDING
        )
    first = state.waits[external[0]]
    return Condition(
        type=ConditionType.WAITING_ON_EXTERNAL,
        status="True",
        reason=Reason.EXTERNAL_CONDITION,
        message=first.condition or first.reason,
    )


def _ready_for_review(reviews: Sequence[str]) -> Condition:
    """`reviews`: the deliverables the classification says wait on your review, in its order."""
    if not reviews:
        return Condition(type=ConditionType.READY_FOR_REVIEW, status="False", reason=Reason.NO_DELIVERABLE)
    return Condition(
        type=ConditionType.READY_FOR_REVIEW,
        status="True",
        reason=Reason.DELIVERABLE_READY,
        message="ready for review: " + ", ".join(reviews[:5]),
    )


def _recovering(
    state: SessionState, phase: Phase, interruption: Interruption | None, ready: Condition
) -> Condition:
    if phase == Phase.RECOVERY_FAILED:
        shown_reason = Reason.RECOVERY_FAILED
    elif phase == Phase.RECOVERING:
        recovering_reason = _recovering_reason(state, interruption)
        shown_reason = Reason.RESTORING if recovering_reason == Reason.HARNESS_LOST else recovering_reason
    else:
        return Condition(type=ConditionType.RECOVERING, status="False", reason=Reason.NOT_RECOVERING)
    return Condition(type=ConditionType.RECOVERING, status="True", reason=shown_reason, message=ready.message)


def conditions_of(
    state: SessionState, phase: Phase, interruption: Interruption | None = None, *, reviews: Sequence[str]
) -> list[Condition]:
    """The conditions; `reviews` the deliverables the classification says wait on your review."""
    ready = _ready(state, phase, interruption)
    return [
        ready,
        *_abnormal(state, phase, ready),
        _waiting_on_user(state),
        _waiting_on_external(state),
        _ready_for_review(reviews),
        _recovering(state, phase, interruption, ready),
    ]


def waiting_on(state: SessionState, phase: Phase, interruption: Interruption | None = None) -> str:
    """One line for a table column: what the session waits on."""
    if phase in (Phase.INTERRUPTED, Phase.PENDING) and interruption is not None:
        return interruption.command or "resume"
    stalled = stalled_by_failure(state) if phase == Phase.RECOVERY_FAILED else None
    if stalled is not None:
        return f"recovery failed: {stalled[0]}"
    if phase == Phase.WAITING_ON_USER:
        if state.pending_approvals:
            return f"approval {state.pending_approval_records()[0].approval_id}"
        if state.unknown_outcomes:
            return f"reconcile {sorted(state.unknown_outcomes)[0]}"
        return f"user: {state.waits[open_wait_ids(state, WaitKind.ON_USER)[0]].wait_id}"
    if phase == Phase.WAITING_ON_EXTERNAL:
        wait = state.waits[open_wait_ids(state, WaitKind.ON_EXTERNAL)[0]]
        return f"external: {wait.condition or wait.wait_id}"
    if phase == Phase.READY_FOR_REVIEW:
        return "review"
    if phase == Phase.NEEDS_ATTENTION:
        missing = unproven(state)
        return f"attention: {missing[0].what}" if missing else "attention"
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


def _subagents(state: SessionState, names: Sequence[str]) -> list[SubagentStatus]:
    tasks = list(state.tasks.values())
    subagents = []
    for name in names:
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
    return subagents


def _counts(state: SessionState) -> Counts:
    tasks = list(state.tasks.values())
    return Counts(
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


def _pending_approvals(
    state: SessionState, locate: ArtifactLocator
) -> tuple[list[PendingApprovalStatus], int]:
    approvals, omitted = bounded(state.pending_approval_records(), STATUS_LIST_LIMIT)
    shown = [
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
    ]
    return shown, omitted


def _deliverables(
    state: SessionState, locate: ArtifactLocator, review_names: Collection[str]
) -> tuple[list[DeliverableStatus], int]:
    names = sorted(state.deliverables, key=lambda n: (state.deliverables[n], n))
    shown, omitted = bounded(names, STATUS_LIST_LIMIT)
    deliverables = []
    for name in shown:
        record = state.artifacts[name]
        deliverables.append(
            DeliverableStatus(
                name=name,
                sha256=record.ref.sha256,
                size=record.ref.size,
                media_type=record.ref.media_type,
                location=locate(record.ref),
                subagent=record.subagent,
                ready_for_review=name in review_names,
                command=commands.download(state.session_id, name),
            )
        )
    return deliverables, omitted


def session_status(
    state: SessionState,
    *,
    locate: ArtifactLocator = _default_location,
    liveness: Liveness | None = None,
) -> SessionStatus:
    phase = phase_of(state, liveness)
    interruption = interruption_of(state, liveness)
    approvals, approvals_omitted = _pending_approvals(state, locate)
    open_waits, waits_omitted = bounded(state.open_wait_records(), STATUS_LIST_LIMIT)
    classified = classify(state, liveness)
    reviews = [i.label for i in classified if i.state == "ready_for_review"]
    deliverables, deliverables_omitted = _deliverables(state, locate, reviews)
    subagent_names, subagents_omitted = bounded(sorted(state.subagents), STATUS_LIST_LIMIT)
    unknown, unknown_omitted = bounded(sorted(state.unknown_outcomes), STATUS_LIST_LIMIT)
    items, items_omitted = bounded([i for i in classified if i.state != "done"], STATUS_LIST_LIMIT)
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
        conditions=conditions_of(state, phase, interruption, reviews=reviews),
        interruption=interruption,
        counts=_counts(state),
        last_checkpoint=_checkpoint_status(state, verified=False),
        last_verified_checkpoint=_checkpoint_status(state, verified=True),
        pending_approvals=approvals,
        pending_approvals_omitted=approvals_omitted,
        waits=[
            WaitStatus(
                wait_id=w.wait_id,
                kind=w.kind,
                reason=w.reason,
                condition=w.condition,
                artifact=w.artifact,
                owed=w.owed,
                subagent=w.subagent,
            )
            for w in open_waits
        ],
        waits_omitted=waits_omitted,
        deliverables=deliverables,
        deliverables_omitted=deliverables_omitted,
        subagents=_subagents(state, subagent_names),
        subagents_omitted=subagents_omitted,
        unknown_outcomes=unknown,
        unknown_outcomes_omitted=unknown_omitted,
        items=items,
        items_omitted=items_omitted,
        **_links_status(state),
    )


def _links_status(state: SessionState) -> dict[str, object]:
    """The record's own clock and the sessions it is linked with, for the fleet and objective views."""
    children, omitted = bounded(sorted(state.children), STATUS_LIST_LIMIT)
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
