"""One line per event a person cares about: `belay run`'s progress, and `belay events` /
`kubectl belay events` without `--json`. Each kind of event has its own function
(`belay.journal.dispatch`); the events without one (model output, summaries, ...) get a bare line.
A line is one line whatever the record text in it holds (`belay.views.escaping.inline`): a newline
in a note or an error cannot print a line of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.dispatch import handler_table
from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    ArtifactEvent,
    CheckpointEvent,
    Event,
    ExecutorChangeEvent,
    LifecycleEvent,
    NoteEvent,
    OperationOutcomeEvent,
    RemoteEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
    UserMessageEvent,
    WaitEvent,
)
from belay.journal.handover import change_phrase
from belay.views.escaping import inline


def _who(event: Event) -> str:
    return f"{event.actor.subagent} " if event.actor.subagent else ""


def _lifecycle(event: LifecycleEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"{p.kind} {p.detail or p.reason}".rstrip()


def _task(event: TaskEvent, style: CommandStyle) -> str | None:
    p = event.payload
    if "/" not in p.task_id or p.status not in ("running", "done", "verified"):
        return None
    return f"step {p.task_id.split('/', 1)[1]} {p.status} {p.detail}".rstrip()


def _tool_request(event: ToolRequestEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return None if p.tool == "update_plan" else f"-> {p.tool} ({p.operation_id})"


def _tool_result(event: ToolResultEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return None if p.ok else f"x {p.operation_id}: {p.error}"


def _approval_request(event: ApprovalRequestEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"waits for approval {p.approval_id}: {style(commands.approve(event.session_id, p.approval_id))}"


def _approval(event: ApprovalEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"approval {p.approval_id} {'granted' if p.granted else 'rejected'} by {p.by}"


def _note(event: NoteEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"{p.kind} [{p.status}] {p.text}"


def _artifact(event: ArtifactEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"published {p.name} sha256 {p.ref.sha256[:12]}"


def _checkpoint(event: CheckpointEvent, style: CommandStyle) -> str | None:
    p = event.payload
    status = p.verification.status if p.verification else "no verification"
    return f"checkpoint {p.checkpoint_id} ({status})"


def _operation_outcome(event: OperationOutcomeEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"outcome {p.outcome} {p.operation_id}: {p.detail}"


def _wait(event: WaitEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return None if p.kind == "ready_for_review" else f"waits ({p.kind}) {p.reason}"


def _remote(event: RemoteEvent, style: CommandStyle) -> str | None:
    p = event.payload
    if p.kind == "session":
        return f"{p.executor} session {p.remote_session_id} at {p.endpoint} ({p.detail})"
    if p.kind in ("call_refused", "interrupted", "failed", "message_delivered"):
        return f"{p.executor} {p.kind} {p.operation_id or ''}: {p.detail}"
    return None


def _user_message(event: UserMessageEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return f"message to {p.subagent} from {p.by or 'a person'}: {p.text}"


def _executor_change(event: ExecutorChangeEvent, style: CommandStyle) -> str | None:
    p = event.payload
    return change_phrase(
        p.from_type, p.from_model, p.to_type, p.to_model, by=p.by, at_seq=p.at_seq, reason=p.reason
    )


_LINES: dict[type, Callable[[Any, CommandStyle], str | None]] = handler_table(
    _lifecycle,
    _task,
    _tool_request,
    _tool_result,
    _approval_request,
    _approval,
    _note,
    _artifact,
    _checkpoint,
    _operation_outcome,
    _wait,
    _remote,
    _executor_change,
    _user_message,
)


def progress_line(event: Event, style: CommandStyle = commands.local) -> str | None:
    """The event's line, or None for an event a person does not follow (`style` spells the
    commands a line names)."""
    line = _LINES.get(type(event))
    shown = line(event, style) if line is not None else None
    return inline(f"{event.seq:>4} {_who(event)}{shown}") if shown is not None else None


def event_line(event: Event, style: CommandStyle = commands.local) -> str:
    """The event's line for a listing of the whole record: its progress line, else seq and type."""
    return progress_line(event, style) or inline(f"{event.seq:>4} {event.type}")
