"""The briefing: what a person coming back needs, without reading the conversation.

It answers the questions of DESIGN.md section 1 from the folded state: what was asked and every
scope change since; which steps are done and verified; what is running; what waits on the person
(approvals, decisions, reconciliations) with the exact command to act; what waits on an external
condition; what is ready for review and where to download it; which findings are hypotheses and
which are accepted decisions; which results the last scope change made invalid and which stay
reusable; and the attempts, recoveries and unknown outcomes.

`briefing(state)` builds the `Briefing` model (its JSON is the JSON renderer); `render_text` and
`render_markdown` print it. Every list is capped so a long session still fits on a page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from belay.journal import commands
from belay.journal.events import ArtifactRef, NoteKind, TaskStatus, WaitKind
from belay.journal.state import NoteRecord, ResultRecord, SessionState, TaskRecord
from belay.journal.status import Phase, phase_of

LIST_LIMIT = 8  # entries per section before "... and N more"
STEP_LIMIT = 12
RESULT_LIMIT = 16
NOTE_LIMIT = 5
SCOPE_CHANGE_LIMIT = 6  # the most recent ones
FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.CANCELLED)


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScopeChangeItem(Model):
    request_version: int
    seq: int
    summary: str
    new_goal: str | None = None
    changed_parts: list[str]
    removed_parts: list[str]
    invalidated: list[str]  # the first RESULT_LIMIT, in recording order
    invalidated_count: int = 0


class StepItem(Model):
    task_id: str
    title: str
    owner: str | None
    status: TaskStatus
    verified: bool
    deliverable: str | None = None


class RunningItem(Model):
    kind: Literal["task", "operation"]
    id: str
    description: str
    subagent: str | None = None


class ActionItem(Model):
    """Something only the person can unblock, and the command that does it."""

    kind: Literal["approval", "decision", "reconciliation"]
    id: str
    summary: str
    command: str
    alternative: str | None = None
    payload_sha256: str | None = None
    expires_at: datetime | None = None


class ExternalItem(Model):
    wait_id: str
    reason: str
    condition: str | None = None


class ReviewItem(Model):
    name: str
    description: str = ""
    subagent: str | None = None
    sha256: str | None = None
    size: int | None = None
    media_type: str | None = None
    location: str | None = None
    command: str


class NoteItem(Model):
    note_id: str
    text: str
    status: str


class ResultItem(Model):
    result_id: str
    label: str
    source: str


class InvalidationItem(Model):
    request_version: int
    summary: str
    invalidated: list[ResultItem]
    invalidated_omitted: int = 0
    reusable: list[ResultItem]
    reusable_omitted: int = 0


class UnknownOutcomeItem(Model):
    operation_id: str
    tool: str
    detail: str = ""


class RecoveryItem(Model):
    attempt: int
    harness_lost: int
    restores: int
    sandbox_replaced: int
    recovery_failures: int
    last_failure: str | None = None
    restored_from: str | None = None
    unknown_outcomes: list[UnknownOutcomeItem]
    reconciled: list[str]


class CheckpointItem(Model):
    checkpoint_id: str
    seq: int
    covers_seq: int
    verification: str | None
    next_step: str | None


class RemoteSessionItem(Model):
    """A provider's session a managed executor holds for one subagent."""

    subagent: str
    executor: str
    remote_session_id: str
    endpoint: str
    calls: int
    delivered: int
    refused: int
    interruptions: int
    failure: str = ""


class Briefing(Model):
    session_id: str
    phase: Phase
    current_step: str | None
    last_seq: int
    goal: str
    request_version: int
    request_parts: dict[str, str]
    scope_changes: list[ScopeChangeItem]
    scope_changes_omitted: int = 0  # the earliest ones
    steps: list[StepItem]
    steps_omitted: int = 0  # the earliest finished steps make room for the active ones
    steps_omitted_done: int = 0
    steps_omitted_verified: int = 0
    running: list[RunningItem]
    waiting_on_you: list[ActionItem]
    waiting_on_external: list[ExternalItem]
    ready_for_review: list[ReviewItem]
    artifact_store: str = ""
    hypotheses: list[NoteItem]
    decisions: list[NoteItem]
    findings: list[NoteItem]
    notes_omitted: int = 0
    hypotheses_omitted: int = 0  # each list keeps its most recently updated notes
    decisions_omitted: int = 0
    findings_omitted: int = 0
    last_scope_change: InvalidationItem | None
    recovery: RecoveryItem
    checkpoint: CheckpointItem | None
    remote_sessions: list[RemoteSessionItem] = []


