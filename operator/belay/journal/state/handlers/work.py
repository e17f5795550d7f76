"""Handlers of the work a session produces: plan steps, notes, artifacts, checkpoints and waits."""

from __future__ import annotations

from belay.journal.events import (
    ArtifactEvent,
    Checkpoint,
    CheckpointEvent,
    NoteEvent,
    TaskEvent,
    TaskStatus,
    UserMessageEvent,
    WaitEvent,
)
from belay.journal.state.building import Updates, decided, new_record, note_subagent, push_recent, replaced
from belay.journal.state.invalidation import register_result
from belay.journal.state.records import (
    TASK_HISTORY_LIMIT,
    ArtifactRecord,
    CheckpointRecord,
    DecisionRecord,
    NoteRecord,
    TaskRecord,
    TaskTransition,
    UserMessageRecord,
    WaitRecord,
)
from belay.journal.state.session import SessionState


def on_artifact(s: SessionState, e: ArtifactEvent) -> Updates:
    p = e.payload
    subagent = p.subagent or e.actor.subagent
    record = new_record(
        ArtifactRecord,
        name=p.name,
        ref=p.ref,
        deliverable=p.deliverable,
        subagent=subagent,
        description=p.description,
        result_id=p.result_id or f"artifact:{p.name}",
        seq=e.seq,
    )
    updates: Updates = {"artifacts": s.artifacts.set(p.name, record)}
    if p.deliverable:
        updates["deliverables"] = s.deliverables.set(p.name, e.seq)
    elif p.name in s.deliverables:
        updates["deliverables"] = s.deliverables.delete(p.name)
    note_subagent(s, updates, subagent, e.seq)
    register_result(
        s,
        updates,
        result_id=record.result_id or p.name,
        source="artifact",
        label=p.name,
        seq=e.seq,
        derived_from=p.derived_from,
        output_sha256=p.ref.sha256,
    )
    return updates


def on_checkpoint(s: SessionState, e: CheckpointEvent) -> Updates:
    p = e.payload
    record = new_record(CheckpointRecord, seq=e.seq, checkpoint=p)
    updates: Updates = {"latest_checkpoint": record, "checkpoint_count": s.checkpoint_count + 1}
    if record.verified:
        updates["latest_verified_checkpoint"] = record
        updates["verified_checkpoints"] = s.verified_checkpoints.set(p.subagent or "", record)
    _note_verification(s, updates, p)
    owner = p.subagent or e.actor.subagent
    if owner:
        previous = s.subagent_checkpoints.get(owner, ())
        updates["subagent_checkpoints"] = s.subagent_checkpoints.set(owner, (*previous, record))
    if p.result_id:
        # A step's checkpoint is named after the step, with "@<round>" from its second round on.
        step = p.checkpoint_id.split("@", 1)[0]
        register_result(
            s,
            updates,
            result_id=p.result_id,
            source="checkpoint",
            label=p.checkpoint_id,
            seq=e.seq,
            derived_from=p.derived_from,
            step=step if step in s.tasks else None,
        )
    return updates


def _note_verification(s: SessionState, updates: Updates, p: Checkpoint) -> None:
    """A step's checkpoint (named after the step, "@<round>" from its second round on) says how
    the step's verification went in this round."""
    task = s.tasks.get(p.checkpoint_id.split("@", 1)[0])
    if task is None or p.verification is None or task.status not in (TaskStatus.DONE, TaskStatus.VERIFIED):
        return
    verification = p.verification
    exit_code = "" if verification.exit_code is None else f" (exit {verification.exit_code})"
    detail = f"`{verification.command}`{exit_code}"
    fields = {"verification": verification.status, "verification_detail": detail}
    updates["tasks"] = s.tasks.set(task.task_id, replaced(task, fields))


def on_note(s: SessionState, e: NoteEvent) -> Updates:
    p = e.payload
    previous = s.notes.get(p.note_id)
    record = new_record(
        NoteRecord,
        note_id=p.note_id,
        kind=p.kind,
        text=p.text,
        status=p.status,
        evidence=p.evidence,
        first_seq=previous.first_seq if previous else e.seq,
        last_seq=e.seq,
        result_id=p.result_id or (f"note:{p.note_id}" if p.derived_from is not None else None),
    )
    updates: Updates = {
        "notes": s.notes.set(p.note_id, record),
        "recent_notes": push_recent(s.recent_notes, p.note_id),
    }
    if p.result_id or p.derived_from is not None:
        register_result(
            s,
            updates,
            result_id=p.result_id or f"note:{p.note_id}",
            source="note",
            label=p.note_id,
            seq=e.seq,
            derived_from=p.derived_from,
        )
    return updates


