"""Handlers of what runs a session: the lifecycle of attempts and sandboxes, the remote sessions of
managed executors, linked sessions, summaries and snapshots."""

from __future__ import annotations

from typing import Any

from immutables import Map

from belay.journal.events import (
    LifecycleEvent,
    LifecycleKind,
    RemoteEvent,
    RemoteKind,
    SessionLinkEvent,
    StateSnapshotEvent,
    SummaryEvent,
    TaskStatus,
)
from belay.journal.state.building import Updates, new_record, note_subagent, replaced
from belay.journal.state.records import (
    RECENT_LIMIT,
    LifecycleEntry,
    RemoteCallRecord,
    RemoteSessionRecord,
    SessionLinkRecord,
    SubagentRecord,
)
from belay.journal.state.session import SessionState


def on_lifecycle(s: SessionState, e: LifecycleEvent) -> Updates:
    p = e.payload
    entry = new_record(
        LifecycleEntry,
        seq=e.seq,
        kind=p.kind,
        attempt=p.attempt,
        reason=p.reason,
        detail=p.detail,
        subagent=p.subagent,
        checkpoint_id=p.checkpoint_id,
    )
    lc = s.lifecycle
    fields: dict[str, Any] = {"recent": (*lc.recent, entry)[-RECENT_LIMIT:]}
    if p.lease is not None:
        fields["lease"] = max(lc.lease, p.lease)
    if p.attempt is not None:
        fields["attempt"] = max(lc.attempt, p.attempt)
    kind = p.kind
    updates: Updates = {}
    if kind == LifecycleKind.HARNESS_STARTED:
        fields["harness_running"] = True
        fields["harness_starts"] = lc.harness_starts + 1
    elif kind == LifecycleKind.HARNESS_LOST:
        fields["harness_running"] = False
        fields["harness_lost"] = lc.harness_lost + 1
        fields["recovering"] = True
    elif kind == LifecycleKind.HARNESS_FINISHED:
        fields["harness_running"] = False
    elif kind == LifecycleKind.HARNESS_STOPPED:
        fields["harness_running"] = False
        fields["clean_stops"] = lc.clean_stops + 1
    elif kind == LifecycleKind.SANDBOX_STARTED or kind == LifecycleKind.SANDBOX_REPLACED:
        replacement = kind == LifecycleKind.SANDBOX_REPLACED
        if replacement:
            fields["sandbox_replaced"] = lc.sandbox_replaced + 1
        if p.subagent:
            note_subagent(s, updates, p.subagent, e.seq)
            subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
            sub = subagents[p.subagent]
            sub = replaced(
                sub,
                {
                    "sandbox_starts": sub.sandbox_starts + 1,
                    "sandbox_replacements": sub.sandbox_replacements + int(replacement),
                    "sandbox_attempt": p.attempt,
                    "sandbox_detail": p.detail,
                    "last_restored_from": None,
                },
            )
            updates["subagents"] = subagents.set(p.subagent, sub)
    elif kind == LifecycleKind.SANDBOX_LOST:
        fields["sandboxes_lost"] = lc.sandboxes_lost + 1
        if p.subagent:
            note_subagent(s, updates, p.subagent, e.seq)
            subagents = updates.get("subagents", s.subagents)
            sub = subagents[p.subagent]
            updates["subagents"] = subagents.set(
                p.subagent, replaced(sub, {"sandbox_losses": sub.sandbox_losses + 1})
            )
            # A finished subagent's harness never uses its sandbox again: nothing waits on a restore.
            task = s.tasks.get(p.subagent)
            if task is None or task.status not in (TaskStatus.DONE, TaskStatus.VERIFIED):
                fields["lost_sandboxes"] = tuple(sorted({*lc.lost_sandboxes, p.subagent}))
                fields["recovering"] = True
    elif kind == LifecycleKind.RESTORED:
        fields["restores"] = lc.restores + 1
        restored = s.subagents.get(p.subagent) if p.subagent else None
        if restored is not None:
            if restored.sandbox_starts > 1:
                fields["recovery_restores"] = lc.recovery_restores + 1
            updates["subagents"] = s.subagents.set(
                restored.name, replaced(restored, {"last_restored_from": p.checkpoint_id})
            )
        elif lc.harness_starts > 1 or lc.harness_lost:
            fields["recovery_restores"] = lc.recovery_restores + 1
        remaining = tuple(name for name in lc.lost_sandboxes if name != p.subagent)
        fields["lost_sandboxes"] = remaining
        fields["recovering"] = bool(remaining)
    elif kind == LifecycleKind.RECOVERY_FAILED:
        fields["recovery_failures"] = lc.recovery_failures + 1
        fields["last_recovery_failure"] = entry
    elif kind == LifecycleKind.SESSION_COMPLETED:
        fields.update(completed=True, failed=False, harness_running=False, end_reason=p.reason)
    elif kind == LifecycleKind.SESSION_FAILED:
        fields.update(failed=True, completed=False, harness_running=False, end_reason=p.reason)
    updates["lifecycle"] = replaced(lc, fields)
    return updates