T = TypeVar("T")


def _cap(items: Sequence[T], limit: int = LIST_LIMIT) -> tuple[list[T], int]:
    return list(items[:limit]), max(0, len(items) - limit)


def _select_steps(tasks: list[TaskRecord], limit: int) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """Every active step first, then the most recent finished ones, in plan order; the earliest
    finished steps are the ones left out."""
    if len(tasks) <= limit:
        return tasks, []
    active = [t for t in tasks if t.status not in FINISHED][:limit]
    finished = [t for t in tasks if t.status in FINISHED]
    room = limit - len(active)
    keep = {t.task_id for t in active} | {t.task_id for t in (finished[-room:] if room > 0 else [])}
    return [t for t in tasks if t.task_id in keep], [t for t in tasks if t.task_id not in keep]


def _latest_notes(state: SessionState, kind: NoteKind) -> tuple[list[NoteItem], int]:
    """The NOTE_LIMIT notes of one kind updated last, shown in the order they were first made."""
    notes = [n for n in state.notes.values() if n.kind == kind]
    latest = sorted(notes, key=lambda n: (n.last_seq, n.note_id))[-NOTE_LIMIT:]
    latest.sort(key=lambda n: (n.first_seq, n.note_id))
    return [_note_item(n) for n in latest], len(notes) - len(latest)


def _result_item(r: ResultRecord) -> ResultItem:
    return ResultItem(result_id=r.result_id, label=r.label, source=r.source)


def _note_item(n: NoteRecord) -> NoteItem:
    return NoteItem(note_id=n.note_id, text=n.text, status=n.status)


