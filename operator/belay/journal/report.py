"""The timeline report: one self-contained HTML page that shows a session over time.

`session_report(events, state, ...)` builds a `SessionReport` from the record: a row per step,
grouped by subagent, with its tool calls, checkpoints and deliverables; a row per wait (on the
user, an approval, an external condition, a review) with how long it lasted and who ended it;
the attempts, and the stretches between an attempt's last recorded event and the start of the
next (the interruptions); recoveries, rejections and scope changes. `render_html(reports)` draws
one or several reports (an objective's sessions) on one time axis, with each session's briefing
beside its timeline and a link to fetch each deliverable.

Both are pure: the caller reads the record, the liveness and the artifact store, and passes them
in. The page is one file: inline CSS and SVG, no script, no font, nothing fetched, and a
Content-Security-Policy that forbids all of those to the browser as well. Everything that came
from the record (a goal, a note, a reason, a name a model chose) is hostile input: it reaches the
page only through `_text` (HTML-escaped, control characters shown as \\uXXXX) and only through
`_href` into a link (file, http and https URLs; anything else is shown as text).

A long idle stretch (a night spent waiting for a person) would squeeze everything else into a
corner, so the axis is broken: no stretch between two consecutive moments takes more than
`MAX_GAP_SHARE` of the width, and a shortened one is drawn as a break labelled with its real
length. Every bar and wait says its duration in words, so nothing has to be read off the scale.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from belay.journal import commands
from belay.journal.events import Actor, ArtifactRef, Event, LifecycleKind, TaskStatus, WaitKind
from belay.journal.state import SessionState, fold
from belay.journal.status import Liveness, interruption_of, phase_of

# A stretch between two consecutive moments is drawn at most this share of the axis.
MAX_GAP_SHARE = 0.2
# Rows per subagent in the chart; the earliest finished steps beyond it are only in the tables.
CHART_STEP_LIMIT = 40
FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


BarKind = Literal["attempt", "subagent", "step", "call", "wait_user", "approval", "wait_external", "review"]
MarkKind = Literal[
    "asked",
    "ended",
    "checkpoint",
    "deliverable",
    "restored",
    "sandbox",
    "recovery_failed",
    "unknown",
    "reconciled",
    "rejected",
]


class Bar(Model):
    """Something that lasted: from `start` to `end` (None: still going when the report was made)."""

    kind: BarKind
    label: str
    start: datetime
    end: datetime | None = None
    status: str = ""  # a step's status; a call's ok | failed | open | unknown; a wait's outcome
    detail: str = ""  # shown on hover


class Mark(Model):
    """Something that happened at one moment."""

    kind: MarkKind
    at: datetime
    label: str
    ok: bool = True  # a checkpoint whose verification passed, a reconciliation that took effect


RowKind = Literal["session", "subagent", "step", "wait"]


class Row(Model):
    kind: RowKind
    label: str
    title: str = ""  # the full text behind a shortened label
    bars: list[Bar] = []
    marks: list[Mark] = []


class Gap(Model):
    """A stretch with no live attempt: from the last event the record holds of `attempt` to the
    start of the attempt that resumed it (`end` None: not resumed yet)."""

    attempt: int
    start: datetime
    end: datetime | None = None
    resumed_by: int | None = None
    why: str = ""
    doing: str = ""  # the steps that were running, in words
    next: str = ""  # for one not resumed yet: what happens next, with the command a person runs


class RecoveryLine(Model):
    """One thing an attempt did to recover, or found it could not: a sandbox lost, a new sandbox
    restored from a checkpoint, an operation whose outcome was unknown and how it was settled."""

    at: datetime
    by: str  # "attempt 2", or the person or component that did it
    text: str
    detail: str = ""
    ok: bool = True


class ScopeLine(Model):
    at: datetime
    request_version: int
    summary: str
    by: str = ""


class RejectionLine(Model):
    """A person turned down a published deliverable: the step that made it is redone."""

    at: datetime
    name: str
    by: str
    reason: str


class StepEntry(Model):
    step_id: str
    subagent: str
    title: str
    status: str
    started: datetime | None = None
    ended: datetime | None = None
    calls: int = 0
    failed_calls: int = 0
    interrupted: bool = False  # an interruption fell while it ran


WaitEntryKind = Literal["on_user", "approval", "on_external", "review"]


class WaitEntry(Model):
    wait_id: str
    kind: WaitEntryKind
    subagent: str = ""
    on: str  # on whom or on what: "you", "you: approve publish_deliverable", the external condition
    reason: str = ""
    opened: datetime | None = None  # None: not known (a status holds no history)
    resolved: datetime | None = None
    by: str = ""
    outcome: str = ""  # granted, rejected, answered, resolved


class DeliverableEntry(Model):
    name: str
    subagent: str = ""
    size: int | None = None
    sha256: str = ""
    command: str
    location: str = ""  # a file URI or a presigned URL, when the store gives one
    ready_for_review: bool = False


class SessionReport(Model):
    session_id: str
    phase: str
    goal: str
    now: datetime
    source: str  # where the report was read from, in words
    rows: list[Row]
    gaps: list[Gap]
    scope_changes: list[ScopeLine]
    recoveries: list[RecoveryLine] = []
    rejections: list[RejectionLine] = []
    steps: list[StepEntry]
    waits: list[WaitEntry]
    deliverables: list[DeliverableEntry]
    briefing: list[tuple[int, str]] = []  # (level, text): 0 a heading, 1 an entry, 2 a detail
    harness_lost_untimed: int = 0  # losses the source names without their times
    progress: str = ""  # the steps done, in words, where the source counts them without the steps


# --------------------------------------------------------------------------------------------------
# From the record


@dataclass
class _Step:
    subagent: str
    started: datetime | None = None
    ended: datetime | None = None
    calls: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


@dataclass
class _Wait:
    kind: WaitEntryKind
    subagent: str
    title: str  # its row's label
    on: str
    reason: str
    opened: datetime
    resolved: datetime | None = None
    by: str = ""
    outcome: str = ""


@dataclass
class _Attempt:
    number: int
    start: datetime
    last_seen: datetime
    end: datetime | None = None  # finished, or ended the session
    detail: str = ""


@dataclass
class _Scan:
    """What one pass over the events collects; `session_report` turns it into the model."""

    steps: dict[str, _Step] = field(default_factory=dict)
    subagent_marks: dict[str, list[Mark]] = field(default_factory=dict)
    session_marks: list[Mark] = field(default_factory=list)
    calls: dict[str, Bar] = field(default_factory=dict)
    call_step: dict[str, str] = field(default_factory=dict)
    call_subagent: dict[str, str] = field(default_factory=dict)
    waits: dict[str, _Wait] = field(default_factory=dict)
    attempts: dict[int, _Attempt] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)  # attempt -> why it was recorded lost
    gaps: list[Gap] = field(default_factory=list)
    scope_changes: list[ScopeLine] = field(default_factory=list)
    recoveries: list[RecoveryLine] = field(default_factory=list)
    unsettled: dict[str, int] = field(default_factory=dict)  # operation -> its "unknown" recovery line
    rejections: list[RejectionLine] = field(default_factory=list)
    published_by: dict[str, tuple[str, str]] = field(default_factory=dict)  # deliverable -> (subagent, step)
    running: dict[str, str] = field(default_factory=dict)  # subagent -> its running step
    sandbox_starts: dict[str, int] = field(default_factory=dict)
    ended: bool = False


def session_report(
    events: Sequence[Event],
    state: SessionState | None = None,
    *,
    liveness: Liveness | None = None,
    briefing: Sequence[tuple[int, str]] = (),
    locate: Callable[[ArtifactRef], str | None] | None = None,
) -> SessionReport:
    """The report of one session from its whole record. `liveness` says whether an attempt is
    alive, and its `now` is the report's (without it, the last event's time); `briefing` is the
    briefing as rows; `locate` gives a deliverable's file URI or presigned URL, or None."""
    state = state if state is not None else fold(events)
    now = liveness.now if liveness is not None else (state.last_event_at or datetime.now(UTC))
    scan = _Scan()
    for event in events:
        _scan_event(scan, state, event)
    for operation_id, call in scan.calls.items():
        step_id = scan.call_step.get(operation_id)
        if step_id is not None and step_id in scan.steps:
            scan.steps[step_id].calls.append(call)
    gone = interruption_of(state, liveness)
    if gone is not None and state.lifecycle.attempt in scan.attempts:
        current = scan.attempts[state.lifecycle.attempt]
        since = gone.since or current.last_seen
        scan.gaps.append(
            Gap(attempt=gone.attempt, start=min(since, now), why=gone.why, doing=gone.doing, next=gone.next)
        )
    rows = _rows(scan, state, now, alive=gone is None)
    steps = _step_entries(scan, state)
    waits = [
        WaitEntry(
            wait_id=wait_id,
            kind=w.kind,
            subagent=w.subagent,
            on=w.on,
            reason=w.reason,
            opened=w.opened,
            resolved=w.resolved,
            by=w.by,
            outcome=w.outcome,
        )
        for wait_id, w in scan.waits.items()
    ]
    return SessionReport(
        session_id=state.session_id,
        phase=phase_of(state, liveness).value,
        goal=state.request.goal,
        now=now,
        source=f"the session record: {state.event_count} events (seq 1 to {state.last_seq})",
        rows=rows,
        gaps=scan.gaps,
        scope_changes=scan.scope_changes,
        recoveries=scan.recoveries,
        rejections=scan.rejections,
        steps=steps,
        waits=waits,
        deliverables=_deliverables(state, locate),
        briefing=list(briefing),
    )


