"""Handlers of what runs a session: the lifecycle of attempts and sandboxes, the remote sessions of
managed executors, linked sessions, summaries and snapshots."""

from __future__ import annotations

from typing import Any

from immutables import Map

from belay.journal.events import (
    ExecutorChangeEvent,
    LifecycleEvent,
    LifecycleKind,
    RemoteEvent,
    RemoteKind,
    SessionLinkEvent,
    StateSnapshotEvent,
    SummaryEvent,
    TaskStatus,
)
from belay.journal.state.building import Updates, new_record, note_ordinal, note_subagent, replaced
from belay.journal.state.records import (
    MAX_ATTEMPTS,
    RECENT_LIMIT,
    ExecutorChangeRecord,
    LifecycleEntry,
    RemoteCallRecord,
    RemoteSessionRecord,
    SessionLinkRecord,
    SubagentRecord,
)
from belay.journal.state.repeats import counted
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
    updates: Updates = {}
    fields.update(_lifecycle_changes(s, updates, e, entry))
    updates["lifecycle"] = replaced(lc, fields)
    return updates


def _lifecycle_changes(
    s: SessionState, updates: Updates, e: LifecycleEvent, entry: LifecycleEntry
) -> Updates:
    """The fields of the session's lifecycle that one kind of entry changes; a sandbox's entries
    change its subagent's record in `updates` too."""
    lc, p = s.lifecycle, e.payload
    match p.kind:
        case LifecycleKind.HARNESS_STARTED:
            started = {"harness_running": True, "harness_starts": lc.harness_starts + 1}
            # A session that failed and is resumed by hand is live again until it ends anew.
            live = {"failed": False, "end_reason": "", "end_detail": ""} if lc.failed else {}
            return {**started, **live, "model_id": e.actor.model_id or ""}
        case LifecycleKind.HARNESS_LOST:
            lost = {"harness_running": False, "harness_lost": lc.harness_lost + 1, "recovering": True}
            return {**lost, "repeated_failure": counted(s, entry)}
        case LifecycleKind.HARNESS_FINISHED:
            # An end with a reason that does not end the session is abnormal; one without is not.
            abnormal = bool(p.reason) and not (lc.completed or lc.failed)
            return {"harness_running": False, "repeated_failure": counted(s, entry) if abnormal else None}
        case LifecycleKind.HARNESS_STOPPED:
            return {"harness_running": False, "clean_stops": lc.clean_stops + 1, "repeated_failure": None}
        case LifecycleKind.SANDBOX_STARTED | LifecycleKind.SANDBOX_REPLACED:
            return _sandbox_started(s, updates, e)
        case LifecycleKind.SANDBOX_LOST:
            return _sandbox_lost(s, updates, e)
        case LifecycleKind.RESTORED:
            return _restored(s, updates, e)
        case LifecycleKind.RECOVERY_FAILED:
            return {"recovery_failures": lc.recovery_failures + 1, "last_recovery_failure": entry}
        case LifecycleKind.SESSION_COMPLETED:
            return {
                "completed": True,
                "failed": False,
                "harness_running": False,
                **_ended(p.reason, p.detail),
            }
        case LifecycleKind.SESSION_FAILED:
            failed: dict[str, Any] = {"failed": True, "completed": False, "harness_running": False}
            if p.reason == MAX_ATTEMPTS:
                # Every attempt so far is spent; the next one is a person's resume by hand.
                failed["attempts_forgiven"] = lc.harness_starts - lc.clean_stops
            return {**failed, **_ended(p.reason, p.detail)}
        case LifecycleKind.TOOLS_LISTED:
            return _tools_listed(s, updates, e)


def _ended(reason: str, detail: str) -> dict[str, Any]:
    return {"end_reason": reason, "end_detail": detail}


def _tools_listed(s: SessionState, updates: Updates, e: LifecycleEvent) -> dict[str, Any]:
    """A tool server's listing: kept per server, and a listing unlike the one before it noted."""
    p = e.payload
    if p.subagent and p.listing is not None:
        note_subagent(s, updates, p.subagent, e.seq)
        subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
        sub = subagents[p.subagent]
        before = dict(sub.tool_listings)
        changed = p.reason in before and before[p.reason] != p.listing.sha256
        listings = tuple(sorted({**before, p.reason: p.listing.sha256}.items()))
        fields = {"tool_listings": listings, **({"tools_changed": p.detail} if changed else {})}
        updates["subagents"] = subagents.set(p.subagent, replaced(sub, fields))
    return {}


def _sandbox_started(s: SessionState, updates: Updates, e: LifecycleEvent) -> dict[str, Any]:
    """A subagent's sandbox started, or replaced the one before it."""
    p = e.payload
    replacement = p.kind == LifecycleKind.SANDBOX_REPLACED
    if p.subagent:
        note_subagent(s, updates, p.subagent, e.seq)
        subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
        sub = subagents[p.subagent]
        started = {
            "sandbox_starts": sub.sandbox_starts + 1,
            "sandbox_replacements": sub.sandbox_replacements + int(replacement),
            "sandbox_attempt": p.attempt,
            "sandbox_detail": p.detail,
            "last_restored_from": None,
        }
        updates["subagents"] = subagents.set(p.subagent, replaced(sub, started))
    return {"sandbox_replaced": s.lifecycle.sandbox_replaced + 1} if replacement else {}