def briefing(
    state: SessionState,
    *,
    locate: Callable[[ArtifactRef], str] | None = None,
    artifact_store: str = "",
) -> Briefing:
    """`locate` turns an artifact ref into a download location (a path, or a presigned URL);
    without it the ref's own uri is shown. `artifact_store` names the store for the reader."""
    sid = state.session_id
    tasks = sorted(state.tasks.values(), key=lambda t: (t.first_seq, t.task_id))
    shown, omitted = _select_steps(tasks, STEP_LIMIT)
    steps = [
        StepItem(
            task_id=t.task_id,
            title=t.title,
            owner=t.owner,
            status=t.status,
            verified=t.status == TaskStatus.VERIFIED,
            deliverable=t.deliverable,
        )
        for t in shown
    ]

    pending_by_operation = {a.operation_id: a for a in state.pending_approval_records()}
    running: list[RunningItem] = [
        RunningItem(kind="task", id=t.task_id, description=t.title or t.task_id, subagent=t.owner)
        for t in tasks
        if t.status == TaskStatus.RUNNING
    ]
    for op in state.open_operation_records():
        if op.operation_id in state.unknown_outcomes:
            continue
        blocked = " (awaiting approval)" if op.operation_id in pending_by_operation else ""
        running.append(
            RunningItem(
                kind="operation",
                id=op.operation_id,
                description=f"{op.tool} [{op.effect.value}]{blocked}",
                subagent=op.subagent,
            )
        )

    actions: list[ActionItem] = [
        ActionItem(
            kind="approval",
            id=a.approval_id,
            summary=f"{a.summary or a.tool} (operation {a.operation_id}, tool {a.tool})",
            command=commands.approve(sid, a.approval_id),
            alternative=commands.reject(sid, a.approval_id),
            payload_sha256=a.payload_sha256,
            expires_at=a.request_expires_at,
        )
        for a in state.pending_approval_records()
    ]
    pending_ids = [a.approval_id for a in state.pending_approval_records()]
    # A wait on the user whose condition names an operation with an unknown outcome is settled by
    # reconciling that operation, so it is listed once, as the reconciliation.
    reconcile_waits = {
        w.condition: w
        for w in state.open_wait_records()
        if w.kind == WaitKind.ON_USER and w.condition in state.unknown_outcomes
    }
    for w in state.open_wait_records():
        # A wait that names a pending approval (in its id or reason) is answered by that approval.
        names_approval = any(a in w.wait_id or a in w.reason for a in pending_ids)
        if w.kind != WaitKind.ON_USER or names_approval or w.condition in reconcile_waits:
            continue
        actions.append(
            ActionItem(
                kind="decision",
                id=w.wait_id,
                summary=w.reason,
                command=commands.answer(sid, w.wait_id),
            )
        )
    for op_id in sorted(state.unknown_outcomes, key=lambda o: (state.unknown_outcomes[o], o)):
        op = state.operations[op_id]
        summary = f"{op.tool or 'operation'} outcome unknown" + (
            f" ({op.outcome_detail})" if op.outcome_detail else ""
        )
        actions.append(
            ActionItem(
                kind="reconciliation",
                id=op_id,
                summary=f"{summary}; did it take effect?",
                command=commands.reconcile(sid, op_id),
            )
        )

    external = [
        ExternalItem(wait_id=w.wait_id, reason=w.reason, condition=w.condition)
        for w in state.open_wait_records()
        if w.kind == WaitKind.ON_EXTERNAL
    ]

    reviews: list[ReviewItem] = []
    for w in state.open_wait_records():
        if w.kind != WaitKind.READY_FOR_REVIEW:
            continue
        name = w.artifact or w.wait_id
        artifact = state.artifacts.get(name)
        if artifact is None:
            reviews.append(ReviewItem(name=name, description=w.reason, command=commands.download(sid, name)))
            continue
        ref = artifact.ref
        reviews.append(
            ReviewItem(
                name=name,
                description=artifact.description or w.reason,
                subagent=artifact.subagent,
                sha256=ref.sha256,
                size=ref.size,
                media_type=ref.media_type,
                location=locate(ref) if locate is not None else (ref.uri or None),
                command=commands.download(sid, name),
            )
        )

    hypotheses, h_omitted = _latest_notes(state, NoteKind.HYPOTHESIS)
    decisions, d_omitted = _latest_notes(state, NoteKind.DECISION)
    findings, f_omitted = _latest_notes(state, NoteKind.FINDING)

    last_change: InvalidationItem | None = None
    change = state.last_scope_change()
    if change is not None:
        invalidated = [_result_item(state.results[r]) for r in change.invalidated[:RESULT_LIMIT]]
        invalidated_omitted = max(0, len(change.invalidated) - RESULT_LIMIT)
        reusable_records = sorted((r for r in state.results.values() if r.valid), key=lambda r: r.seq)
        reusable = [_result_item(r) for r in reusable_records[:RESULT_LIMIT]]
        reusable_omitted = max(0, len(reusable_records) - RESULT_LIMIT)
        last_change = InvalidationItem(
            request_version=change.request_version,
            summary=change.summary,
            invalidated=invalidated,
            invalidated_omitted=invalidated_omitted,
            reusable=reusable,
            reusable_omitted=reusable_omitted,
        )

    lc = state.lifecycle
    restored_from = next(
        (e.checkpoint_id for e in reversed(lc.recent) if e.kind == "restored" and e.checkpoint_id), None
    )
    failure = lc.last_recovery_failure
    recovery = RecoveryItem(
        attempt=lc.attempt,
        harness_lost=lc.harness_lost,
        restores=lc.restores,
        sandbox_replaced=lc.sandbox_replaced,
        recovery_failures=lc.recovery_failures,
        last_failure=f"{failure.reason}: {failure.detail}".strip(": ") if failure else None,
        restored_from=restored_from,
        unknown_outcomes=[
            UnknownOutcomeItem(
                operation_id=o, tool=state.operations[o].tool, detail=state.operations[o].outcome_detail
            )
            for o in sorted(state.unknown_outcomes)
        ],
        reconciled=sorted(state.reconciled_operations),
    )

    verified = state.latest_verified_checkpoint
    checkpoint = None
    if verified is not None:
        cp = verified.checkpoint
        checkpoint = CheckpointItem(
            checkpoint_id=cp.checkpoint_id,
            seq=verified.seq,
            covers_seq=cp.covers_seq,
            verification=cp.verification.command if cp.verification else None,
            next_step=cp.next_step,
        )

    return Briefing(
        session_id=sid,
        phase=phase_of(state),
        current_step=state.current_step,
        last_seq=state.last_seq,
        goal=state.request.goal,
        request_version=state.request.version,
        request_parts=dict(sorted(state.request.parts.items())),
        scope_changes=[
            ScopeChangeItem(
                request_version=c.request_version,
                seq=c.seq,
                summary=c.summary,
                new_goal=c.goal,
                changed_parts=list(c.changed_parts),
                removed_parts=list(c.removed_parts),
                invalidated=list(c.invalidated[:RESULT_LIMIT]),
                invalidated_count=len(c.invalidated),
            )
            for c in state.scope_changes[-SCOPE_CHANGE_LIMIT:]
        ],
        scope_changes_omitted=max(0, len(state.scope_changes) - SCOPE_CHANGE_LIMIT),
        steps=steps,
        steps_omitted=len(omitted),
        steps_omitted_done=sum(t.status == TaskStatus.DONE for t in omitted),
        steps_omitted_verified=sum(t.status == TaskStatus.VERIFIED for t in omitted),
        running=running,
        waiting_on_you=actions,
        waiting_on_external=external,
        ready_for_review=reviews,
        artifact_store=artifact_store,
        hypotheses=hypotheses,
        decisions=decisions,
        findings=findings,
        notes_omitted=h_omitted + d_omitted + f_omitted,
        hypotheses_omitted=h_omitted,
        decisions_omitted=d_omitted,
        findings_omitted=f_omitted,
        last_scope_change=last_change,
        recovery=recovery,
        checkpoint=checkpoint,
        remote_sessions=[
            RemoteSessionItem(
                subagent=r.subagent,
                executor=r.executor,
                remote_session_id=r.remote_session_id,
                endpoint=r.endpoint,
                calls=r.calls,
                delivered=r.delivered,
                refused=r.refused,
                interruptions=r.interruptions,
                failure=r.failure,
            )
            for r in sorted(state.remote_sessions.values(), key=lambda r: r.subagent)
        ],
    )