def _scan_event(scan: _Scan, state: SessionState, event: Event) -> None:
    at = event.created_at
    actor = event.actor
    if actor.kind == "harness" and actor.attempt in scan.attempts:
        scan.attempts[actor.attempt].last_seen = at
    p: Any = event.payload
    match event.type:
        case "user_input":
            scan.session_marks.append(
                Mark(kind="asked", at=at, label=f"asked (request v{p.request_version})")
            )
        case "scope_change":
            by = p.by or actor.name or actor.kind
            scan.scope_changes.append(
                ScopeLine(at=at, request_version=p.request_version, summary=p.summary, by=by)
            )
        case "rejection":
            by = p.by or actor.name or actor.kind
            scan.rejections.append(RejectionLine(at=at, name=p.name, by=by, reason=p.reason))
            mark = Mark(kind="rejected", at=at, label=f"{p.name} rejected by {by}: {p.reason}", ok=False)
            subagent, step = scan.published_by.get(p.name, ("", ""))
            if step:
                scan.steps[step].marks.append(mark)
            else:
                scan.subagent_marks.setdefault(subagent, []).append(mark)
        case "task":
            _scan_task(scan, state, p.task_id, p.status, at)
        case "tool_request":
            subagent = p.subagent or actor.subagent or ""
            scan.calls[p.operation_id] = Bar(
                kind="call",
                label=p.tool,
                start=at,
                status="open",
                detail=f"{p.tool} ({p.operation_id}, {p.effect.value})",
            )
            scan.call_subagent[p.operation_id] = subagent
            if p.step and p.step in state.tasks:
                scan.call_step[p.operation_id] = p.step
        case "tool_result":
            call = scan.calls.get(p.operation_id)
            if call is not None:
                failed = "" if p.ok else f": {p.error or 'failed'}"
                scan.calls[p.operation_id] = call.model_copy(
                    update={
                        "end": at,
                        "status": "ok" if p.ok else "failed",
                        "detail": call.detail + failed,
                    }
                )
        case "operation_outcome":
            call = scan.calls.get(p.operation_id)
            what = f"{call.label} ({p.operation_id})" if call is not None else p.operation_id
            if p.outcome == "unknown":
                # Not a failure yet: it is one only while nothing reconciles it.
                scan.unsettled[p.operation_id] = len(scan.recoveries)
                line = f"{what} was in flight: its outcome was unknown"
            else:
                line = f"{what} reconciled: it {'took' if p.succeeded else 'did not take'} effect" + (
                    f", by {p.by}" if p.by else ""
                )
                unknown = scan.unsettled.pop(p.operation_id, None)
                if unknown is not None:
                    scan.recoveries[unknown] = scan.recoveries[unknown].model_copy(update={"ok": True})
            scan.recoveries.append(
                RecoveryLine(at=at, by=_who(actor), text=line, detail=p.detail, ok=p.outcome != "unknown")
            )
            if p.outcome == "unknown":
                mark = Mark(kind="unknown", at=at, label=f"{p.operation_id}: outcome unknown", ok=False)
                call = scan.calls.get(p.operation_id)
                if call is not None and call.end is None:  # it runs no more: its attempt is gone
                    scan.calls[p.operation_id] = call.model_copy(update={"end": at, "status": "unknown"})
            else:
                verdict = "took effect" if p.succeeded else "did not take effect"
                by = f" ({p.by})" if p.by else ""
                mark = Mark(
                    kind="reconciled", at=at, label=f"{p.operation_id} reconciled: {verdict}{by}", ok=True
                )
            _mark_operation(scan, p.operation_id, mark)
        case "approval_request":
            subagent = actor.subagent or scan.call_subagent.get(p.operation_id, "")
            earlier = scan.waits.get(p.approval_id)
            scan.waits[p.approval_id] = _Wait(
                kind="approval",
                subagent=subagent,
                title=f"approve {p.tool}",
                on=f"you: approve {p.tool}",
                reason=p.summary,
                opened=at,
                resolved=earlier.resolved if earlier else None,
                by=earlier.by if earlier else "",
                outcome=earlier.outcome if earlier else "",
            )
        case "approval":
            wait = scan.waits.get(p.approval_id)
            outcome = "granted" if p.granted else "rejected"
            by = p.by or actor.name or actor.kind
            if wait is None:  # decided before it was asked for (a grant in the spec)
                scan.waits[p.approval_id] = _Wait(
                    kind="approval",
                    subagent=actor.subagent or "",
                    title=f"approve {p.operation_id}",
                    on="you: approve an operation",
                    reason=p.reason,
                    opened=at,
                    resolved=at,
                    by=by,
                    outcome=outcome,
                )
            else:
                wait.resolved, wait.by, wait.outcome = at, by, outcome
        case "wait":
            _scan_wait(scan, event)
        case "artifact" if p.deliverable:
            subagent = p.subagent or actor.subagent or ""
            mark = Mark(kind="deliverable", at=at, label=f"deliverable {p.name} published")
            producing = scan.running.get(subagent)
            scan.published_by[p.name] = (subagent, producing or "")
            if producing is not None:
                scan.steps[producing].marks.append(mark)
            else:
                scan.subagent_marks.setdefault(subagent, []).append(mark)
        case "checkpoint":
            verified = p.verified
            status = p.verification.status if p.verification else "no verification"
            mark = Mark(
                kind="checkpoint", at=at, label=f"checkpoint {p.checkpoint_id} ({status})", ok=verified
            )
            if p.checkpoint_id in scan.steps:
                scan.steps[p.checkpoint_id].marks.append(mark)
            else:
                scan.subagent_marks.setdefault(p.subagent or actor.subagent or "", []).append(mark)
        case "lifecycle":
            _scan_lifecycle(scan, event)


