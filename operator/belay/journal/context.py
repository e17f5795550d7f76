"""The model's context as a projection of the record, at a cost that does not grow with history.

`build_context` reads only:
- the folded `SessionState` (goal, request parts, latest checkpoint, the capped "recent" lists and
  the open-item indexes),
- `EventReader.tail(n)` for the recent events,
- `EventReader.latest("summary")` for the newest compaction (`belay.journal.compaction`), which
  stands for every event before it covers up to,
- `EventReader.read(seq, seq)` for at most `EVIDENCE_LIMIT` result events chosen from state,
so its cost depends on the budget and the caps, never on the number of events in the log.

Tokens are estimated as len(text) / 4.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from belay.journal.dispatch import handler_table
from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    ArtifactEvent,
    CheckpointEvent,
    Event,
    ExecutorChangeEvent,
    LifecycleEvent,
    ModelOutputEvent,
    NoteEvent,
    NoteKind,
    OperationOutcomeEvent,
    RejectionEvent,
    RemoteEvent,
    ScopeChangeEvent,
    SummaryEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
    UserInputEvent,
    UserMessageEvent,
    WaitEvent,
)
from belay.journal.handover import change_phrase
from belay.journal.state import SessionState
from belay.journal.storage import EventReader

TAIL_LIMIT = 200  # events read from the tail at most
EVIDENCE_LIMIT = 8  # result events read by seq at most
LINE_CHARS = 600  # one rendered event never takes more than this
EVIDENCE_SHARE = 0.3  # of the budget left after the fixed sections


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceItem(Model):
    kind: Literal["decision", "finding", "hypothesis", "result", "wait", "approval", "unknown_outcome"]
    id: str
    text: str
    seq: int


class ModelContext(Model):
    session_id: str
    goal: str
    request_version: int
    request_parts: dict[str, str]
    current_step: str | None
    checkpoint: str | None  # one line on the latest checkpoint, verified or not
    summary: str | None  # the newest compaction, if any
    evidence: list[EvidenceItem]
    recent: list[str]  # rendered events, oldest first, all within the budget
    recent_from_seq: int | None
    last_seq: int
    budget_tokens: int
    tokens: int

    def to_text(self) -> str:
        lines = [f"Goal (request v{self.request_version}): {self.goal}"]
        lines += [f"- {k}: {v}" for k, v in self.request_parts.items()]
        if self.current_step:
            lines.append(f"Current step: {self.current_step}")
        if self.checkpoint:
            lines.append(f"Checkpoint: {self.checkpoint}")
        return "\n".join(lines + self.history_lines("Evidence:"))

    def history_lines(self, evidence_heading: str) -> list[str]:
        """The summary of earlier events, the evidence (under `evidence_heading`), the recent events."""
        lines = [f"Summary of earlier events: {self.summary}"] if self.summary else []
        if self.evidence:
            lines.append(evidence_heading)
            lines += [f"- {e.kind} {e.id}: {e.text}" for e in self.evidence]
        if self.recent:
            lines.append(f"Recent events (from seq {self.recent_from_seq}):")
            lines += self.recent
        return lines


def _clip(text: str, limit: int = LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _user_input(e: UserInputEvent) -> str:
    return e.payload.goal


def _scope_change(e: ScopeChangeEvent) -> str:
    return f"v{e.payload.request_version}: {e.payload.summary}"


def _model_output(e: ModelOutputEvent) -> str:
    return e.payload.text


def _tool_request(e: ToolRequestEvent) -> str:
    p = e.payload
    return f"{p.operation_id} {p.tool}({_compact(p.arguments)}) [{p.effect.value}]"


def _tool_result(e: ToolResultEvent) -> str:
    p = e.payload
    outcome = "ok" if p.ok else f"error: {p.error}"
    return f"{p.operation_id} {outcome}: {_compact(p.output)}"


def _approval_request(e: ApprovalRequestEvent) -> str:
    p = e.payload
    return f"{p.approval_id} for {p.operation_id}: {p.summary}"


def _approval(e: ApprovalEvent) -> str:
    p = e.payload
    body = f"{p.approval_id} {'granted' if p.granted else 'rejected'} by {p.by or '?'}"
    return f"{body}: {p.reason}" if p.reason else body


def _artifact(e: ArtifactEvent) -> str:
    p = e.payload
    return f"{p.name} sha256:{p.ref.sha256[:12]} {p.description}"


def _checkpoint(e: CheckpointEvent) -> str:
    p = e.payload
    return f"{p.checkpoint_id} covers seq {p.covers_seq}, next {p.next_step}"


def _note(e: NoteEvent) -> str:
    p = e.payload
    return f"{p.kind.value} {p.note_id} [{p.status}]: {p.text}"


def _task(e: TaskEvent) -> str:
    p = e.payload
    return f"{p.task_id} {p.status.value} {p.title or p.detail}".rstrip()


def _wait(e: WaitEvent) -> str:
    p = e.payload
    return f"{p.kind.value} {p.wait_id}{' resolved' if p.resolved else ''}: {p.reason}"


def _operation_outcome(e: OperationOutcomeEvent) -> str:
    p = e.payload
    return f"{p.operation_id} {p.outcome} {p.detail}".rstrip()


def _lifecycle(e: LifecycleEvent) -> str:
    p = e.payload
    return f"{p.kind.value} attempt {p.attempt} {p.reason}".rstrip()


def _summary(e: SummaryEvent) -> str:
    p = e.payload
    return f"seq {p.covers_from_seq}-{p.covers_to_seq}: {p.text}"


def _rejection(e: RejectionEvent) -> str:
    p = e.payload
    return f"{p.name} (sha256:{p.sha256[:12]}) rejected by {p.by or '?'}: {p.reason}"


def _remote(e: RemoteEvent) -> str:
    p = e.payload
    return f"{p.executor} {p.kind.value} {p.operation_id or p.remote_session_id} {p.detail}".rstrip()


def _user_message(e: UserMessageEvent) -> str:
    p = e.payload
    return f"to {p.subagent} from {p.by or 'a person'}: {p.text}"


def _executor_change(e: ExecutorChangeEvent) -> str:
    p = e.payload
    return change_phrase(p.from_type, p.from_model, p.to_type, p.to_model, at_seq=p.at_seq, reason=p.reason)


# The body of each event's line; the events with none (a state snapshot, a session link) show
# their head alone.
_BODIES = handler_table(
    _user_input,
    _scope_change,
    _model_output,
    _tool_request,
    _tool_result,
    _approval_request,
    _approval,
    _artifact,
    _checkpoint,
    _note,
    _task,
    _wait,
    _operation_outcome,
    _lifecycle,
    _summary,
    _rejection,
    _remote,
    _executor_change,
    _user_message,
)


def render_event(event: Event) -> str:
    """One line per event, the way the model sees history."""
    who = f" {event.actor.subagent}" if event.actor.subagent else ""
    body = _BODIES.get(type(event))
    return _clip(f"[{event.seq} {event.type}{who}] {body(event) if body else ''}".rstrip())


def _checkpoint_line(state: SessionState) -> str | None:
    record = state.latest_checkpoint
    if record is None:
        return None
    cp = record.checkpoint
    verified = "verified" if cp.verified else "not verified"
    done = ", ".join(cp.completed_steps) or "none"
    line = f"{cp.checkpoint_id} ({verified}, covers seq {cp.covers_seq}); done: {done}; next: {cp.next_step}"
    if not cp.verified and state.latest_verified_checkpoint is not None:
        line += f"; last verified: {state.latest_verified_checkpoint.checkpoint.checkpoint_id}"
    return _clip(line)


def select_evidence(state: SessionState) -> tuple[list[EvidenceItem], list[tuple[str, int]]]:
    """What the next step should know, from the bounded parts of state. Returns the items and the
    (result id, seq) pairs whose events are worth reading for their output."""
    items: list[EvidenceItem] = []
    for approval in state.pending_approval_records()[:EVIDENCE_LIMIT]:
        items.append(
            EvidenceItem(
                kind="approval",
                id=approval.approval_id,
                text=f"pending for {approval.operation_id} ({approval.tool}); dispatch only once granted",
                seq=approval.requested_seq or 0,
            )
        )
    for op_id in sorted(state.unknown_outcomes)[:EVIDENCE_LIMIT]:
        items.append(
            EvidenceItem(
                kind="unknown_outcome",
                id=op_id,
                text="outcome unknown; never repeat it, wait for reconciliation",
                seq=state.unknown_outcomes[op_id],
            )
        )
    for wait in state.open_wait_records()[:EVIDENCE_LIMIT]:
        items.append(
            EvidenceItem(
                kind="wait", id=wait.wait_id, text=f"{wait.kind.value}: {wait.reason}", seq=wait.opened_seq
            )
        )
    for note_id in reversed(state.recent_notes):
        note = state.notes[note_id]
        if note.status in ("rejected", "superseded"):
            continue
        kind: Literal["decision", "finding", "hypothesis"] = (
            "decision"
            if note.kind == NoteKind.DECISION
            else "finding"
            if note.kind == NoteKind.FINDING
            else "hypothesis"
        )
        items.append(
            EvidenceItem(kind=kind, id=note_id, text=f"[{note.status}] {note.text}", seq=note.last_seq)
        )
    # Valid recent results, those of the step in progress first, then the newest.
    candidates = [state.results[r] for r in state.recent_results if state.results[r].valid]
    candidates.sort(key=lambda r: (r.step is not None and r.step == state.current_step, r.seq), reverse=True)
    wanted = [(r.result_id, r.seq) for r in candidates[:EVIDENCE_LIMIT]]
    return items, wanted


async def build_context(
    store: EventReader,
    session_id: str,
    state: SessionState,
    budget_tokens: int,
    *,
    tail_limit: int = TAIL_LIMIT,
) -> ModelContext:
    """The context for the next model call, within `budget_tokens` (estimated)."""
    parts = dict(sorted(state.request.parts.items()))
    checkpoint = _checkpoint_line(state)
    summary_event = await store.latest(session_id, "summary")
    summary = None
    if isinstance(summary_event, SummaryEvent):
        covered = summary_event.payload
        summary = _clip(
            f"seq {covered.covers_from_seq}-{covered.covers_to_seq} (summary at seq {summary_event.seq}): "
            f"{covered.text}",
            4 * LINE_CHARS,
        )

    context = ModelContext(
        session_id=session_id,
        goal=state.request.goal,
        request_version=state.request.version,
        request_parts=parts,
        current_step=state.current_step,
        checkpoint=checkpoint,
        summary=summary,
        evidence=[],
        recent=[],
        recent_from_seq=None,
        last_seq=state.last_seq,
        budget_tokens=budget_tokens,
        tokens=0,
    )
    # Each line is charged on its own (with its newline) exactly as `to_text` prints it; the sum of
    # per-line estimates never undercounts the estimate of the whole text.
    remaining = budget_tokens - estimate_tokens(context.to_text() + "\n")
    remaining -= estimate_tokens("Evidence:\n") + estimate_tokens(
        f"Recent events (from seq {state.last_seq}):\n"
    )

    evidence, wanted = select_evidence(state)
    for result_id, seq in wanted:
        found = await store.read(session_id, seq, seq)
        if found:
            evidence.append(EvidenceItem(kind="result", id=result_id, text=render_event(found[0]), seq=seq))
    evidence_budget = max(0, int(remaining * EVIDENCE_SHARE))
    kept_evidence: list[EvidenceItem] = []
    used = 0
    for item in evidence:
        cost = estimate_tokens(f"- {item.kind} {item.id}: {item.text}\n")
        if used + cost > evidence_budget:
            continue
        kept_evidence.append(item)
        used += cost
    remaining -= used

    tail = await store.tail(session_id, tail_limit)
    recent: list[str] = []
    for event in reversed(tail):
        line = render_event(event)
        cost = estimate_tokens(line + "\n")
        if cost > remaining:
            break
        recent.append(line)
        remaining -= cost
    recent.reverse()
    recent_from = tail[len(tail) - len(recent)].seq if recent else None

    context = context.model_copy(
        update={"evidence": kept_evidence, "recent": recent, "recent_from_seq": recent_from}
    )
    return context.model_copy(update={"tokens": estimate_tokens(context.to_text())})
