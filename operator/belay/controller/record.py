"""What the operator writes to the session record, as pure functions of the spec and the folded
state. Every write carries an idempotency key derived from the object's uid (and the generation or
the item it records), so a reconcile that runs twice, or after an operator restart, writes once.

The operator records the request itself, before it creates the first harness pod, and what changes
afterwards: scope changes (request version N+1, with who edited `spec.request`: the field manager
the apiserver names for it), approvals, rejections and other decisions given in the spec, a lost
harness, a session given up on, and the copy of a fork's source history. The harness takes the
request from the record (its first attempt declares the plan from the spec).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from belay.api.agentsession import AgentSessionSpec, ApprovalGrant
from belay.api.status import ForkStatus, OperatorReason
from belay.journal.claims import approval_claim, rejection_claim
from belay.journal.decisions import DecisionError, decision_write, reconcile_write
from belay.journal.events import (
    Actor,
    Approval,
    CheckpointEvent,
    Event,
    EventDraft,
    ExecutorChange,
    Lifecycle,
    LifecycleKind,
    Payload,
    Rejection,
    ScopeChange,
    UserInput,
)
from belay.journal.state import SessionState

OPERATOR = Actor(kind="operator", name="belay-operator")


@dataclass(frozen=True)
class RecordWrite:
    """One atomic batch for the event store, with the key that makes it idempotent, and the
    claim of a decision (the store refuses it when someone decided first)."""

    idempotency_key: str
    drafts: tuple[EventDraft, ...]
    claim: str | None = None


def _write(key: str, *payloads: Payload, claim: str | None = None) -> RecordWrite:
    return RecordWrite(key, tuple(EventDraft(payload=p, actor=OPERATOR) for p in payloads), claim)


def request_write(
    uid: str, generation: int, spec: AgentSessionSpec, state: SessionState
) -> RecordWrite | None:
    """The spec's request as the record's first request, when the record holds none yet. A fork
    takes its request from the copied history (a different spec request is then a scope change)."""
    if state.request.version != 0:
        return None
    request = UserInput(goal=spec.request.goal, parts=dict(spec.request.parts), executor=executor_of(spec))
    return _write(f"request/{uid}/{generation}", request)


def executor_of(spec: AgentSessionSpec) -> dict[str, Any]:
    return spec.executor.model_dump(mode="json", by_alias=True, exclude_none=True)


def executor_change_write(
    uid: str, generation: int, spec: AgentSessionSpec, state: SessionState, by: str = ""
) -> RecordWrite | None:
    """The move to another executor (or model) when `spec.executor` names one the record does not
    have the session on; the running attempt ends at its next step boundary and the next one runs
    there. None when they agree, or when the record does not say which executor it is on."""
    current = state.current_executor()
    if not current:
        return None
    wanted = executor_of(spec)
    if (wanted.get("type"), wanted.get("model")) == (current.get("type"), current.get("model")):
        return None
    change = ExecutorChange(
        from_type=str(current.get("type", "")),
        from_model=current.get("model"),
        to_type=spec.executor.type,
        to_model=spec.executor.model,
        executor=wanted,
        at_seq=state.last_seq,
        by=by,
        reason=f"spec.executor changed in generation {generation}",
    )
    return _write(f"executor/{uid}/{generation}", change)


def request_editor(metadata: Mapping[str, Any], field: str = "request") -> str:
    """Who last edited `spec.<field>` (`spec.request` by default): the field manager of the newest
    managedFields entry that owns it (`kubectl-belay/<user>` for `kubectl belay amend`,
    `kubectl-edit`, `argocd-controller`, ...); "" when the object does not say."""
    latest: tuple[str, str] | None = None
    for entry in metadata.get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        if f"f:{field}" not in (fields.get("f:spec") or {}):
            continue
        when, manager = str(entry.get("time") or ""), str(entry.get("manager") or "")
        if latest is None or when >= latest[0]:
            latest = (when, manager)
    return latest[1] if latest else ""


def scope_change_write(
    uid: str, generation: int, spec: AgentSessionSpec, state: SessionState, by: str = ""
) -> RecordWrite | None:
    """A scope change when the spec's request differs from the recorded one. None before the
    first request is recorded, or when nothing changed."""
    recorded = state.request
    if recorded.version == 0:
        return None
    wanted = spec.request
    changed = {k: v for k, v in wanted.parts.items() if recorded.parts.get(k) != v}
    removed = tuple(sorted(k for k in recorded.parts if k not in wanted.parts))
    goal_changed = wanted.goal != recorded.goal
    if not (changed or removed or goal_changed):
        return None
    touched = [*sorted(changed), *removed] + (["goal"] if goal_changed else [])
    change = ScopeChange(
        request_version=recorded.version + 1,
        summary=f"spec changed in generation {generation}: " + ", ".join(touched),
        goal=wanted.goal if goal_changed else None,
        changed_parts=changed,
        removed_parts=removed,
        by=by,
    )
    return _write(f"scope/{uid}/{generation}", change)


def _operation_of(grant: ApprovalGrant, state: SessionState) -> tuple[str, str] | None:
    """(approval id, operation id) of the recorded request a grant names, if there is one."""
    if grant.approval_id is not None and grant.approval_id in state.approvals:
        record = state.approvals[grant.approval_id]
        return record.approval_id, record.operation_id
    if grant.operation_id is not None:
        for approval_id in state.approvals_by_operation.get(grant.operation_id, ()):
            return approval_id, grant.operation_id
    return None


def spec_approval_writes(uid: str, spec: AgentSessionSpec, state: SessionState) -> list[RecordWrite]:
    """An approval for each grant in the spec that names a pending request with exactly the
    grant's payload hash. A grant for another payload (the operation's arguments changed since it
    was given) is not recorded at all: the request stays pending and visible."""
    writes = []
    for grant in spec.approvals:
        named = _operation_of(grant, state)
        if named is None:
            continue
        approval_id, operation_id = named
        record = state.approvals[approval_id]
        if not record.pending or record.payload_sha256 != grant.payload_sha256:
            continue
        approval = Approval(
            approval_id=approval_id,
            operation_id=operation_id,
            payload_sha256=grant.payload_sha256,
            granted=True,
            by="spec",
            reason="approved in the AgentSession spec",
            expires_at=grant.expires_at,
        )
        key = f"approval/{uid}/{approval_id}/{grant.payload_sha256}"
        writes.append(_write(key, approval, claim=approval_claim(approval_id)))
    return writes


def spec_decision_writes(uid: str, spec: AgentSessionSpec, state: SessionState) -> list[RecordWrite]:
    """Each decision of `spec.decisions` whose item still waits, as the events a local decision
    appends (`belay.journal.decisions`); one already taken, or naming nothing that waits, records
    nothing."""
    writes = []
    for decision in spec.decisions:
        by = decision.by or "spec"
        try:
            if decision.verdict in ("succeeded", "failed"):
                write = reconcile_write(
                    state, decision.id, decision.verdict == "succeeded", decision.text, by
                )
            else:
                write = decision_write(state, decision.id, decision.verdict == "yes", decision.text, by)
        except DecisionError:
            continue
        key = f"decision/{uid}/{decision.id}/{decision.verdict}"
        writes.append(RecordWrite(drafts=write.drafts, idempotency_key=key, claim=write.claim))
    return writes


def spec_rejection_writes(uid: str, spec: AgentSessionSpec, state: SessionState) -> list[RecordWrite]:
    """A rejection for each entry in the spec that names, by its exact hash, a pending approval
    (recorded as a rejected approval) or a published deliverable (recorded as a rejection). An
    entry for bytes no longer pending or published records nothing: the redone step's new
    deliverable is not rejected by the entry that turned down the old one. Nor does an entry for a
    deliverable collected from a child session (the operator does not reopen children yet): such an
    entry is reported instead (`rejections_not_applied`)."""
    writes = []
    for entry in spec.rejections:
        key = f"rejection/{uid}/{entry.item}/{entry.sha256}"
        by = entry.by or "spec"
        approval = state.approvals.get(entry.item)
        artifact = state.artifacts.get(entry.item)
        if approval is not None and approval.pending and approval.payload_sha256 == entry.sha256:
            decision = Approval(
                approval_id=approval.approval_id,
                operation_id=approval.operation_id,
                payload_sha256=approval.payload_sha256,
                granted=False,
                by=by,
                reason=entry.reason,
            )
            writes.append(_write(key, decision, claim=approval_claim(approval.approval_id)))
        elif (
            artifact is not None
            and entry.item in state.deliverables
            and artifact.ref.sha256 == entry.sha256
            # Turning down what a coordinator collected reopens the child, which the operator does
            # not do yet: `kubectl belay reject` refuses it, and an entry written by hand records
            # nothing, the collected bytes stand.
            and state.collected_from(entry.item) is None
        ):
            rejection = Rejection(name=entry.item, sha256=entry.sha256, reason=entry.reason, by=by)
            writes.append(_write(key, rejection, claim=rejection_claim(entry.item, entry.sha256)))
    return writes


def rejections_not_applied(spec: AgentSessionSpec, state: SessionState) -> dict[str, str]:
    """The `spec.rejections` entries this operator records nothing for although they name bytes
    the record holds, and why (by `item/sha256`): each is reported, never silently dropped."""
    not_applied = {}
    for entry in spec.rejections:
        link = state.collected_from(entry.item)
        artifact = state.artifacts.get(entry.item)
        if link is not None and artifact is not None and artifact.ref.sha256 == entry.sha256:
            not_applied[f"{entry.item}/{entry.sha256}"] = (
                f"spec.rejections names {entry.item}, collected from child session {link.session}: "
                f"turning it down reopens {link.session}, which the operator does not do yet; nothing "
                "was recorded and the collected bytes stand"
            )
    return not_applied


def harness_lost_write(uid: str, attempt: int, pod: str, why: str) -> RecordWrite:
    lost = Lifecycle(
        kind=LifecycleKind.HARNESS_LOST,
        attempt=attempt,
        reason="HarnessPodLost",
        detail=f"pod {pod}: {why}",
    )
    return _write(f"harness-lost/{uid}/{attempt}", lost)


def sandbox_lost_write(uid: str, subagent: str, pod: str, why: str, loss_number: int) -> RecordWrite:
    """The `loss_number`-th loss of the subagent's sandbox pod; its replacement pod carries that
    number, so the key makes the record and the pod name agree."""
    lost = Lifecycle(
        kind=LifecycleKind.SANDBOX_LOST,
        reason="SandboxPodLost",
        detail=f"pod {pod}: {why}",
        subagent=subagent,
    )
    return _write(f"sandbox-lost/{uid}/{subagent}/{loss_number}", lost)


def gave_up_write(uid: str, losses: int, max_attempts: int) -> RecordWrite:
    failed = Lifecycle(
        kind=LifecycleKind.SESSION_FAILED,
        reason=OperatorReason.ATTEMPTS_EXHAUSTED,
        detail=f"the harness was lost {losses} times (recovery.maxAttempts is {max_attempts})",
    )
    return _write(f"gave-up/{uid}", failed)


class ForkSourceMissing(LookupError):
    pass


def fork_write(
    uid: str, source_events: Sequence[Event], checkpoint_id: str | None, source: str | None = None
) -> tuple[RecordWrite, ForkStatus]:
    """The source session's history up to and including the checkpoint to fork from (the named
    one, else the last verified one), as one batch for the new session's empty record. `source`:
    the source session's name, as the status shows it (its record's id when not given)."""
    checkpoints = [e for e in source_events if isinstance(e, CheckpointEvent)]
    if checkpoint_id is None:
        chosen = next((e for e in reversed(checkpoints) if e.payload.verified), None)
    else:
        chosen = next((e for e in checkpoints if e.payload.checkpoint_id == checkpoint_id), None)
    if chosen is None or not source_events:
        wanted = checkpoint_id or "a verified checkpoint"
        raise ForkSourceMissing(f"the source session has no {wanted}")
    source = source or source_events[0].session_id
    drafts = tuple(
        EventDraft(payload=e.payload, parent_seq=e.parent_seq, actor=e.actor)
        for e in source_events
        if e.seq <= chosen.seq
    )
    status = ForkStatus(session=source, checkpoint_id=chosen.payload.checkpoint_id, covers_seq=chosen.seq)
    return RecordWrite(f"fork/{uid}", drafts), status