def _scan_task(scan: _Scan, state: SessionState, task_id: str, status: TaskStatus, at: datetime) -> None:
    record = state.tasks.get(task_id)
    owner = (record.owner if record else None) or ""
    step = scan.steps.setdefault(task_id, _Step(subagent=owner))
    if status == TaskStatus.PLANNED:
        return
    if step.started is None:
        step.started = at
    if status in FINISHED:
        step.ended = at
        if scan.running.get(owner) == task_id:
            del scan.running[owner]
    else:
        step.ended = None
        if task_id != owner:
            scan.running[owner] = task_id


def _scan_wait(scan: _Scan, event: Event) -> None:
    p: Any = event.payload
    actor = event.actor
    existing = scan.waits.get(p.wait_id)
    if existing is None:
        # A wait that names an approval is answered by that approval: it is shown once, as the approval.
        if any(a in p.wait_id or a in p.reason for a, w in scan.waits.items() if w.kind == "approval"):
            return
        kind: WaitEntryKind
        asked = scan.calls.get(p.condition or "")
        if p.kind == WaitKind.ON_USER:
            kind, on = "on_user", "you"
            title = f"reconcile {asked.label}" if asked is not None else "waits on you"
        elif p.kind == WaitKind.ON_EXTERNAL:
            kind, on = "on_external", p.condition or "an external condition"
            title = f"waits on {on}"
        else:
            kind, on = "review", f"your review of {p.artifact or p.wait_id}"
            title = f"review {p.artifact or p.wait_id}"
        existing = scan.waits[p.wait_id] = _Wait(
            kind=kind,
            # A reconciliation's wait belongs with the operation it asks about.
            subagent=actor.subagent or scan.call_subagent.get(p.condition or "", ""),
            title=title,
            on=on,
            reason=p.reason,
            opened=event.created_at,
        )
    if p.resolved and existing.resolved is None:
        existing.resolved = event.created_at
        existing.by = actor.name or ("the harness" if actor.kind == "harness" else actor.kind)
        existing.outcome = "resolved"
        if actor.kind == "user":
            existing.outcome = "answered"


def _scan_lifecycle(scan: _Scan, event: Event) -> None:
    p: Any = event.payload
    at = event.created_at
    if p.kind == LifecycleKind.HARNESS_STARTED and p.attempt is not None:
        previous = max((a for a in scan.attempts if a < p.attempt), default=None)
        if previous is not None and not scan.ended:
            before = scan.attempts[previous]
            why = scan.lost.get(previous) or (
                f"attempt {previous} stopped: {before.detail}" if before.end is not None else ""
            )
            scan.gaps.append(
                Gap(
                    attempt=previous,
                    start=before.last_seen,
                    end=at,
                    resumed_by=p.attempt,
                    why=why or f"attempt {previous} stopped proving it was alive",
                    doing=", ".join(sorted(scan.running.values())),
                )
            )
        scan.attempts[p.attempt] = _Attempt(
            number=p.attempt, start=at, last_seen=at, detail=p.detail or p.reason
        )
    elif p.kind == LifecycleKind.HARNESS_LOST and p.attempt is not None:
        reason = p.detail or p.reason
        scan.lost[p.attempt] = f"attempt {p.attempt} lost" + (f": {reason}" if reason else "")
    elif p.kind == LifecycleKind.HARNESS_FINISHED and p.attempt in scan.attempts:
        attempt = scan.attempts[p.attempt]
        attempt.end = attempt.end or at
        attempt.detail = p.detail or p.reason or "finished"
    elif p.kind in (LifecycleKind.SESSION_COMPLETED, LifecycleKind.SESSION_FAILED):
        scan.ended = True
        if p.attempt in scan.attempts:
            scan.attempts[p.attempt].end = at
        outcome = "completed" if p.kind == LifecycleKind.SESSION_COMPLETED else "failed"
        scan.session_marks.append(
            Mark(
                kind="ended",
                at=at,
                label=f"session {outcome}: {p.detail or p.reason}",
                ok=outcome == "completed",
            )
        )
    elif p.kind in (LifecycleKind.SANDBOX_STARTED, LifecycleKind.SANDBOX_REPLACED) and p.subagent:
        # A replacement shows as the restore into it that follows.
        scan.sandbox_starts[p.subagent] = scan.sandbox_starts.get(p.subagent, 0) + 1
    elif p.kind == LifecycleKind.SANDBOX_LOST and p.subagent:
        label = f"sandbox of {p.subagent} lost: {p.detail or p.reason}"
        scan.subagent_marks.setdefault(p.subagent, []).append(
            Mark(kind="sandbox", at=at, label=label, ok=False)
        )
        scan.recoveries.append(RecoveryLine(at=at, by=_who(event.actor), text=label, ok=False))
    elif p.kind == LifecycleKind.RESTORED and p.subagent and scan.sandbox_starts.get(p.subagent, 0) > 1:
        label = f"new sandbox for {p.subagent}, restored from checkpoint {p.checkpoint_id}"
        scan.subagent_marks.setdefault(p.subagent, []).append(
            Mark(kind="restored", at=at, label=f"{label}: {p.detail}")
        )
        scan.recoveries.append(RecoveryLine(at=at, by=_who(event.actor), text=label, detail=p.detail))
    elif p.kind == LifecycleKind.RECOVERY_FAILED:
        label = f"recovery failed: {p.reason}: {p.detail}"
        scan.session_marks.append(Mark(kind="recovery_failed", at=at, label=label, ok=False))
        scan.recoveries.append(RecoveryLine(at=at, by=_who(event.actor), text=label, ok=False))


def _who(actor: Actor) -> str:
    if actor.kind == "harness" and actor.attempt:
        return f"attempt {actor.attempt}"
    return actor.name or ("the harness" if actor.kind == "harness" else f"the {actor.kind}")


def _mark_operation(scan: _Scan, operation_id: str, mark: Mark) -> None:
    step = scan.call_step.get(operation_id)
    if step is not None:
        scan.steps[step].marks.append(mark)
    else:
        scan.session_marks.append(mark)


def _rows(scan: _Scan, state: SessionState, now: datetime, *, alive: bool) -> list[Row]:
    latest = max(scan.attempts, default=None)
    attempt_bars = []
    for number, attempt in sorted(scan.attempts.items()):
        end = attempt.end
        if end is None:
            # The latest attempt runs on while it is alive; any other ended with its last event.
            end = None if number == latest and alive and not scan.ended else attempt.last_seen
        attempt_bars.append(
            Bar(
                kind="attempt", label=f"attempt {number}", start=attempt.start, end=end, detail=attempt.detail
            )
        )
    rows = [Row(kind="session", label="attempts", bars=attempt_bars, marks=scan.session_marks)]

    groups: dict[str, list[str]] = {}
    for task_id, step in scan.steps.items():
        groups.setdefault(step.subagent, []).append(task_id)
    for name in list(scan.subagent_marks) + [w.subagent for w in scan.waits.values()]:
        groups.setdefault(name, [])
    for subagent, task_ids in groups.items():
        rows += _subagent_rows(scan, state, subagent, task_ids)
    return rows


