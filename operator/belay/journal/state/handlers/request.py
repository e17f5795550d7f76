"""Handlers of the request and the decisions on it: the request, its scope changes, approvals and
rejections."""

from __future__ import annotations

from typing import Literal

from immutables import Map

from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    RejectionEvent,
    ScopeChangeEvent,
    UserInputEvent,
)
from belay.journal.state.building import Updates, decided, new_record, replaced
from belay.journal.state.invalidation import invalidate, invalidate_from, reopen, running_on
from belay.journal.state.records import (
    GOAL_PART,
    ApprovalRecord,
    Decision,
    DecisionRecord,
    RejectionRecord,
    Request,
    RequestChange,
    ScopeChangeRecord,
)
from belay.journal.state.session import SessionState


def on_user_input(s: SessionState, e: UserInputEvent) -> Updates:
    p = e.payload
    return {
        "request": new_record(
            Request, goal=p.goal, parts=dict(p.parts), version=p.request_version, seq=e.seq
        ),
        "started_executor": dict(p.executor),
    }


def on_scope_change(s: SessionState, e: ScopeChangeEvent) -> Updates:
    p = e.payload
    old = s.request
    parts = dict(old.parts)
    changed = tuple(sorted(k for k, v in p.changed_parts.items() if old.parts.get(k) != v))
    removed = tuple(sorted(k for k in p.removed_parts if k in old.parts))
    parts.update(p.changed_parts)
    for k in removed:
        del parts[k]
    goal = old.goal
    touched = [*changed, *removed]
    differences = []
    if p.goal is not None and p.goal != old.goal:
        goal = p.goal
        touched.append(GOAL_PART)
        differences.append(new_record(RequestChange, part=GOAL_PART, before=old.goal, after=p.goal))
    differences += [
        new_record(RequestChange, part=k, before=old.parts.get(k), after=p.changed_parts[k]) for k in changed
    ]
    differences += [new_record(RequestChange, part=k, before=old.parts[k], after=None) for k in removed]
    part_versions = s.part_changed_in_version
    for part in touched:
        part_versions = part_versions.set(part, p.request_version)
    results, invalidated = invalidate(s, touched, p.request_version, e.seq)
    updates: Updates = {
        "request": new_record(Request, goal=goal, parts=parts, version=p.request_version, seq=e.seq),
        "part_changed_in_version": part_versions,
        "results": results,
    }
    who = p.by or e.actor.name or e.actor.kind
    reopened = reopen(
        s,
        updates,
        invalidated=invalidated,
        steps=running_on(s, touched),
        seq=e.seq,
        because=f"request v{p.request_version} ({who}): {p.summary}",
        by_rejection=False,
    )
    updates["scope_changes"] = (
        *s.scope_changes,
        new_record(
            ScopeChangeRecord,
            seq=e.seq,
            request_version=p.request_version,
            summary=p.summary,
            goal=p.goal,
            changed_parts=changed,
            removed_parts=removed,
            invalidated=invalidated,
            by=who,
            at=e.created_at,
            changes=tuple(differences),
            reopened_steps=reopened,
        ),
    )
    decided(
        s,
        updates,
        new_record(
            DecisionRecord,
            seq=e.seq,
            kind="amend",
            item=f"request v{p.request_version}",
            outcome=p.summary,
            by=who,
            at=e.created_at,
            reason=p.summary,
        ),
    )
    return updates


def on_approval_request(s: SessionState, e: ApprovalRequestEvent) -> Updates:
    p = e.payload
    record = new_record(
        ApprovalRecord,
        approval_id=p.approval_id,
        operation_id=p.operation_id,
        payload_sha256=p.payload_sha256,
        tool=p.tool,
        summary=p.summary,
        requested_seq=e.seq,
        request_expires_at=p.expires_at,
        payload_ref=p.payload_ref,
        content_ref=p.content_ref,
        content_name=p.content_name,
        kind=p.kind,
    )
    previous = s.approvals.get(p.approval_id)
    if previous is not None and previous.decision is not None:
        # A decision recorded before its request (e.g. declared in the spec) stays in force.
        record = replaced(
            record,
            {
                k: getattr(previous, k)
                for k in (
                    "decision",
                    "decided_seq",
                    "decided_by",
                    "decision_reason",
                    "decision_payload_sha256",
                    "decision_expires_at",
                )
            },
        )
    updates: Updates = {
        "approvals": s.approvals.set(p.approval_id, record),
        "approvals_by_operation": _add_approval_id(s, p.operation_id, p.approval_id),
    }
    if record.pending:
        updates["pending_approvals"] = s.pending_approvals.set(p.approval_id, e.seq)
    return updates


def _add_approval_id(s: SessionState, operation_id: str, approval_id: str) -> Map[str, tuple[str, ...]]:
    ids = s.approvals_by_operation.get(operation_id, ())
    if approval_id in ids:
        return s.approvals_by_operation
    return s.approvals_by_operation.set(operation_id, (*ids, approval_id))