def _sandbox_lost(s: SessionState, updates: Updates, e: LifecycleEvent) -> dict[str, Any]:
    """A subagent's sandbox went away under a running attempt: the session recovers until it is
    restored."""
    p, lc = e.payload, s.lifecycle
    fields: dict[str, Any] = {"sandboxes_lost": lc.sandboxes_lost + 1}
    if p.subagent:
        note_subagent(s, updates, p.subagent, e.seq)
        subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
        sub = subagents[p.subagent]
        updates["subagents"] = subagents.set(
            p.subagent, replaced(sub, {"sandbox_losses": sub.sandbox_losses + 1})
        )
        # A finished subagent's harness never uses its sandbox again: nothing waits on a restore.
        task = s.tasks.get(p.subagent)
        if task is None or task.status not in (TaskStatus.DONE, TaskStatus.VERIFIED):
            fields["lost_sandboxes"] = tuple(sorted({*lc.lost_sandboxes, p.subagent}))
            fields["recovering"] = True
    return fields


def _restored(s: SessionState, updates: Updates, e: LifecycleEvent) -> dict[str, Any]:
    """A sandbox restored from a checkpoint; once no lost sandbox waits for one, recovery is over."""
    p, lc = e.payload, s.lifecycle
    fields: dict[str, Any] = {"restores": lc.restores + 1}
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
    return fields


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
            # A replacement (belay.executors.managed): the one before it stays named in the record.
            before = {}
            if previous is not None:
                before = {
                    "replaced": (*previous.replaced, previous.remote_session_id),
                    "replaced_because": previous.failure,
                    "lost_in_a_row": 0 if previous.delivered else previous.lost_in_a_row + 1,
                }
            session = new_record(
                RemoteSessionRecord,
                subagent=p.subagent,
                executor=p.executor,
                remote_session_id=p.remote_session_id,
                endpoint=p.endpoint,
                seq=e.seq,
                last_detail=p.detail,
                **before,
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
        note_ordinal(s, updates, p.operation_id)
        counter = "calls"
    elif p.kind == RemoteKind.CALL_REFUSED and call is not None:
        changed = {"refused_seq": e.seq, "refusal": p.detail}
        updates["remote_calls"] = calls.set(call.operation_id, replaced(call, changed))
        # Both are answered without running; the page tells a call that did not fit its schema
        # from one asked on work a change reopened (answered "not run: ...").
        counter = "not_run" if p.detail.startswith("not run: ") else "refused"
    elif p.kind == RemoteKind.RESULT_DELIVERED and call is not None and call.delivered_seq is None:
        changed = {"delivered_seq": e.seq, "idempotency_key": p.idempotency_key}
        updates["remote_calls"] = calls.set(call.operation_id, replaced(call, changed))
        counter = "delivered"
    elif p.kind == RemoteKind.INTERRUPTED:
        counter = "interruptions"
    elif p.kind == RemoteKind.MESSAGE_DELIVERED:
        counter = "messages"
    known = s.remote_sessions.get(p.subagent)
    # What concerns a remote session that was replaced since (a delivery noted late) is not the
    # replacement's.
    if known is not None and p.remote_session_id in ("", known.remote_session_id):
        fields: dict[str, Any] = {"last_detail": p.detail}
        if counter is not None:
            fields[counter] = getattr(known, counter) + 1
        if p.kind == RemoteKind.MESSAGE_DELIVERED and p.idempotency_key:
            fields["message_keys"] = (*known.message_keys, p.idempotency_key)
            fields["message_turn"] = p.turn_id or ""
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
    if p.kind == "input":
        pins = s.input_pins
        for deliverable, sha256 in p.deliverables.items():
            pins = pins.set(f"{p.session}/{deliverable}", sha256)
        return {"input_pins": pins}
    known = s.children.get(p.session)
    fields: dict[str, Any] = {
        "session": p.session,
        "part": p.part or (known.part if known else ""),
        "objective": p.objective or (known.objective if known else ""),
        "operation_id": p.operation_id or (known.operation_id if known else ""),
        "goal": p.goal or (known.goal if known else ""),
        "plan": p.plan or (known.plan if known else ""),
        "deliverable": p.deliverable or (known.deliverable if known else ""),
        "seq": known.seq if known else e.seq,
        "phase": p.phase or (known.phase if known else ""),
        # An end names every deliverable it brought (none, too); any other link keeps the known ones.
        "deliverables": tuple(sorted(p.deliverables.items()))
        if p.phase
        else (known.deliverables if known else ()),
        "round": known.round if known else 1,
    }
    if p.reopened and known is not None:
        # Its part changed: how it ended no longer stands, and it runs its next round.
        fields.update(phase="", deliverables=(), round=known.round + 1)
    return {"children": s.children.set(p.session, new_record(SessionLinkRecord, **fields))}


def on_executor_change(s: SessionState, e: ExecutorChangeEvent) -> Updates:
    p = e.payload
    change = new_record(
        ExecutorChangeRecord,
        seq=e.seq,
        from_type=p.from_type,
        from_model=p.from_model,
        to_type=p.to_type,
        to_model=p.to_model,
        executor=dict(p.executor),
        at_seq=p.at_seq,
        by=p.by or e.actor.name or e.actor.kind,
        reason=p.reason,
        at=e.created_at,
    )
    return {"executor_changes": (*s.executor_changes, change)}