# --------------------------------------------------------------------------------------------------
# Renderers


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip() if moment else "no expiry"


def _ids(items: Sequence[ResultItem]) -> str:
    return ", ".join(f"{r.result_id} ({r.label})" if r.label != r.result_id else r.result_id for r in items)


def _lines(b: Briefing) -> list[tuple[int, str, str]]:
    """(level, section, text) rows shared by the text and markdown renderers: level 0 is a
    section heading, 1 an entry, 2 a detail under an entry."""
    rows: list[tuple[int, str, str]] = []

    def head(text: str) -> None:
        rows.append((0, text, text))

    def item(text: str, level: int = 1) -> None:
        rows.append((level, "", text))

    step = f", step {b.current_step}" if b.current_step else ""
    head(f"Session {b.session_id}: {b.phase.value} (attempt {b.recovery.attempt}{step}, seq {b.last_seq})")
    head(f"Asked (request v{b.request_version})")
    item(b.goal or "(no request recorded)")
    for name, text in b.request_parts.items():
        item(f"{name}: {text}", 2)
    if b.scope_changes:
        head("Scope changes")
        if b.scope_changes_omitted:
            item(f"... {b.scope_changes_omitted} earlier changes not shown")
        for c in b.scope_changes:
            what = []
            if c.new_goal:
                what.append(f"goal -> {c.new_goal}")
            if c.changed_parts:
                what.append("changed " + ", ".join(c.changed_parts))
            if c.removed_parts:
                what.append("removed " + ", ".join(c.removed_parts))
            item(f"v{c.request_version}: {c.summary}" + (f" ({'; '.join(what)})" if what else ""))

    head("Steps")
    if b.steps_omitted:
        item(
            f"... {b.steps_omitted} earlier steps not shown "
            f"({b.steps_omitted_done} done, {b.steps_omitted_verified} verified)"
        )
    for s in b.steps:
        owner = f" [{s.owner}]" if s.owner else ""
        deliverable = f" -> {s.deliverable}" if s.deliverable else ""
        item(f"{s.status.value:<9} {s.task_id}: {s.title or s.task_id}{owner}{deliverable}")
    if not b.steps:
        item("no plan recorded")

    head("Running now")
    for r in b.running:
        who = f" [{r.subagent}]" if r.subagent else ""
        item(f"{r.kind} {r.id}: {r.description}{who}")
    if not b.running:
        item("nothing")

    head("Waiting on you")
    for a in b.waiting_on_you:
        item(f"{a.kind} {a.id}: {a.summary}")
        if a.payload_sha256:
            item(f"payload sha256 {a.payload_sha256}, expires {_when(a.expires_at)}", 2)
        item(f"run: {a.command}" + (f"  (or: {a.alternative})" if a.alternative else ""), 2)
    if not b.waiting_on_you:
        item("nothing")

    head("Waiting on external conditions")
    for e in b.waiting_on_external:
        item(f"{e.wait_id}: {e.reason}" + (f" [{e.condition}]" if e.condition else ""))
    if not b.waiting_on_external:
        item("nothing")

    head("Ready for review")
    for review in b.ready_for_review:
        sizes = f"{review.size} bytes" if review.size is not None else ""
        facts = ", ".join(x for x in (sizes, review.media_type or "", review.subagent or "") if x)
        label = f"{review.name} ({facts})" if facts else review.name
        item(f"{label}: {review.description}")
        place = review.location or b.artifact_store or "the artifact store"
        item(f"download: {review.command}  (sha256 {_short(review.sha256)}, at {place})", 2)
    if not b.ready_for_review:
        item("nothing")

    sections = [
        ("Hypotheses (not yet accepted)", b.hypotheses, b.hypotheses_omitted, True),
        ("Decisions", b.decisions, b.decisions_omitted, True),
        ("Findings", b.findings, b.findings_omitted, False),
    ]
    for title, notes, omitted, always in sections:
        if not notes and not always:
            continue
        head(title)
        if omitted:
            item(f"... {omitted} older not shown")
        for n in notes:
            item(f"{n.note_id} [{n.status}]: {n.text}")
        if not notes:
            item("none")

    if b.last_scope_change is not None:
        change = b.last_scope_change
        head(f"Last scope change (v{change.request_version}): {change.summary}")
        invalid_more = f" ... and {change.invalidated_omitted} more" if change.invalidated_omitted else ""
        item("invalid now: " + (_ids(change.invalidated) or "nothing") + invalid_more)
        more = f" ... and {change.reusable_omitted} more" if change.reusable_omitted else ""
        item("still reusable: " + (_ids(change.reusable) or "nothing") + more)

    rec = b.recovery
    head("Attempts and recovery")
    restored = f" from {rec.restored_from}" if rec.restored_from else ""
    item(
        f"attempt {rec.attempt}; harness lost {rec.harness_lost}x; restored {rec.restores}x{restored}; "
        f"sandboxes replaced {rec.sandbox_replaced}x; recovery failures {rec.recovery_failures}"
    )
    if rec.last_failure:
        item(f"last recovery failure: {rec.last_failure}", 2)
    if rec.unknown_outcomes:
        item(
            "unknown outcomes to reconcile: "
            + ", ".join(f"{u.operation_id} ({u.tool})" for u in rec.unknown_outcomes)
        )
    if rec.reconciled:
        item("reconciled: " + ", ".join(rec.reconciled))
    if b.checkpoint is not None:
        cp = b.checkpoint
        verification = f", verified by `{cp.verification}`" if cp.verification else ""
        nxt = f", next step {cp.next_step}" if cp.next_step else ""
        item(f"last verified checkpoint {cp.checkpoint_id} (covers seq {cp.covers_seq}{verification}{nxt})")
    else:
        item("no verified checkpoint yet")
    if b.remote_sessions:
        head("Managed executors")
        for remote in b.remote_sessions:
            where = f"{remote.executor} session {remote.remote_session_id} at {remote.endpoint}"
            item(f"{remote.subagent}: {where}")
            counts = (
                f"{remote.calls} calls asked for, {remote.delivered} results delivered, "
                f"{remote.refused} refused for their arguments, {remote.interruptions} interruptions"
            )
            item(counts + (f"; failed: {remote.failure}" if remote.failure else ""), 2)
    return rows


def render_text(b: Briefing) -> str:
    out = []
    for level, _, text in _lines(b):
        out.append(text if level == 0 else "  " * level + text)
    return "\n".join(out) + "\n"


def render_markdown(b: Briefing) -> str:
    out = []
    for index, (level, _, text) in enumerate(_lines(b)):
        if level == 0:
            out.append(f"# {text}" if index == 0 else f"\n## {text}")
        else:
            out.append("  " * (level - 1) + f"- {text}")
    return "\n".join(out) + "\n"


def render_json(b: Briefing) -> str:
    return b.model_dump_json(indent=2)