def on_approval(s: SessionState, e: ApprovalEvent) -> Updates:
    p = e.payload
    previous = s.approvals.get(p.approval_id)
    decision: Decision = "granted" if p.granted else "rejected"
    fields = {
        "decision": decision,
        "decided_seq": e.seq,
        "decided_by": p.by,
        "decision_reason": p.reason,
        "decision_payload_sha256": p.payload_sha256,
        "decision_expires_at": p.expires_at,
    }
    if previous is None:
        record = new_record(
            ApprovalRecord,
            approval_id=p.approval_id,
            operation_id=p.operation_id,
            payload_sha256=p.payload_sha256,
            **fields,
        )
    else:
        record = replaced(previous, fields)
    updates: Updates = {
        "approvals": s.approvals.set(p.approval_id, record),
        "approvals_by_operation": _add_approval_id(s, p.operation_id, p.approval_id),
    }
    decided(
        s,
        updates,
        new_record(
            DecisionRecord,
            seq=e.seq,
            kind="approval",
            item=p.approval_id,
            outcome=decision,
            by=p.by or e.actor.name or e.actor.kind,
            at=e.created_at,
            reason=p.reason,
        ),
    )
    if p.approval_id in s.pending_approvals:
        updates["pending_approvals"] = s.pending_approvals.delete(p.approval_id)
        if not p.granted and record.kind == "dispatch":
            _reject_pending_operation(s, updates, e, record)
    return updates


def _reject_pending_operation(
    s: SessionState, updates: Updates, e: ApprovalEvent, approval: ApprovalRecord
) -> None:
    """An operation turned down before it ran: the step that asked for it is redone, with the
    reason for the executor to act on, instead of going on as if it had run."""
    p = e.payload
    operation = s.operations.get(p.operation_id)
    _record_rejection(
        s,
        updates,
        e,
        kind="approval",
        item=p.approval_id,
        sha256=approval.payload_sha256,
        reason=p.reason,
        step=operation.step if operation is not None else None,
        produced=None,
        operation_id=p.operation_id,
    )


def on_rejection(s: SessionState, e: RejectionEvent) -> Updates:
    """A published deliverable turned down: the result that published it, the step that made it
    and everything built on them are invalid; the step is redone with the reason."""
    p = e.payload
    artifact = s.artifacts.get(p.name)
    produced = None
    if artifact is not None and artifact.ref.sha256 == p.sha256 and artifact.result_id:
        produced = artifact.result_id  # other bytes under the name are not what was rejected
    result = s.results.get(produced) if produced else None
    step = result.step if result is not None else None
    if produced and step is None:
        step = _collecting_step(s, p.name)
    updates: Updates = {}
    decided(
        s,
        updates,
        new_record(
            DecisionRecord,
            seq=e.seq,
            kind="rejection",
            item=p.name,
            outcome=f"rejected sha256 {p.sha256[:12]}",
            by=p.by or e.actor.name or e.actor.kind,
            at=e.created_at,
            reason=p.reason,
        ),
    )
    _record_rejection(
        s,
        updates,
        e,
        kind="deliverable",
        item=p.name,
        sha256=p.sha256,
        reason=p.reason,
        step=step,
        produced=produced,
        operation_id=produced if produced in s.operations else None,
    )
    return updates


def _collecting_step(s: SessionState, name: str) -> str | None:
    """The step of a coordinator that collected `name` (`<child>/<its name>`) from a child session:
    the step of its latest `await_session` of the child. A rejection of the collected bytes redoes
    it, and it waits for the child's next end."""
    child, _, own_name = name.partition("/")
    if not own_name or child not in s.children:
        return None
    awaited = [
        s.operations[op_id]
        for op_id, delegation in s.delegations.items()
        if delegation == f"await_session {child}" and op_id in s.operations
    ]
    latest = max(awaited, key=lambda op: op.request_seq, default=None)
    return latest.step if latest is not None else None


def _record_rejection(
    s: SessionState,
    updates: Updates,
    e: ApprovalEvent | RejectionEvent,
    *,
    kind: Literal["deliverable", "approval"],
    item: str,
    sha256: str,
    reason: str,
    step: str | None,
    produced: str | None,
    operation_id: str | None,
) -> None:
    """Invalidate what was rejected (the result that `produced` it, and the work of its `step` in
    its current round) and everything built on it, reopen the step, and keep the rejection."""
    who = e.payload.by or e.actor.name or e.actor.kind
    because = f"{item} rejected by {who}" + (f": {reason}" if reason else "")
    direct = {produced: because} if produced else {}
    if step is not None:
        direct.update({r.result_id: because for r in s.results.values() if r.step == step and r.valid})
    invalidated: tuple[str, ...] = ()
    if direct:
        updates["results"], invalidated = invalidate_from(s.results, direct, seq=e.seq, version=None)
    # An approval turned down reopens its step even before the step produced anything.
    named = (step,) if step is not None and (kind == "approval" or produced) else ()
    reopened = reopen(
        s, updates, invalidated=invalidated, steps=named, seq=e.seq, because=because, by_rejection=True
    )
    updates["rejections"] = (
        *s.rejections,
        new_record(
            RejectionRecord,
            seq=e.seq,
            kind=kind,
            item=item,
            sha256=sha256,
            reason=reason,
            by=who,
            at=e.created_at,
            operation_id=operation_id,
            invalidated=invalidated,
            reopened_steps=reopened,
        ),
    )