_no_verification = {"verification": None, "verification_detail": ""}


def on_task(s: SessionState, e: TaskEvent) -> Updates:
    p = e.payload
    previous = s.tasks.get(p.task_id)
    transition = new_record(TaskTransition, seq=e.seq, status=p.status, detail=p.detail)
    if previous is None:
        record = new_record(
            TaskRecord,
            task_id=p.task_id,
            title=p.title,
            owner=p.owner,
            deliverable=p.deliverable,
            depends_on=p.depends_on,
            status=p.status,
            first_seq=e.seq,
            last_seq=e.seq,
            history=(transition,),
            transitions=1,
            ever_verified=p.status == TaskStatus.VERIFIED,
            request_parts=p.request_parts,
        )
    else:
        record = replaced(
            previous,
            {
                "title": p.title or previous.title,
                "owner": p.owner or previous.owner,
                "deliverable": p.deliverable or previous.deliverable,
                "depends_on": p.depends_on or previous.depends_on,
                "status": p.status,
                "last_seq": e.seq,
                "history": (*previous.history, transition)[-TASK_HISTORY_LIMIT:],
                "transitions": previous.transitions + 1,
                "ever_verified": previous.ever_verified or p.status == TaskStatus.VERIFIED,
                "request_parts": p.request_parts if p.request_parts is not None else previous.request_parts,
                # Run again (or failed, or planned again): the verification of its last finish no
                # longer says how this round went.
                **({} if p.status in (TaskStatus.DONE, TaskStatus.VERIFIED) else _no_verification),
            },
        )
    updates: Updates = {"tasks": s.tasks.set(p.task_id, record)}
    if p.status == TaskStatus.RUNNING:
        updates["current_step"] = p.task_id
    note_subagent(s, updates, record.owner, e.seq)
    return updates


def on_wait(s: SessionState, e: WaitEvent) -> Updates:
    p = e.payload
    previous = s.waits.get(p.wait_id)
    record = new_record(
        WaitRecord,
        wait_id=p.wait_id,
        kind=p.kind,
        reason=p.reason,
        condition=p.condition,
        artifact=p.artifact,
        resolved=p.resolved,
        opened_seq=previous.opened_seq if previous else e.seq,
        last_seq=e.seq,
        subagent=previous.subagent if previous else e.actor.subagent,
        owed=p.owed or (previous.owed if previous else None),
    )
    updates: Updates = {"waits": s.waits.set(p.wait_id, record)}
    if p.owed and record.subagent and not p.resolved:
        updates["turn_ends"] = s.turn_ends.set(record.subagent, p.wait_id)
    if p.resolved:
        if p.wait_id in s.open_waits:
            updates["open_waits"] = s.open_waits.delete(p.wait_id)
            if e.actor.kind == "user" and previous is not None:
                decided(s, updates, _answer(previous, e))
    else:
        updates["open_waits"] = s.open_waits.set(p.wait_id, record.opened_seq)
    return updates


def _answer(wait: WaitRecord, e: WaitEvent) -> DecisionRecord:
    """A person's answer to a wait: the resolved reason is the wait's own, then "-> yes (who) text"."""
    said = e.payload.reason.removeprefix(wait.reason).removeprefix(" -> ")
    outcome, _, rest = said.partition(" ")
    by = e.actor.name or "user"
    if outcome not in ("yes", "no", "message"):
        outcome, rest = "answered", said
    reason = rest.removeprefix(f"({by})").strip()
    return new_record(
        DecisionRecord,
        seq=e.seq,
        kind="answer",
        item=wait.wait_id,
        outcome=outcome,
        by=by,
        at=e.created_at,
        reason=reason,
    )


def on_user_message(s: SessionState, e: UserMessageEvent) -> Updates:
    p = e.payload
    record = new_record(
        UserMessageRecord,
        wait_id=p.wait_id,
        subagent=p.subagent,
        text=p.text,
        by=p.by or e.actor.name or "",
        seq=e.seq,
        at=e.created_at,
    )
    return {"user_messages": s.user_messages.set(p.wait_id, record)}