def on_summary(s: SessionState, e: SummaryEvent) -> Updates:
    return {"latest_summary_seq": e.seq}


def on_remote(s: SessionState, e: RemoteEvent) -> Updates:
    p = e.payload
    updates: Updates = {}
    if p.kind == RemoteKind.RESOURCE and p.resource and p.resource_id:
        updates["remote_resources"] = s.remote_resources.set(f"{p.subagent}/{p.resource}", p.resource_id)
        return updates
    if p.kind == RemoteKind.SESSION:
        previous = s.remote_sessions.get(p.subagent)
        if previous is not None and previous.remote_session_id == p.remote_session_id:
            session = replaced(
                previous, {"endpoint": p.endpoint or previous.endpoint, "last_detail": p.detail}
            )
        else:
            session = new_record(
                RemoteSessionRecord,
                subagent=p.subagent,
                executor=p.executor,
                remote_session_id=p.remote_session_id,
                endpoint=p.endpoint,
                seq=e.seq,
                last_detail=p.detail,
            )
        updates["remote_sessions"] = s.remote_sessions.set(p.subagent, session)
        note_subagent(s, updates, p.subagent, e.seq)
        return updates
    calls = s.remote_calls
    call = calls.get(p.operation_id) if p.operation_id else None
    counter: str | None = None  # the remote session's count this event adds one to
    if p.kind == RemoteKind.CALL and p.operation_id and call is None:
        call = new_record(
            RemoteCallRecord,
            operation_id=p.operation_id,
            subagent=p.subagent,
            call_id=p.call_id or "",
            turn_id=p.turn_id,
            tool=p.tool,
            seq=e.seq,
        )
        updates["remote_calls"] = calls.set(p.operation_id, call)
        counter = "calls"
    elif p.kind == RemoteKind.CALL_REFUSED and call is not None:
        changed = {"refused_seq": e.seq, "refusal": p.detail}
        updates["remote_calls"] = calls.set(call.operation_id, replaced(call, changed))
        counter = "refused"
    elif p.kind == RemoteKind.RESULT_DELIVERED and call is not None and call.delivered_seq is None:
        changed = {"delivered_seq": e.seq, "idempotency_key": p.idempotency_key}
        updates["remote_calls"] = calls.set(call.operation_id, replaced(call, changed))
        counter = "delivered"
    elif p.kind == RemoteKind.INTERRUPTED:
        counter = "interruptions"
    known = s.remote_sessions.get(p.subagent)
    if known is not None:
        fields: dict[str, Any] = {"last_detail": p.detail}
        if counter is not None:
            fields[counter] = getattr(known, counter) + 1
        if p.kind == RemoteKind.FAILED:
            fields["failure"] = p.detail
        updates["remote_sessions"] = s.remote_sessions.set(p.subagent, replaced(known, fields))
    return updates


def on_state_snapshot(s: SessionState, e: StateSnapshotEvent) -> Updates:
    # A snapshot of the state is not a fact about the session: folding it changes nothing.
    return {}


def on_session_link(s: SessionState, e: SessionLinkEvent) -> Updates:
    p = e.payload
    if p.kind == "parent":
        link = new_record(
            SessionLinkRecord,
            session=p.session,
            part=p.part,
            objective=p.objective,
            operation_id=p.operation_id,
            seq=e.seq,
        )
        return {"parent": link}
    known = s.children.get(p.session)
    fields: dict[str, Any] = {
        "session": p.session,
        "part": p.part or (known.part if known else ""),
        "objective": p.objective or (known.objective if known else ""),
        "operation_id": p.operation_id or (known.operation_id if known else ""),
        "goal": p.goal or (known.goal if known else ""),
        "plan": p.plan or (known.plan if known else ""),
        "seq": known.seq if known else e.seq,
        "phase": p.phase or (known.phase if known else ""),
        "deliverables": tuple(sorted(p.deliverables.items())) or (known.deliverables if known else ()),
    }
    return {"children": s.children.set(p.session, new_record(SessionLinkRecord, **fields))}
