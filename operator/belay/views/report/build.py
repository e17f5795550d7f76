"""The timeline report built from the record: one pass over the events, each kind of event
handled by its own function (`belay.journal.dispatch`), then the rows, steps, waits and
deliverables of the `SessionReport`.

Pure: the caller reads the record, the liveness and the artifact store, and passes them in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from belay.journal import commands
from belay.journal.dispatch import handler_table
from belay.journal.events import (
    Actor,
    ApprovalEvent,
    ApprovalRequestEvent,
    ArtifactEvent,
    ArtifactRef,
    CheckpointEvent,
    Event,
    ExecutorChangeEvent,
    LifecycleEvent,
    LifecycleKind,
    OperationOutcomeEvent,
    RejectionEvent,
    ScopeChangeEvent,
    TaskEvent,
    TaskStatus,
    ToolRequestEvent,
    ToolResultEvent,
    UserInputEvent,
    WaitEvent,
    WaitKind,
)
from belay.journal.handover import change_phrase
from belay.journal.phase import Liveness, interruption_of, phase_of
from belay.journal.state import SessionState, fold
from belay.views.briefing.classify import ready_for_review
from belay.views.report.model import (
    WAIT_BAR_KIND,
    Bar,
    DeliverableEntry,
    Gap,
    Mark,
    RecoveryLine,
    RejectionLine,
    Row,
    ScopeLine,
    SessionReport,
    StepEntry,
    WaitEntry,
    WaitEntryKind,
)

# Rows per subagent in the chart; the earliest finished steps beyond it are only in the tables.
CHART_STEP_LIMIT = 40
FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.FAILED, TaskStatus.CANCELLED)


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

    state: SessionState  # the fold of the whole record, for what an event alone does not say
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
    scan = _Scan(state=state)
    for event in events:
        _scan_event(scan, event)
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


def _on_user_input(scan: _Scan, event: UserInputEvent) -> None:
    label = f"asked (request v{event.payload.request_version})"
    scan.session_marks.append(Mark(kind="asked", at=event.created_at, label=label))


def _on_scope_change(scan: _Scan, event: ScopeChangeEvent) -> None:
    p = event.payload
    by = p.by or event.actor.name or event.actor.kind
    scan.scope_changes.append(
        ScopeLine(at=event.created_at, request_version=p.request_version, summary=p.summary, by=by)
    )


def _on_rejection(scan: _Scan, event: RejectionEvent) -> None:
    p, at = event.payload, event.created_at
    by = p.by or event.actor.name or event.actor.kind
    scan.rejections.append(RejectionLine(at=at, name=p.name, by=by, reason=p.reason))
    mark = Mark(kind="rejected", at=at, label=f"{p.name} rejected by {by}: {p.reason}", ok=False)
    subagent, step = scan.published_by.get(p.name, ("", ""))
    if step:
        scan.steps[step].marks.append(mark)
    else:
        scan.subagent_marks.setdefault(subagent, []).append(mark)


def _on_task(scan: _Scan, event: TaskEvent) -> None:
    task_id, status, at = event.payload.task_id, event.payload.status, event.created_at
    record = scan.state.tasks.get(task_id)
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


def _on_tool_request(scan: _Scan, event: ToolRequestEvent) -> None:
    p = event.payload
    subagent = p.subagent or event.actor.subagent or ""
    scan.calls[p.operation_id] = Bar(
        kind="call",
        label=p.tool,
        start=event.created_at,
        status="open",
        detail=f"{p.tool} ({p.operation_id}, {p.effect.value})",
    )
    scan.call_subagent[p.operation_id] = subagent
    if p.step and p.step in scan.state.tasks:
        scan.call_step[p.operation_id] = p.step


def _on_tool_result(scan: _Scan, event: ToolResultEvent) -> None:
    p = event.payload
    call = scan.calls.get(p.operation_id)
    if call is None:
        return
    failed = "" if p.ok else f": {p.error or 'failed'}"
    scan.calls[p.operation_id] = call.model_copy(
        update={"end": event.created_at, "status": "ok" if p.ok else "failed", "detail": call.detail + failed}
    )


def _on_operation_outcome(scan: _Scan, event: OperationOutcomeEvent) -> None:
    p, at = event.payload, event.created_at
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
        RecoveryLine(at=at, by=_who(event.actor), text=line, detail=p.detail, ok=p.outcome != "unknown")
    )
    if p.outcome == "unknown":
        mark = Mark(kind="unknown", at=at, label=f"{p.operation_id}: outcome unknown", ok=False)
        if call is not None and call.end is None:  # it runs no more: its attempt is gone
            scan.calls[p.operation_id] = call.model_copy(update={"end": at, "status": "unknown"})
    else:
        verdict = "took effect" if p.succeeded else "did not take effect"
        by = f" ({p.by})" if p.by else ""
        mark = Mark(kind="reconciled", at=at, label=f"{p.operation_id} reconciled: {verdict}{by}", ok=True)
    _mark_operation(scan, p.operation_id, mark)


def _on_approval_request(scan: _Scan, event: ApprovalRequestEvent) -> None:
    p = event.payload
    subagent = event.actor.subagent or scan.call_subagent.get(p.operation_id, "")
    earlier = scan.waits.get(p.approval_id)
    scan.waits[p.approval_id] = _Wait(
        kind="approval",
        subagent=subagent,
        title=f"approve {p.tool}",
        on=f"you: approve {p.tool}",
        reason=p.summary,
        opened=event.created_at,
        resolved=earlier.resolved if earlier else None,
        by=earlier.by if earlier else "",
        outcome=earlier.outcome if earlier else "",
    )


def _on_approval(scan: _Scan, event: ApprovalEvent) -> None:
    p, at = event.payload, event.created_at
    wait = scan.waits.get(p.approval_id)
    outcome = "granted" if p.granted else "rejected"
    by = p.by or event.actor.name or event.actor.kind
    if wait is None:  # decided before it was asked for (a grant in the spec)
        scan.waits[p.approval_id] = _Wait(
            kind="approval",
            subagent=event.actor.subagent or "",
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


def _on_artifact(scan: _Scan, event: ArtifactEvent) -> None:
    p = event.payload
    if not p.deliverable:
        return
    subagent = p.subagent or event.actor.subagent or ""
    mark = Mark(kind="deliverable", at=event.created_at, label=f"deliverable {p.name} published")
    producing = scan.running.get(subagent)
    scan.published_by[p.name] = (subagent, producing or "")
    if producing is not None:
        scan.steps[producing].marks.append(mark)
    else:
        scan.subagent_marks.setdefault(subagent, []).append(mark)


def _on_checkpoint(scan: _Scan, event: CheckpointEvent) -> None:
    p = event.payload
    status = p.verification.status if p.verification else "no verification"
    mark = Mark(
        kind="checkpoint",
        at=event.created_at,
        label=f"checkpoint {p.checkpoint_id} ({status})",
        ok=p.verified,
    )
    if p.checkpoint_id in scan.steps:
        scan.steps[p.checkpoint_id].marks.append(mark)
    else:
        scan.subagent_marks.setdefault(p.subagent or event.actor.subagent or "", []).append(mark)


def _on_wait(scan: _Scan, event: WaitEvent) -> None:
    p = event.payload
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


def _on_lifecycle(scan: _Scan, event: LifecycleEvent) -> None:
    p = event.payload
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


def _on_executor_change(scan: _Scan, event: ExecutorChangeEvent) -> None:
    p, at = event.payload, event.created_at
    label = change_phrase(p.from_type, p.from_model, p.to_type, p.to_model, at_seq=p.at_seq, reason=p.reason)
    scan.session_marks.append(Mark(kind="executor", at=at, label=label))
    scan.recoveries.append(RecoveryLine(at=at, by=p.by or _who(event.actor), text=label))


# The events a report shows; the others (model output, notes, summaries, ...) add nothing to it.
_HANDLERS = handler_table(
    _on_user_input,
    _on_scope_change,
    _on_rejection,
    _on_task,
    _on_tool_request,
    _on_tool_result,
    _on_operation_outcome,
    _on_approval_request,
    _on_approval,
    _on_wait,
    _on_artifact,
    _on_checkpoint,
    _on_lifecycle,
    _on_executor_change,
)


def _scan_event(scan: _Scan, event: Event) -> None:
    actor = event.actor
    if actor.kind == "harness" and actor.attempt in scan.attempts:
        scan.attempts[actor.attempt].last_seen = event.created_at
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(scan, event)


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
    """The subagent's own row (its task, and its calls outside any step), then a row per step it
    ran and per wait it opened."""
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
    header = Row(
        kind="subagent",
        label=subagent or "the session",
        title=title,
        bars=header_bars + loose_calls,
        marks=scan.subagent_marks.get(subagent, []),
    )
    return [header, *_step_rows(scan, state, subagent, task_ids), *_wait_rows(scan, subagent)]


def _step_rows(scan: _Scan, state: SessionState, subagent: str, task_ids: list[str]) -> list[Row]:
    """A row per step that started, at most CHART_STEP_LIMIT: every active step, then the latest
    finished ones; a row counts those left out (the tables list them)."""
    rows = []
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
    return rows


def _wait_rows(scan: _Scan, subagent: str) -> list[Row]:
    rows = []
    for wait_id, wait in scan.waits.items():
        if wait.subagent != subagent:
            continue
        bar = Bar(
            kind=WAIT_BAR_KIND[wait.kind],
            label=wait_id,
            start=wait.opened,
            end=wait.resolved,
            status=f"{wait.outcome} by {wait.by}" if wait.resolved else "open",
            detail=f"waits on {wait.on}: {wait.reason}",
        )
        rows.append(Row(kind="wait", label=wait.title, title=f"{wait_id}: {wait.reason}", bars=[bar]))
    return rows


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
    reviews = ready_for_review(state)
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