def _subagent_rows(scan: _Scan, state: SessionState, subagent: str, task_ids: list[str]) -> list[Row]:
    own = scan.steps.get(subagent) if subagent in task_ids else None
    header_bars = []
    if own is not None and own.started is not None:
        header_bars.append(
            Bar(
                kind="subagent",
                label=subagent,
                start=own.started,
                end=own.ended,
                status=state.tasks[subagent].status.value,
                detail=state.tasks[subagent].title,
            )
        )
    loose_calls = [
        call
        for op, call in scan.calls.items()
        if scan.call_subagent.get(op) == subagent and op not in scan.call_step
    ]
    title = state.tasks[subagent].title if subagent in state.tasks else ""
    rows = [
        Row(
            kind="subagent",
            label=subagent or "the session",
            title=title,
            bars=header_bars + loose_calls,
            marks=scan.subagent_marks.get(subagent, []),
        )
    ]
    steps = [t for t in task_ids if t != subagent and scan.steps[t].started is not None]
    if len(steps) > CHART_STEP_LIMIT:
        active = [t for t in steps if scan.steps[t].ended is None]
        finished = [t for t in steps if scan.steps[t].ended is not None]
        keep = set(active[:CHART_STEP_LIMIT]) | set(finished[-max(0, CHART_STEP_LIMIT - len(active)) :])
        left_out = len(steps) - len(keep)
        steps = [t for t in steps if t in keep]
        rows.append(Row(kind="step", label=f"... {left_out} earlier steps (listed below)"))
    for task_id in steps:
        step = scan.steps[task_id]
        record = state.tasks[task_id]
        assert step.started is not None
        short = task_id.split("/", 1)[1] if task_id.startswith(f"{subagent}/") else task_id
        bar = Bar(
            kind="step",
            label=short,
            start=step.started,
            end=step.ended,
            status=record.status.value,
            detail=f"{task_id}: {record.title or task_id} ({record.status.value})",
        )
        rows.append(
            Row(
                kind="step",
                label=short,
                title=f"{task_id}: {record.title}" if record.title else task_id,
                bars=[bar, *step.calls],
                marks=step.marks,
            )
        )
    for wait_id, wait in scan.waits.items():
        if wait.subagent != subagent:
            continue
        kind = WAIT_BAR_KIND[wait.kind]
        rows.append(
            Row(
                kind="wait",
                label=wait.title,
                title=f"{wait_id}: {wait.reason}",
                bars=[
                    Bar(
                        kind=kind,
                        label=wait_id,
                        start=wait.opened,
                        end=wait.resolved,
                        status=f"{wait.outcome} by {wait.by}" if wait.resolved else "open",
                        detail=f"waits on {wait.on}: {wait.reason}",
                    )
                ],
            )
        )
    return rows


WAIT_BAR_KIND: dict[str, BarKind] = {
    "on_user": "wait_user",
    "approval": "approval",
    "on_external": "wait_external",
    "review": "review",
}


def _step_entries(scan: _Scan, state: SessionState) -> list[StepEntry]:
    entries = []
    for task_id, step in scan.steps.items():
        record = state.tasks.get(task_id)
        if record is None:
            continue
        calls = step.calls
        interrupted = step.started is not None and any(
            gap.start >= step.started and (step.ended is None or gap.start <= step.ended) for gap in scan.gaps
        )
        entries.append(
            StepEntry(
                step_id=task_id,
                subagent=step.subagent,
                title=record.title,
                status=record.status.value,
                started=step.started,
                ended=step.ended,
                calls=len(calls),
                failed_calls=sum(c.status == "failed" for c in calls),
                interrupted=interrupted,
            )
        )
    return entries


def _deliverables(
    state: SessionState, locate: Callable[[ArtifactRef], str | None] | None
) -> list[DeliverableEntry]:
    reviews = {w.artifact for w in state.open_wait_records() if w.kind == WaitKind.READY_FOR_REVIEW}
    entries = []
    for name in sorted(state.deliverables, key=lambda n: (state.deliverables[n], n)):
        record = state.artifacts[name]
        location = locate(record.ref) if locate is not None else record.ref.uri
        entries.append(
            DeliverableEntry(
                name=name,
                subagent=record.subagent or "",
                size=record.ref.size,
                sha256=record.ref.sha256,
                command=commands.download(state.session_id, name),
                location=location or "",
                ready_for_review=name in reviews,
            )
        )
    return entries


# --------------------------------------------------------------------------------------------------
# Escaping: the only ways record text reaches the page

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LINK_SCHEMES = ("file", "http", "https")


def _text(value: object) -> str:
    """Record text as HTML text or an attribute value: escaped, control characters made visible."""
    shown = _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", str(value))
    return html.escape(shown, quote=True)


def _href(url: str) -> str | None:
    """A link target only for a file, http or https URL; anything else (javascript:, data:) is
    never a link."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    if scheme not in LINK_SCHEMES or _CONTROL.search(url) or any(c.isspace() for c in url):
        return None
    return _text(url)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# --------------------------------------------------------------------------------------------------
# Words for times


def duration(seconds: float) -> str:
    """A length of time for a person: 0.04 s, 4.2 s, 42 s, 3 min 4 s, 2 h 14 min, 3 d 4 h."""
    seconds = max(0.0, seconds)
    # Each form is chosen by the value it prints, so 0.999 s is "1.0 s", never "1.00 s".
    if round(seconds, 2) < 1:
        return f"{seconds:.2f} s"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    if round(seconds) < 60:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def _span(start: datetime, end: datetime | None, now: datetime) -> float:
    return ((end or now) - start).total_seconds()


def _covered(spans: Iterable[tuple[datetime, datetime | None]], now: datetime) -> float:
    """Seconds during which at least one of the spans was open: waits that overlap count once."""
    total, reach = 0.0, None
    for start, end in sorted((start, end or now) for start, end in spans):
        if reach is None or start > reach:
            total += (end - start).total_seconds()
            reach = end
        elif end > reach:
            total += (end - reach).total_seconds()
            reach = end
    return total


def _clock(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"


# --------------------------------------------------------------------------------------------------
# The axis


class Axis:
    """Time to x: linear between consecutive moments, except that no stretch is wider than a cap
    (`MAX_GAP_SHARE` of everything drawn); a capped stretch is a break labelled with its length."""

    def __init__(self, moments: Iterable[datetime], x0: float, width: float) -> None:
        times = sorted({m.timestamp() for m in moments})
        if not times:
            times = [0.0]
        if len(times) == 1:
            times.append(times[0] + 1.0)
        self.times = times
        gaps = [b - a for a, b in itertools.pairwise(times)]
        cap = sum(gaps)
        for _ in range(60):  # the cap is a fixed point: a share of the width drawn with it
            new_cap = MAX_GAP_SHARE * sum(min(g, cap) for g in gaps)
            if abs(new_cap - cap) <= 1e-9 * max(cap, 1.0):
                break
            cap = new_cap
        drawn = [min(g, cap) if cap > 0 else g for g in gaps]
        total = sum(drawn) or 1.0
        self.xs = [x0]
        for d in drawn:
            self.xs.append(self.xs[-1] + width * d / total)
        self.breaks = [
            (times[i], times[i + 1], self.xs[i], self.xs[i + 1])
            for i, g in enumerate(gaps)
            if cap > 0 and g > cap * 1.000001
        ]
        self.start = datetime.fromtimestamp(times[0], UTC)
        self.end = datetime.fromtimestamp(times[-1], UTC)

    def x(self, moment: datetime) -> float:
        t = moment.timestamp()
        times, xs = self.times, self.xs
        if t <= times[0]:
            return xs[0]
        if t >= times[-1]:
            return xs[-1]
        low, high = 0, len(times) - 1
        while high - low > 1:
            mid = (low + high) // 2
            if times[mid] <= t:
                low = mid
            else:
                high = mid
        span = times[high] - times[low]
        return xs[low] + (xs[high] - xs[low]) * ((t - times[low]) / span if span else 0.0)

    def time_at(self, x: float) -> datetime:
        xs, times = self.xs, self.times
        for i in range(len(xs) - 1):
            if xs[i] <= x <= xs[i + 1]:
                share = (x - xs[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
                return datetime.fromtimestamp(times[i] + share * (times[i + 1] - times[i]), UTC)
        return self.end


def _moments(report: SessionReport) -> list[datetime]:
    found: list[datetime] = []
    for row in report.rows:
        for bar in row.bars:
            found += [bar.start, bar.end or report.now]
        found += [m.at for m in row.marks]
    for gap in report.gaps:
        found += [gap.start, gap.end or report.now]
    found += [line.at for line in report.scope_changes]
    if any(bar.end is None for row in report.rows for bar in row.bars) or any(
        g.end is None for g in report.gaps
    ):
        found.append(report.now)
    return found


# --------------------------------------------------------------------------------------------------
# Drawing

VIEW_W = 1000
LABEL_W = 200
PLOT_X0 = 210
PLOT_W = 770
AXIS_H = 40
ROW_H = 20
GROUP_GAP = 8
CALL_BUCKET_PX = 2  # tool calls starting this close are drawn as one tick
CALLS_NAMED = 8  # calls a merged tick names on hover
MARK_SPACING = 10  # the least distance between two marks in a row

STEP_FILL = {
    "verified": "#2e7d32",
    "done": "#81c784",
    "running": "#1e88e5",
    "failed": "#c62828",
    "blocked": "#f9a825",
    "cancelled": "#9e9e9e",
    "planned": "#cfd8dc",
}
WAIT_FILL = {
    "wait_user": "#ef6c00",
    "approval": "#ef6c00",
    "wait_external": "#8e24aa",
    "review": "#00897b",
}
CALL_FILL = {"ok": "#546e7a", "failed": "#c62828", "open": "#ff8f00", "unknown": "#ff8f00"}
PHASE_CLASS = {
    "Succeeded": "good",
    "Running": "info",
    "ReadyForReview": "good",
    "WaitingOnUser": "user",
    "WaitingOnExternal": "ext",
    "Interrupted": "bad",
    "Recovering": "bad",
    "RecoveryFailed": "bad",
    "Failed": "bad",
    "Pending": "info",
}


def _chart(report: SessionReport, axis: Axis) -> str:
    """The timeline of one session as inline SVG."""
    body: list[str] = []
    y = AXIS_H
    previous_kind: str | None = None
    for row in report.rows:
        if row.kind in ("session", "subagent") and previous_kind is not None:
            y += GROUP_GAP
        body.append(_row(row, y, axis, report.now))
        y += ROW_H
        previous_kind = row.kind
    height = y + 6
    over: list[str] = []
    for gap in report.gaps:
        x0 = axis.x(gap.start)
        x1 = max(axis.x(gap.end or report.now), x0 + 4)
        length = duration(_span(gap.start, gap.end, report.now))
        state = f"resumed by attempt {gap.resumed_by}" if gap.resumed_by else "not resumed yet"
        tip = f"interrupted {length}: {gap.why}; {state}" + (
            f"; it was doing: {gap.doing}" if gap.doing else ""
        )
        over.append(
            f'<g class="gap"><title>{_text(tip)}</title>'
            f'<rect x="{x0:.1f}" y="{AXIS_H - 10}" width="{x1 - x0:.1f}" height="{height - AXIS_H + 10}" '
            f'fill="url(#hatch)" fill-opacity="0.6" stroke="#c62828" stroke-width="1"/>'
            + _gap_label(x0, x1, f"\u26a1 interrupted {length}")
            + "</g>"
        )
    for line in report.scope_changes:
        x = axis.x(line.at)
        over.append(
            f'<g class="scope"><title>scope change v{line.request_version}: {_text(line.summary)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_H - 10}" y2="{height}" stroke="#1565c0" '
            f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{height - 2}" class="scopelabel">'
            f"scope v{line.request_version}</text></g>"
        )
    return (
        f'<svg class="chart" viewBox="0 0 {VIEW_W} {height}" width="100%" role="img" '
        f'aria-label="timeline of {_text(report.session_id)}" xmlns="http://www.w3.org/2000/svg">'
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffebee"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#ef9a9a" stroke-width="3"/></pattern></defs>'
        + _axis_svg(axis, height)
        + "".join(body)
        + "".join(over)
        + "</svg>"
    )


def _gap_label(x0: float, x1: float, words: str) -> str:
    """Right of the band, or left of it where the right would run off the chart."""
    if x1 + 3 + 6.5 * len(words) <= VIEW_W:
        return f'<text x="{x1 + 3:.1f}" y="{AXIS_H - 2}" class="gaplabel">{_text(words)}</text>'
    return f'<text x="{x0 - 3:.1f}" y="{AXIS_H - 2}" class="gaplabel" text-anchor="end">{_text(words)}</text>'


def _axis_svg(axis: Axis, height: int) -> str:
    parts = []
    same_day = axis.start.date() == axis.end.date()
    fmt = "%H:%M:%S" if same_day else "%m-%d %H:%M"
    # A session of a few seconds needs tenths, or neighbouring ticks read the same.
    tenths = same_day and (axis.end - axis.start).total_seconds() < 60
    placed: list[float] = []
    labels: set[str] = set()
    candidates = [PLOT_X0 + PLOT_W * i / 6 for i in range(7)]
    for _, _, bx0, bx1 in axis.breaks:
        candidates += [bx0, bx1]
    for x in sorted(candidates):
        if any(abs(x - other) < 70 for other in placed):
            continue
        moment = axis.time_at(x)
        label = moment.strftime(fmt) + (f".{moment.microsecond // 100_000}" if tenths else "")
        if label in labels:
            continue
        placed.append(x)
        labels.add(label)
        anchor = "end" if x > PLOT_X0 + PLOT_W - 30 else "middle"
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{height}" class="tick"/>'
            f'<text x="{x:.1f}" y="12" class="ticklabel" text-anchor="{anchor}">{label}</text>'
        )
    for start, end, bx0, bx1 in axis.breaks:
        middle = (bx0 + bx1) / 2
        parts.append(
            f'<g class="break"><title>the axis is shortened here: {duration(end - start)} pass between '
            f"these two moments</title>"
            f'<rect x="{bx0:.1f}" y="16" width="{bx1 - bx0:.1f}" height="{height - 16}" fill="#eceff1" '
            'opacity="0.6"/>'
            f'<text x="{middle:.1f}" y="26" class="breaklabel">\u2248 {duration(end - start)}</text></g>'
        )
    return "".join(parts)


def _row(row: Row, y: int, axis: Axis, now: datetime) -> str:
    parts = [f'<g class="row row-{row.kind}">']
    if row.kind in ("session", "subagent"):
        parts.append(f'<rect x="0" y="{y}" width="{VIEW_W}" height="{ROW_H}" class="groupbg"/>')
    label = _short(row.label, 32)
    tip = f"<title>{_text(row.title or row.label)}</title>"
    parts.append(
        f'<text x="{8 if row.kind in ("session", "subagent") else 20}" y="{y + 14}" '
        f'class="label label-{row.kind}">{tip}{_text(label)}</text>'
    )
    calls: dict[int, list[Bar]] = {}
    for bar in row.bars:
        if bar.kind == "call":
            calls.setdefault(int(axis.x(bar.start) // CALL_BUCKET_PX), []).append(bar)
        else:
            parts.append(_bar(bar, y, axis, now))
    parts += [_calls(bucket, y, axis, now) for bucket in calls.values()]
    placed: list[float] = []
    for mark in sorted(row.marks, key=lambda m: m.at):
        # Marks a few pixels apart would print over each other: each moves right of the one before.
        x = axis.x(mark.at)
        if placed and x < placed[-1] + MARK_SPACING:
            x = placed[-1] + MARK_SPACING
        placed.append(x)
        parts.append(_mark(mark, y, x))
    parts.append("</g>")
    return "".join(parts)


def _calls(bucket: list[Bar], y: int, axis: Axis, now: datetime) -> str:
    """Tool calls that start within one bucket of pixels, as one tick: a long session's thousands
    of calls stay a few hundred elements."""
    if len(bucket) == 1:
        return _bar(bucket[0], y, axis, now)
    statuses = {bar.status for bar in bucket}
    status = next((s for s in ("failed", "unknown", "open") if s in statuses), "ok")
    x0 = min(axis.x(bar.start) for bar in bucket)
    x1 = max(axis.x(bar.end or now) for bar in bucket)
    shown = "; ".join(bar.detail for bar in bucket[:CALLS_NAMED])
    more = f"; and {len(bucket) - CALLS_NAMED} more" if len(bucket) > CALLS_NAMED else ""
    tip = f"<title>{len(bucket)} tool calls: {_text(shown)}{more}</title>"
    return (
        f'<rect x="{x0:.1f}" y="{y + 14}" width="{max(x1 - x0, 1.5):.1f}" height="5" '
        f'fill="{CALL_FILL[status]}">{tip}</rect>'
    )


def _bar(bar: Bar, y: int, axis: Axis, now: datetime) -> str:
    x0 = axis.x(bar.start)
    x1 = axis.x(bar.end or now)
    length = duration(_span(bar.start, bar.end, now))
    still = " so far, still open" if bar.end is None else ""
    tip = f"<title>{_text(f'{bar.detail or bar.label}: {length}{still}')}</title>"
    if bar.kind == "call":
        fill = CALL_FILL.get(bar.status, "#546e7a")
        width = max(x1 - x0, 1.5)
        return f'<rect x="{x0:.1f}" y="{y + 14}" width="{width:.1f}" height="5" fill="{fill}">{tip}</rect>'
    if bar.kind in ("attempt", "subagent"):
        width = max(x1 - x0, 2)
        fill = "#455a64" if bar.kind == "attempt" else "#90a4ae"
        text = (
            f'<text x="{x0 + 4:.1f}" y="{y + 13}" class="inbar">{_text(bar.label)}</text>'
            if bar.kind == "attempt" and width > 60
            else ""
        )
        return (
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{width:.1f}" height="12" rx="2" fill="{fill}">'
            f"{tip}</rect>" + text
        )
    if bar.kind == "step":
        width = max(x1 - x0, 2)
        fill = STEP_FILL.get(bar.status, "#90a4ae")
        open_edge = (
            f'<rect x="{x1 - 2:.1f}" y="{y + 2}" width="2" height="12" fill="#0d47a1"/>'
            if bar.end is None
            else ""
        )
        return (
            f'<rect x="{x0:.1f}" y="{y + 3}" width="{width:.1f}" height="10" rx="2" fill="{fill}">'
            f"{tip}</rect>" + open_edge
        )
    fill = WAIT_FILL.get(bar.kind, "#ef6c00")
    width = max(x1 - x0, 3)
    by = f", {bar.status}" if bar.status not in ("", "open") else ""
    words = f"{length}{by}" if bar.end is not None else f"{length}, still waiting"
    if x0 + width + 6 + 6.2 * len(words) <= VIEW_W:
        text = f'<text x="{x0 + width + 4:.1f}" y="{y + 13}" class="waitlabel">{_text(words)}</text>'
    else:
        text = (
            f'<text x="{x0 - 4:.1f}" y="{y + 13}" class="waitlabel" text-anchor="end">{_text(words)}</text>'
        )
    pattern = ' stroke-dasharray="3 2" fill-opacity="0.55"' if bar.end is None else ""
    return (
        f'<rect x="{x0:.1f}" y="{y + 4}" width="{width:.1f}" height="11" rx="2" fill="{fill}" '
        f'stroke="{fill}"{pattern}>{tip}</rect>' + text
    )


# The marks drawn as one character: the character and its colour.
TEXT_GLYPHS: dict[str, tuple[str, str]] = {
    "deliverable": ("\u2605", "#f9a825"),
    "restored": ("\u21ba", "#1565c0"),
    "sandbox": ("\u21ba", "#c62828"),
    "unknown": ("?", "#ef6c00"),
    "reconciled": ("\u2713", "#2e7d32"),
    "rejected": ("\u2718", "#c62828"),
    "recovery_failed": ("\u2716", "#c62828"),
}


def _mark(mark: Mark, y: int, x: float) -> str:
    tip = f"<title>{_text(mark.label)}</title>"
    cy = y + 8
    if mark.kind == "checkpoint":
        fill = "#1b5e20" if mark.ok else "#ffffff"
        return (
            f'<path d="M{x:.1f} {cy - 5} L{x + 5:.1f} {cy} L{x:.1f} {cy + 5} L{x - 5:.1f} {cy} Z" '
            f'fill="{fill}" stroke="#1b5e20" stroke-width="1.2">{tip}</path>'
        )
    if mark.kind in TEXT_GLYPHS:
        char, color = TEXT_GLYPHS[mark.kind]
        return f'<text x="{x:.1f}" y="{cy + 5}" class="glyph" fill="{color}">{char}{tip}</text>'
    color = "#2e7d32" if mark.ok else "#c62828"
    return f'<circle cx="{x:.1f}" cy="{cy}" r="3.5" fill="{color}" stroke="#fff">{tip}</circle>'


# --------------------------------------------------------------------------------------------------
# The page


_ON_YOU = ("on_user", "approval")


def _glance(report: SessionReport) -> list[tuple[str, str]]:
    """(class, text) lines a person reads first: interruptions, waits on them and on others, what
    is done."""
    now = report.now
    lines: list[tuple[str, str]] = []
    for gap in report.gaps:
        length = duration(_span(gap.start, gap.end, now))
        doing = f" It was doing: {gap.doing}." if gap.doing else ""
        if gap.resumed_by:
            after = f"; attempt {gap.resumed_by} resumed it at {_clock(gap.end)}."
        else:
            after = "; not resumed yet." + (f" Next: {gap.next}." if gap.next else "")
        lines.append(
            (
                "bad",
                f"Interrupted {length}: {gap.why}.{doing} Attempt {gap.attempt}'s last recorded event was at "
                f"{_clock(gap.start)}{after}",
            )
        )
    if report.harness_lost_untimed:
        lines.append(
            ("bad", f"Harness attempts lost: {report.harness_lost_untimed} (times not in the status).")
        )
    for who, group in itertools.groupby(report.recoveries, key=lambda line: line.by):
        recovered = list(group)
        css = "recovery" if all(line.ok for line in recovered) else "bad"
        lines.append(
            (
                css,
                f"Recovery by {who}, from {_clock(recovered[0].at)}: "
                + "; ".join(r.text for r in recovered)
                + ".",
            )
        )
    for rejection in report.rejections:
        lines.append(
            (
                "bad",
                f"Rejected {rejection.name} at {_clock(rejection.at)} by {rejection.by}: {rejection.reason}.",
            )
        )
    for line in report.scope_changes:
        lines.append(
            (
                "scope",
                f"Scope changed at {_clock(line.at)} by {line.by} (request v{line.request_version}): "
                f"{line.summary}",
            )
        )
    for kinds, css, whom in (
        (_ON_YOU, "user", "you"),
        (("on_external",), "ext", "external conditions"),
        (("review",), "review", "your review"),
    ):
        waits = [w for w in report.waits if w.kind in kinds]
        if not waits:
            continue
        total = _covered([(w.opened, w.resolved) for w in waits if w.opened is not None], now)
        items = []
        for w in waits:
            if w.opened is None:
                items.append(f"{w.wait_id} (open)")
                continue
            length = duration(_span(w.opened, w.resolved, now))
            state = f"{w.outcome} by {w.by}" if w.resolved else "still open"
            items.append(f"{w.wait_id} {length}, {state}")
        open_count = sum(w.resolved is None for w in waits)
        still = f", {open_count} still open" if open_count else ""
        lines.append(
            (css, f"Waited on {whom} {duration(total)} in {len(waits)} wait(s){still}: " + "; ".join(items))
        )
    steps = [s for s in report.steps if s.step_id != s.subagent]
    done = sum(s.status in ("done", "verified") for s in steps)
    verified = sum(s.status == "verified" for s in steps)
    running = [s.step_id for s in steps if s.status == "running"]
    text = f"Done: {done} of {len(steps)} steps ({verified} verified)"
    complete = done == len(steps) and bool(steps)
    if report.progress:
        text, complete = f"Done: {report.progress}", report.phase == "Succeeded"
    if running:
        text += "; running: " + ", ".join(running)
    if report.deliverables:
        names = ", ".join(
            d.name + (" (ready for review)" if d.ready_for_review else "") for d in report.deliverables
        )
        text += f"; deliverables: {names}"
    lines.append(("good" if complete else "info", text + "."))
    return lines


CSS = """
body{font-family:"DejaVu Sans",Verdana,sans-serif;font-size:13px;color:#212121;margin:16px 20px;
background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:14px 0 6px}h3{font-size:13px;margin:10px 0 2px}
.phase{display:inline-block;padding:1px 8px;border-radius:10px;font-size:13px;color:#fff;
vertical-align:middle;background:#607d8b}
.phase.good{background:#2e7d32}.phase.bad{background:#c62828}.phase.user{background:#ef6c00}
.phase.ext{background:#8e24aa}.phase.info{background:#1e88e5}
.goal{margin:2px 0 8px;color:#424242;max-width:1100px}
ul.glance{list-style:none;padding:0;margin:6px 0}
ul.glance li{margin:3px 0;padding:4px 8px;border-left:5px solid #90a4ae;background:#fff}
ul.glance li.bad{border-color:#c62828;background:#ffebee}
ul.glance li.user{border-color:#ef6c00;background:#fff3e0}
ul.glance li.ext{border-color:#8e24aa;background:#f3e5f5}
ul.glance li.good{border-color:#2e7d32;background:#e8f5e9}
ul.glance li.review{border-color:#00897b;background:#e0f2f1}
ul.glance li.recovery{border-color:#1565c0;background:#e3f2fd}
ul.glance li.scope{border-color:#1565c0;background:#fff}
.layout{display:grid;grid-template-columns:minmax(0,7fr) minmax(260px,3fr);gap:16px;align-items:start}
.panel{background:#fff;border:1px solid #e0e0e0;border-radius:4px;padding:8px 10px}
.legend{font-size:11px;color:#424242;margin:0 0 4px}
.legend span{display:inline-block;margin-right:10px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:9px;border-radius:2px;margin-right:3px;vertical-align:middle}
svg.chart{display:block}
svg .label{font-size:11px;fill:#212121}svg .label-session,svg .label-subagent{font-weight:bold}
svg .groupbg{fill:#eceff1}svg .tick{stroke:#e0e0e0}
svg .ticklabel{font-size:10px;fill:#616161}
svg .breaklabel{font-size:10px;fill:#455a64;text-anchor:middle}
svg .gaplabel{font-size:11px;font-weight:bold;fill:#c62828}svg .scopelabel{font-size:10px;fill:#1565c0}
svg .waitlabel{font-size:10px;fill:#424242}svg .inbar{font-size:10px;fill:#fff}
svg .glyph{font-size:13px;font-weight:bold;text-anchor:middle;paint-order:stroke;stroke:#fff;stroke-width:3px}
aside .brief{font-size:11.5px;line-height:1.35;overflow-wrap:anywhere}
aside .brief .l0{font-weight:bold;margin-top:7px}aside .brief .l1{padding-left:10px}
aside .brief .l2{padding-left:22px;color:#424242}
table{border-collapse:collapse;background:#fff;font-size:12px;margin-bottom:6px}
th,td{border:1px solid #e0e0e0;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eceff1}td.num{text-align:right;white-space:nowrap}td.when{white-space:nowrap}code{font-size:11.5px;overflow-wrap:anywhere}
.flag{color:#c62828;font-weight:bold}.muted{color:#757575}
section.session{margin-bottom:28px}footer{color:#757575;font-size:11px;margin-top:16px}
"""

# Each colour, and the bars (kind, status; None: any status) it is shown for in the legend.
LEGEND: tuple[tuple[str, str, tuple[tuple[BarKind, str | None], ...]], ...] = (
    ("#2e7d32", "step verified", (("step", "verified"),)),
    ("#81c784", "step done", (("step", "done"),)),
    ("#1e88e5", "step running", (("step", "running"),)),
    ("#f9a825", "step blocked", (("step", "blocked"),)),
    ("#9e9e9e", "step cancelled", (("step", "cancelled"),)),
    ("#c62828", "failed", (("step", "failed"), ("call", "failed"))),
    ("#546e7a", "tool call", (("call", None),)),
    ("#ff8f00", "tool call without a result", (("call", "open"), ("call", "unknown"))),
    ("#ef6c00", "waits on you / approval", (("wait_user", None), ("approval", None))),
    ("#8e24aa", "waits on external", (("wait_external", None),)),
    ("#00897b", "ready for review", (("review", None),)),
    ("#455a64", "harness attempt", (("attempt", None),)),
    ("#90a4ae", "subagent at work", (("subagent", None),)),
)


# What each glyph on the chart means, shown in the legend only where the chart has one.
GLYPHS: tuple[tuple[MarkKind, bool | None, str], ...] = (
    ("checkpoint", True, '<b style="color:#1b5e20">\u25c6</b> verified checkpoint'),
    ("checkpoint", False, '<b style="color:#1b5e20">\u25c7</b> checkpoint, not verified'),
    ("deliverable", None, '<b style="color:#f9a825">\u2605</b> deliverable published'),
    ("sandbox", None, '<b style="color:#c62828">\u21ba</b> sandbox lost'),
    ("restored", None, '<b style="color:#1565c0">\u21ba</b> new sandbox restored from a checkpoint'),
    ("unknown", None, '<b style="color:#ef6c00">?</b> outcome unknown after an interruption'),
    ("reconciled", None, '<b style="color:#2e7d32">\u2713</b> outcome reconciled'),
    ("recovery_failed", None, '<b style="color:#c62828">\u2716</b> recovery failed'),
    ("rejected", None, '<b style="color:#c62828">\u2718</b> deliverable rejected'),
    ("asked", None, '<b style="color:#2e7d32">\u25cf</b> asked'),
    ("ended", None, '<b style="color:#2e7d32">\u25cf</b> session ended'),
)


def _legend(report: SessionReport) -> str:
    bars = {(bar.kind, bar.status) for row in report.rows for bar in row.bars}
    shown = [
        f'<span><i class="sw" style="background:{color}"></i>{label}</span>'
        for color, label, kinds in LEGEND
        if any(kind == k and status in (None, s) for kind, status in kinds for k, s in bars)
    ]
    marks = {(m.kind, m.ok) for row in report.rows for m in row.marks}
    for kind, ok, label in GLYPHS:
        if any(k == kind and (ok is None or o == ok) for k, o in marks):
            shown.append(f"<span>{label}</span>")
    if report.scope_changes:
        shown.append('<span><b style="color:#1565c0">\u2506</b> scope change</span>')
    if report.gaps:
        shown.append('<span class="flag">\u26a1 interrupted: no attempt alive (hatched)</span>')
    return "".join(shown)


def render_html(reports: Sequence[SessionReport], *, title: str | None = None) -> str:
    """One self-contained page: every report on one shared time axis, each with its briefing,
    its interruptions, waits, steps and deliverables."""
    if not reports:
        raise ValueError("a report needs at least one session")
    moments = [m for r in reports for m in _moments(r)]
    axis = Axis(moments, PLOT_X0, PLOT_W)
    heading = title or (
        f"Session {reports[0].session_id}" if len(reports) == 1 else f"{len(reports)} sessions"
    )
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        # Nothing is fetched and nothing runs, whatever the record holds.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(heading)}: timeline</title><style>{CSS}</style></head><body>",
    ]
    if len(reports) > 1:
        parts.append(f"<h1>{_text(heading)}</h1>")
        parts.append(_overview(reports))
    for report in reports:
        parts.append(_session_section(report, axis, single=len(reports) == 1))
    now = max(r.now for r in reports)
    parts.append(
        f"<footer>Made at {_clock(now)} from "
        + "; ".join(f"{_text(r.session_id)}: {_text(r.source)}" for r in reports)
        + ". This file needs no network: it has no script, font or image to fetch.</footer></body></html>\n"
    )
    return "".join(parts)


def _overview(reports: Sequence[SessionReport]) -> str:
    rows = []
    for r in reports:
        user = _covered([(w.opened, w.resolved) for w in r.waits if w.kind in _ON_YOU and w.opened], r.now)
        ext = _covered(
            [(w.opened, w.resolved) for w in r.waits if w.kind == "on_external" and w.opened], r.now
        )
        lost = _covered([(g.start, g.end) for g in r.gaps], r.now)
        steps = [s for s in r.steps if s.step_id != s.subagent]
        done = sum(s.status in ("done", "verified") for s in steps)
        names = ", ".join(d.name for d in r.deliverables) or "-"
        rows.append(
            f'<tr><td><a href="#session-{_text(r.session_id)}">{_text(r.session_id)}</a></td>'
            f"<td>{_phase_badge(r.phase)}</td><td>{len(r.gaps)} ({duration(lost)})</td>"
            f"<td>{duration(user)}</td><td>{duration(ext)}</td>"
            f"<td>{done} of {len(steps)}</td><td>{_text(names)}</td></tr>"
        )
    return (
        "<table><tr><th>session</th><th>phase</th><th>interruptions</th><th>waited on you</th>"
        "<th>waited on external</th><th>steps done</th><th>deliverables</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _phase_badge(phase: str) -> str:
    return f'<span class="phase {PHASE_CLASS.get(phase, "")}">{_text(phase)}</span>'


def _session_section(report: SessionReport, axis: Axis, *, single: bool) -> str:
    tag = "h1" if single else "h2"
    parts = [
        f'<section class="session" id="session-{_text(report.session_id)}">',
        f"<{tag}>Session {_text(report.session_id)} {_phase_badge(report.phase)}</{tag}>",
        f'<p class="goal">{_text(report.goal or "(no request recorded)")}</p>',
        '<ul class="glance">',
    ]
    parts += [f'<li class="{css_class}">{_text(text)}</li>' for css_class, text in _glance(report)]
    parts.append("</ul>")
    legend = _legend(report)
    parts.append('<div class="layout"><div class="panel timeline"><h2>Timeline</h2>')
    parts.append(f'<p class="legend">{legend}</p>')
    parts.append(_chart(report, axis))
    parts.append("</div>")
    parts.append('<aside class="panel"><h2>Briefing</h2><div class="brief">')
    for level, text in report.briefing:
        parts.append(f'<div class="l{min(level, 2)}">{_text(text)}</div>')
    if not report.briefing:
        parts.append('<div class="muted">no briefing</div>')
    parts.append("</div></aside></div>")
    parts.append(_tables(report))
    parts.append("</section>")
    return "".join(parts)


Cell = str | tuple[str, str]  # HTML, or (HTML, the cell's class)


def _table(title: str, heads: Sequence[str], rows: Sequence[Sequence[Cell]], empty: str | None) -> str:
    """A titled table of rows of cells that are already HTML; with no rows, `empty` in words (None:
    the table is left out)."""
    if not rows:
        return "" if empty is None else f'<h2>{title}</h2><p class="muted">{empty}</p>'
    head = "".join(f"<th>{h}</th>" for h in heads)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c}</td>" if isinstance(c, str) else f'<td class="{c[1]}">{c[0]}</td>' for c in row)
        + "</tr>"
        for row in rows
    )
    return f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>"


def _tables(report: SessionReport) -> str:
    now = report.now
    interruptions: list[list[Cell]] = [
        [
            str(gap.attempt),
            (_clock(gap.start), "when"),
            _text(f"{_clock(gap.end)} by attempt {gap.resumed_by}" if gap.resumed_by else "not yet"),
            (duration(_span(gap.start, gap.end, now)), "num"),
            _text(gap.why),
            _text(gap.doing or "-"),
        ]
        for gap in report.gaps
    ]
    recoveries: list[list[Cell]] = [
        [
            (_clock(line.at), "when"),
            _text(line.by),
            (
                _text(line.text)
                + (f'<br><span class="muted">{_text(line.detail)}</span>' if line.detail else ""),
                "" if line.ok else "flag",
            ),
        ]
        for line in report.recoveries
    ]
    scope: list[list[Cell]] = [
        [(_clock(c.at), "when"), f"v{c.request_version}", _text(c.by), _text(c.summary)]
        for c in report.scope_changes
    ]
    rejections: list[list[Cell]] = [
        [(_clock(r.at), "when"), _text(r.name), _text(r.by), _text(r.reason)] for r in report.rejections
    ]
    waits: list[list[Cell]] = [
        [
            _text(w.wait_id),
            _text(w.subagent or "-"),
            _text(w.on),
            (_clock(w.opened), "when"),
            ("-" if w.opened is None else duration(_span(w.opened, w.resolved, now)), "num"),
            _text(f"{w.outcome} by {w.by} at {_clock(w.resolved)}" if w.resolved else "still open"),
            _text(w.reason),
        ]
        for w in report.waits
    ]
    steps: list[list[Cell]] = [
        [
            _text(s.step_id),
            _text(s.subagent or "-"),
            _text(s.title),
            _text(s.status),
            (_clock(s.started), "when"),
            ("-" if s.started is None else duration(_span(s.started, s.ended, now)), "num"),
            (f"{s.calls}" + (f" ({s.failed_calls} failed)" if s.failed_calls else ""), "num"),
            '<span class="flag">\u26a1 interrupted</span>' if s.interrupted else "",
        ]
        for s in report.steps
        if s.step_id != s.subagent  # a subagent's own task is its row in the chart
    ]
    deliverables: list[list[Cell]] = []
    for d in report.deliverables:
        link = _href(d.location) if d.location else None
        where = f'<br><a href="{link}">{_text(d.location)}</a>' if link else ""
        where = where or (f"<br>{_text(d.location)}" if d.location else "")
        deliverables.append(
            [
                _text(d.name) + (" (ready for review)" if d.ready_for_review else ""),
                _text(d.subagent or "-"),
                ("-" if d.size is None else f"{d.size} bytes", "num"),
                f"<code>{_text(d.sha256)}</code>",
                f"<code>{_text(d.command)}</code>{where}",
            ]
        )
    return "".join(
        [
            _table(
                "Interruptions",
                ["attempt", "last recorded event", "resumed", "for", "why", "running then"],
                interruptions,
                "none",
            ),
            _table("Recoveries", ["at", "by", "what"], recoveries, "none"),
            _table("Scope changes", ["at", "request", "by", "what changed"], scope, None),
            _table("Rejections", ["at", "deliverable", "by", "reason"], rejections, None),
            _table(
                "Waits and approvals",
                ["wait", "subagent", "on", "opened", "for", "ended", "reason"],
                waits,
                "none",
            ),
            _table(
                "Steps",
                ["step", "subagent", "title", "status", "started", "took", "tool calls", ""],
                steps,
                "no step recorded",
            ),
            _table("Deliverables", ["name", "subagent", "size", "sha256", "fetch"], deliverables, "none yet"),
        ]
    )
