"""The briefing: what a person coming back needs, without reading the conversation.

It answers, from the folded state, the questions a returning person asks (docs/cli.md, "Reading the
record"): what was asked and every scope change since (when, by whom, the difference in the
request, and under it what became invalid and what stays reusable, and why); what was rejected and
is being redone; which steps are done and verified; what is running; what waits on the person
(approvals, with the command that fetches what they bind, decisions, reconciliations) with the
exact command to act; what needs attention (an external effect that failed, whose outcome is
unknown, or that took effect more than once, with what to do); the effects made in the world; what
waits on an external condition; what is ready for review and where to download it; which findings
are hypotheses and which are accepted decisions; the attempts, recoveries and unknown outcomes; and
how many secrets were redacted before they were recorded. When no attempt proves it is alive it
says so first: since when, what the attempt was doing, what will happen to each operation it left
without a result, and the exact command that continues the session. Its resources: each subagent's
sandbox (where, network profile, alive or not), the budgets used and left, and every subagent's
last verified checkpoint.

`briefing(state)` builds the `Briefing` model (its JSON is the JSON renderer); `render_text` and
`render_markdown` print it, `render_rows` gives its rows to the HTML report. Every list is capped
so a long session still fits on a page, and what is left out is counted ("... and N more"). The
briefing keeps what it shows, not the history: it reads the operations and results it lists by
key, and where it must look at every entry of a map (the plan, the notes, the results for the
scope changes shown) it streams the map, which keeps no page it read (`SnapshotMap.items`).
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from belay.journal import commands
from belay.journal.events import ArtifactRef, NoteKind, TaskStatus, WaitKind
from belay.journal.state import (
    ApprovalRecord,
    NoteRecord,
    OperationRecord,
    ResultRecord,
    SessionState,
    TaskRecord,
)
from belay.journal.status import Interruption, Liveness, Phase, interruption_of, phase_of

LIST_LIMIT = 8  # entries per section before "... and N more"
STEP_LIMIT = 12
RESULT_LIMIT = 16
NOTE_LIMIT = 5
SCOPE_CHANGE_LIMIT = 6  # the most recent ones
FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.CANCELLED)


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RequestDifference(Model):
    part: str  # a request part, or "goal"
    before: str | None = None  # None: the part did not exist
    after: str | None = None  # None: the part was removed


class StepVerdict(Model):
    """A step a scope change or a rejection touched (or spared), where it stands now, and why."""

    step: str
    title: str = ""
    status: TaskStatus
    round: int = 1
    why: str


class OutputVerdict(Model):
    """An artifact, note or external effect a change touched (or spared), and why."""

    result_id: str
    label: str
    source: str
    why: str


class ScopeChangeItem(Model):
    request_version: int
    seq: int
    summary: str
    new_goal: str | None = None
    changed_parts: list[str]
    removed_parts: list[str]
    invalidated: list[str]  # the first RESULT_LIMIT, in recording order
    invalidated_count: int = 0
    by: str = ""
    at: datetime | None = None
    changes: list[RequestDifference] = []
    invalid_steps: list[StepVerdict] = []  # the first STEP_LIMIT steps it reopened
    invalid_steps_omitted: int = 0
    invalid_outputs: list[OutputVerdict] = []
    invalid_outputs_omitted: int = 0
    reusable_steps: list[StepVerdict] = []
    reusable_steps_omitted: int = 0
    reusable_outputs: list[OutputVerdict] = []
    reusable_outputs_omitted: int = 0


class RejectionItem(Model):
    kind: Literal["deliverable", "approval"]
    item: str
    sha256: str
    reason: str
    by: str = ""
    at: datetime | None = None
    steps: list[StepVerdict] = []  # what is redone because of it
    invalidated_count: int = 0


class StepItem(Model):
    task_id: str
    title: str
    owner: str | None
    status: TaskStatus
    verified: bool
    deliverable: str | None = None
    round: int = 1
    reopened_because: str | None = None  # set while a reopened step waits to be done again


class RunningItem(Model):
    kind: Literal["task", "operation"]
    id: str
    description: str
    subagent: str | None = None


class FetchItem(Model):
    """What an approval binds, and the command that downloads it to read before deciding."""

    what: str
    sha256: str
    size: int
    command: str


class ActionItem(Model):
    """Something only the person can unblock, and the command that does it."""

    kind: Literal["approval", "decision", "reconciliation"]
    id: str
    summary: str
    command: str
    alternative: str | None = None
    payload_sha256: str | None = None
    expires_at: datetime | None = None
    fetch: list[FetchItem] = []


class AttentionItem(Model):
    """An external effect that went wrong, what it is, and what to do about it."""

    kind: Literal["failed_effect", "unknown_effect", "repeated_effect"]
    id: str  # the operation
    summary: str
    command: str | None = None
    alternative: str | None = None
    effects: list[str] = []  # a repeated effect: what each time made, as the external system names it


class EffectItem(Model):
    """An operation with an effect in the world (unsafe or keyed) and what became of it."""

    operation_id: str
    tool: str
    subagent: str | None = None
    outcome: Literal["made", "failed", "unknown", "pending"]
    ref: str = ""  # what it made, as the external system names it (a ticket id)
    at: datetime | None = None
    detail: str = ""


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
    invalid_because: str | None = None  # a scope change or rejection invalidated what it rests on


class UnknownOutcomeItem(Model):
    operation_id: str
    tool: str
    detail: str = ""


class RecoveryItem(Model):
    attempt: int
    harness_lost: int
    restores: int  # every restore, the first seeding of each sandbox included
    recovery_restores: int = 0  # restores into a sandbox that replaced an earlier one
    sandbox_replaced: int
    recovery_failures: int
    last_failure: str | None = None
    restored_from: str | None = None
    unknown_outcomes: list[UnknownOutcomeItem]
    reconciled: list[str]


class CheckpointItem(Model):
    checkpoint_id: str
    subagent: str | None = None
    seq: int
    covers_seq: int
    verification: str | None
    next_step: str | None


class SandboxItem(Model):
    """One subagent's sandbox: where it runs, its network profile, and whether it is alive."""

    subagent: str
    where: str = ""  # a local workspace (and pid), or a pod
    network_profile: str = ""
    alive: bool | None = None  # None: not observed by whoever built the briefing
    started_by_attempt: int | None = None
    recorded: str = ""  # what its start recorded: pid, profile, isolation
    restored_from: str | None = None


class BudgetItem(Model):
    name: str  # as in spec.budgets
    limit: int
    used: int
    left: int


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
    rejections: list[RejectionItem] = []
    rejections_omitted: int = 0  # the earliest ones
    steps: list[StepItem]
    steps_omitted: int = 0  # the earliest finished steps make room for the active ones
    steps_omitted_done: int = 0
    steps_omitted_verified: int = 0
    running: list[RunningItem]
    waiting_on_you: list[ActionItem]
    needs_attention: list[AttentionItem] = []
    needs_attention_omitted: int = 0  # the earliest failed effects nobody is asked about
    effects: list[EffectItem] = []
    effects_omitted: int = 0  # the earliest ones
    waiting_on_external: list[ExternalItem]
    ready_for_review: list[ReviewItem]
    artifact_store: str = ""
    record: str = ""  # where the event record is, when not in the home's own events.db
    hypotheses: list[NoteItem]
    decisions: list[NoteItem]
    findings: list[NoteItem]
    notes_omitted: int = 0
    hypotheses_omitted: int = 0  # each list keeps its most recently updated notes
    decisions_omitted: int = 0
    findings_omitted: int = 0
    recovery: RecoveryItem
    interruption: Interruption | None = None  # no attempt proves it is alive
    sandboxes: list[SandboxItem] = []
    budgets: list[BudgetItem] = []
    checkpoints: list[CheckpointItem] = []  # every subagent's last verified checkpoint
    secrets_redacted: int = 0
    remote_sessions: list[RemoteSessionItem] = []


T = TypeVar("T")


def _cap(items: Sequence[T], limit: int = LIST_LIMIT) -> tuple[list[T], int]:
    return list(items[:limit]), max(0, len(items) - limit)


def _plan_order(task: TaskRecord) -> tuple[int, str]:
    return task.first_seq, task.task_id


def _select_steps(state: SessionState, limit: int) -> tuple[list[TaskRecord], Counter[TaskStatus]]:
    """Every active step first, then the most recent finished ones, in plan order; the earliest
    finished steps are the ones left out, counted by status. Streamed: only the steps shown are
    kept, whatever the length of the plan."""
    # One pass over the plan: the first `limit` active steps and the last `limit` finished ones,
    # each list kept in plan order.
    active: list[TaskRecord] = []
    finished: list[TaskRecord] = []
    omitted: Counter[TaskStatus] = Counter()
    for task in state.tasks.values():
        omitted[task.status] += 1
        if task.status in FINISHED:
            bisect.insort(finished, task, key=_plan_order)
            if len(finished) > limit:
                del finished[0]
        else:
            bisect.insort(active, task, key=_plan_order)
            if len(active) > limit:
                del active[-1]
    room = limit - len(active)
    kept = active + (finished[max(0, len(finished) - room) :] if room > 0 else [])
    omitted.subtract(t.status for t in kept)
    return sorted(kept, key=_plan_order), omitted


def _latest_notes(state: SessionState, kind: NoteKind) -> tuple[list[NoteItem], int]:
    """The NOTE_LIMIT notes of one kind updated last, shown in the order they were first made."""
    count = 0

    def of_kind() -> Iterator[NoteRecord]:
        nonlocal count
        for note in state.notes.values():
            if note.kind == kind:
                count += 1
                yield note

    latest = heapq.nlargest(NOTE_LIMIT, of_kind(), key=lambda n: (n.last_seq, n.note_id))
    latest.sort(key=lambda n: (n.first_seq, n.note_id))
    return [_note_item(n, state) for n in latest], count - len(latest)


def _note_item(n: NoteRecord, state: SessionState) -> NoteItem:
    result = state.results.get(n.result_id) if n.result_id else None
    invalid = result.invalid_because or "invalid" if result is not None and not result.valid else None
    return NoteItem(note_id=n.note_id, text=n.text, status=n.status, invalid_because=invalid)


# --------------------------------------------------------------------------------------------------
# Scope changes, rejections, effects in the world, and what needs attention


def _fetch_items(session_id: str, approval: ApprovalRecord) -> list[FetchItem]:
    items = []
    if approval.content_ref is not None:
        name = approval.content_name or approval.content_ref.sha256[:12]
        items.append(
            FetchItem(
                what=f"the bytes it sends out ({name})",
                sha256=approval.content_ref.sha256,
                size=approval.content_ref.size,
                command=commands.fetch(session_id, approval.content_ref.sha256, name),
            )
        )
    if approval.payload_ref is not None:
        items.append(
            FetchItem(
                what="the operation as approved (its sha256 is the payload's)",
                sha256=approval.payload_ref.sha256,
                size=approval.payload_ref.size,
                command=commands.fetch(
                    session_id, approval.payload_ref.sha256, f"{approval.approval_id}.json"
                ),
            )
        )
    return items


def _step_verdict(state: SessionState, step: str, why: str) -> StepVerdict:
    task = state.tasks.get(step)
    if task is None:
        return StepVerdict(step=step, status=TaskStatus.PLANNED, why=why)
    return StepVerdict(step=step, title=task.title, status=task.status, round=task.round, why=why)


def _notable(result: ResultRecord, state: SessionState) -> bool:
    """Results a person recognises on their own: artifacts, notes (their latest version), effects
    in the world."""
    if result.source == "note":
        note = state.notes.get(result.label)
        return note is None or note.result_id == result.result_id
    return result.source == "artifact" or result.result_id in state.external_operations


def _output_source(result: ResultRecord, state: SessionState) -> str:
    if result.result_id in state.external_operations:
        return "effect in the world"
    if result.source == "note":
        note = state.notes.get(result.label)
        return note.kind.value if note is not None else "note"
    artifact = state.artifacts.get(result.label)
    return "deliverable" if artifact is not None and artifact.deliverable else result.source


def _output_label(result: ResultRecord, state: SessionState) -> str:
    operation = state.operations.get(result.result_id)
    if operation is not None and result.result_id in state.external_operations:
        made = f" -> {operation.effect_ref}" if operation.effect_ref else ""
        return f"{operation.tool} {result.result_id}{made}"
    return result.label


class _ChangeScan:
    """What one pass over the results finds for one scope change: its notable invalidated outputs
    (the first LIST_LIMIT in the order the change recorded them), why each shown step was redone,
    and its notable reusable outputs (the LIST_LIMIT recorded last before it); only those records
    are kept, the rest are counted."""

    def __init__(self, change: Any) -> None:
        self.change = change
        self.position = {result_id: i for i, result_id in enumerate(change.invalidated)}
        self.shown_steps = list(change.reopened_steps[:STEP_LIMIT])
        self.why: dict[str, tuple[int, str]] = {}  # shown step -> (position, reason)
        self.invalid: list[tuple[int, str, ResultRecord]] = []  # a max-heap on -position
        self.invalid_count = 0
        self.reusable: list[tuple[int, str, ResultRecord]] = []  # a min-heap on seq
        self.reusable_count = 0

    def see(self, result: ResultRecord, state: SessionState) -> None:
        position = self.position.get(result.result_id)
        if position is not None:
            step = result.step
            if step is not None and step in self.shown_steps and result.invalid_because:
                known = self.why.get(step)
                if known is None or position < known[0]:
                    self.why[step] = (position, result.invalid_because)
            if _notable(result, state):
                self.invalid_count += 1
                heapq.heappush(self.invalid, (-position, result.result_id, result))
                if len(self.invalid) > LIST_LIMIT:
                    heapq.heappop(self.invalid)
        elif result.seq < self.change.seq and result.valid and _notable(result, state):
            self.reusable_count += 1
            heapq.heappush(self.reusable, (result.seq, result.result_id, result))
            if len(self.reusable) > LIST_LIMIT:
                heapq.heappop(self.reusable)


def _scan_results(
    state: SessionState, changes: Sequence[Any]
) -> tuple[dict[str, set[str]], list[_ChangeScan]]:
    """One pass over the results for the scope changes shown, streamed (`SnapshotMap.items`), so
    the briefing holds what it shows and a few counters, not the history: the request parts each
    step's results were derived from, and each change's `_ChangeScan`."""
    parts: dict[str, set[str]] = {}
    scans = [_ChangeScan(change) for change in changes]
    if not scans:
        return parts, scans
    for result in state.results.values():
        if result.step is not None and result.derived_from is not None:
            parts.setdefault(result.step, set()).update(result.derived_from.request_parts)
        for scan in scans:
            scan.see(result, state)
    return parts, scans


def _reusable_steps(
    state: SessionState, change: Any, parts_by_step: dict[str, set[str]]
) -> tuple[list[StepVerdict], int]:
    """The steps finished before the change that it did not touch (and nothing since has
    reopened), each with what it depends on: the first STEP_LIMIT in plan order, and how many
    there are. Streamed over the plan."""
    reopened = set(change.reopened_steps)
    count = 0

    def parts_of(task: TaskRecord) -> Sequence[str]:
        return task.request_parts if task.request_parts is not None else sorted(parts_by_step[task.task_id])

    def reusable() -> Iterator[TaskRecord]:
        nonlocal count
        for task in state.tasks.values():
            if task.task_id in state.subagents or task.first_seq > change.seq or task.task_id in reopened:
                continue  # a subagent's own task is not a step; a step begun after the change is new work
            if task.reopened_seq is not None and task.reopened_seq > change.seq:
                continue
            if task.status not in (TaskStatus.DONE, TaskStatus.VERIFIED):
                continue  # not finished: nothing to reuse yet
            if task.request_parts is None and task.task_id not in parts_by_step:
                continue  # it recorded no inputs: nothing can be said either way
            count += 1
            yield task

    shown = heapq.nsmallest(STEP_LIMIT, reusable(), key=_plan_order)
    verdicts = []
    for task in shown:
        parts = parts_of(task)
        why = (
            f"depends on {', '.join(parts)} only: unchanged" if parts else "depends on no part of the request"
        )
        verdicts.append(_step_verdict(state, task.task_id, why))
    return verdicts, count - len(shown)


def _scope_change_item(
    state: SessionState, scan: _ChangeScan, parts_by_step: dict[str, set[str]]
) -> ScopeChangeItem:
    change = scan.change
    invalid_outputs = [
        OutputVerdict(
            result_id=r.result_id,
            label=_output_label(r, state),
            source=_output_source(r, state),
            why=r.invalid_because or "invalid",
        )
        for _, _, r in sorted(scan.invalid, reverse=True)
    ]
    # What stays reusable: the work done before the change that it did not touch (and nothing
    # since has reopened), each with what it depends on.
    reusable_steps, reusable_steps_omitted = _reusable_steps(state, change, parts_by_step)
    reusable_outputs = [
        OutputVerdict(
            result_id=r.result_id,
            label=_output_label(r, state),
            source=_output_source(r, state),
            why="its inputs are unchanged",
        )
        for _, _, r in sorted(scan.reusable)
    ]
    return ScopeChangeItem(
        request_version=change.request_version,
        seq=change.seq,
        summary=change.summary,
        new_goal=change.goal,
        changed_parts=list(change.changed_parts),
        removed_parts=list(change.removed_parts),
        invalidated=list(change.invalidated[:RESULT_LIMIT]),
        invalidated_count=len(change.invalidated),
        by=change.by,
        at=change.at,
        changes=[RequestDifference(part=c.part, before=c.before, after=c.after) for c in change.changes],
        invalid_steps=[
            _step_verdict(state, step, scan.why[step][1] if step in scan.why else "its work was turned down")
            for step in scan.shown_steps
        ],
        invalid_steps_omitted=len(change.reopened_steps) - len(scan.shown_steps),
        invalid_outputs=invalid_outputs,
        invalid_outputs_omitted=scan.invalid_count - len(invalid_outputs),
        reusable_steps=reusable_steps,
        reusable_steps_omitted=reusable_steps_omitted,
        reusable_outputs=reusable_outputs,
        reusable_outputs_omitted=scan.reusable_count - len(reusable_outputs),
    )


def _rejection_item(state: SessionState, rejection: Any) -> RejectionItem:
    why = f"{rejection.item} rejected" + (f": {rejection.reason}" if rejection.reason else "")
    return RejectionItem(
        kind=rejection.kind,
        item=rejection.item,
        sha256=rejection.sha256,
        reason=rejection.reason,
        by=rejection.by,
        at=rejection.at,
        steps=[_step_verdict(state, step, why) for step in rejection.reopened_steps],
        invalidated_count=len(rejection.invalidated),
    )


def _latest_retry(state: SessionState, operation_id: str) -> ApprovalRecord | None:
    retries = [a for a in state.approvals_for(operation_id) if a.kind == "retry"]
    return retries[-1] if retries else None


def _effect_item(state: SessionState, op: OperationRecord) -> EffectItem:
    base = {"operation_id": op.operation_id, "tool": op.tool, "subagent": op.subagent}
    if op.operation_id in state.unknown_outcomes:
        return EffectItem(**base, outcome="unknown", detail=op.outcome_detail)
    if op.has_result and op.ok:
        ref = ", ".join(op.effects) if op.effects else op.effect_ref
        return EffectItem(**base, outcome="made", ref=ref, at=op.result_at)
    if op.has_result:
        detail = op.error or ""
        retry = _latest_retry(state, op.operation_id)
        if retry is not None and retry.decision == "rejected":
            said = f": {retry.decision_reason}" if retry.decision_reason else ""
            detail += f"; {retry.decided_by or 'you'} chose to go on without it{said}"
        elif retry is not None and retry.decision == "granted":
            detail += f"; {retry.decided_by or 'you'} asked to try it again"
        return EffectItem(**base, outcome="failed", at=op.result_at, detail=detail)
    if op.outcome == "reconciled":
        outcome: Literal["made", "pending"] = "made" if op.reconciled_succeeded else "pending"
        return EffectItem(**base, outcome=outcome, detail=f"reconciled: {op.outcome_detail}".rstrip(": "))
    pending = any(a.pending for a in state.approvals_for(op.operation_id))
    return EffectItem(**base, outcome="pending", detail="awaiting approval" if pending else "")


def _attention(state: SessionState) -> tuple[list[AttentionItem], int]:
    """What needs attention, and how many earlier failed effects nobody is asked about are left out."""
    sid = state.session_id
    items: list[AttentionItem] = []
    # A reconcile probe found several effects of one operation: a person undoes the extra ones.
    for op_id in sorted(state.repeated_effects, key=lambda o: (state.repeated_effects[o], o)):
        op = state.operations[op_id]
        made = list(op.effects)
        items.append(
            AttentionItem(
                kind="repeated_effect",
                id=op_id,
                summary=f"{op.tool or 'operation'} {op_id} took effect {len(made)} times "
                f"({', '.join(made)}): undo the extra ones in that system by hand",
                effects=made,
            )
        )
    # Every unknown outcome and every failure that waits on a person's retry decision (both also
    # wait on you); of the failures nobody is asked about, the latest LIST_LIMIT, the rest counted.
    # Only the operations shown are read.
    requested = state.external_operations
    shown: list[tuple[int, str, ApprovalRecord | None]] = [
        (requested[o], o, None) for o in state.unknown_outcomes if o in requested
    ]
    failed: list[tuple[int, str]] = []
    for op_id, seq in state.failed_external_operations.items():
        if op_id in state.unknown_outcomes:
            continue
        retry = _latest_retry(state, op_id)
        if retry is None:
            failed.append((seq, op_id))
        elif retry.pending:
            shown.append((seq, op_id, retry))
    failed.sort()
    shown += [(seq, op_id, None) for seq, op_id in failed[-LIST_LIMIT:]]
    for _, op_id, retry in sorted(shown, key=lambda s: (s[0], s[1])):
        op = state.operations[op_id]
        if op_id not in state.unknown_outcomes and (not op.has_result or op.ok):
            continue  # requested again since it failed: it runs, or ran, once more
        if op_id in state.unknown_outcomes:
            items.append(
                AttentionItem(
                    kind="unknown_effect",
                    id=op_id,
                    summary=f"{op.tool} ({op_id}): outcome unknown, never repeated blindly; did it "
                    "take effect?",
                    command=commands.reconcile(sid, op_id),
                )
            )
            continue
        summary = f"{op.tool} ({op_id}) failed and took no effect: {op.error or 'no reason given'}"
        if retry is None:
            items.append(AttentionItem(kind="failed_effect", id=op_id, summary=summary))
            continue
        items.append(
            AttentionItem(
                kind="failed_effect",
                id=op_id,
                summary=summary + "; the session waits for you",
                command=commands.approve(sid, retry.approval_id) + "  (try it once more)",
                alternative=commands.reject(sid, retry.approval_id) + "  (go on without it)",
            )
        )
    return items, max(0, len(failed) - LIST_LIMIT)


def briefing(
    state: SessionState,
    *,
    locate: Callable[[ArtifactRef], str] | None = None,
    artifact_store: str = "",
    record: str = "",
    liveness: Liveness | None = None,
    sandboxes: Sequence[SandboxItem] = (),
    budgets: Mapping[str, int] | None = None,
) -> Briefing:
    """`locate` turns an artifact ref into a download location (a path, or a presigned URL);
    without it the ref's own uri is shown. `artifact_store` names the store for the reader,
    `record` the event store when the reader would not look for it in the home. `liveness` says
    whether an attempt is alive (without it the record alone decides); `sandboxes` are the
    sandboxes as the caller observes them, one per subagent; `budgets` the limits of
    `spec.budgets` that are set, by their manifest name."""
    sid = state.session_id
    shown, omitted = _select_steps(state, STEP_LIMIT)
    steps = [
        StepItem(
            task_id=t.task_id,
            title=t.title,
            owner=t.owner,
            status=t.status,
            verified=t.status == TaskStatus.VERIFIED,
            deliverable=t.deliverable,
            round=t.round,
            reopened_because=t.reopened_because if t.status == TaskStatus.PLANNED and t.round > 1 else None,
        )
        for t in shown
    ]

    pending_by_operation = {a.operation_id: a for a in state.pending_approval_records()}
    running: list[RunningItem] = [
        RunningItem(kind="task", id=t.task_id, description=t.title or t.task_id, subagent=t.owner)
        for t in sorted((t for t in state.tasks.values() if t.status == TaskStatus.RUNNING), key=_plan_order)
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
            fetch=_fetch_items(sid, a),
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

    interruption = interruption_of(state, liveness)
    if interruption is not None:
        running = []  # nothing runs: what the dead attempt left open is listed under the interruption

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

    attention, attention_omitted = _attention(state)
    shown_changes = state.scope_changes[-SCOPE_CHANGE_LIMIT:]
    parts_by_step, scans = _scan_results(state, shown_changes)
    latest_effects = state.recent_external_operations[-LIST_LIMIT:]
    effects = [_effect_item(state, state.operations[op]) for op in latest_effects]
    effects_omitted = len(state.external_operations) - len(latest_effects)

    lc = state.lifecycle
    restored_from = next(
        (e.checkpoint_id for e in reversed(lc.recent) if e.kind == "restored" and e.checkpoint_id), None
    )
    failure = lc.last_recovery_failure
    recovery = RecoveryItem(
        attempt=lc.attempt,
        harness_lost=lc.harness_lost,
        restores=lc.restores,
        recovery_restores=lc.recovery_restores,
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

    return Briefing(
        session_id=sid,
        phase=phase_of(state, liveness),
        current_step=state.current_step,
        last_seq=state.last_seq,
        goal=state.request.goal,
        request_version=state.request.version,
        request_parts=dict(sorted(state.request.parts.items())),
        scope_changes=[_scope_change_item(state, scan, parts_by_step) for scan in scans],
        scope_changes_omitted=max(0, len(state.scope_changes) - SCOPE_CHANGE_LIMIT),
        rejections=[_rejection_item(state, r) for r in state.rejections[-SCOPE_CHANGE_LIMIT:]],
        rejections_omitted=max(0, len(state.rejections) - SCOPE_CHANGE_LIMIT),
        steps=steps,
        steps_omitted=omitted.total(),
        steps_omitted_done=omitted[TaskStatus.DONE],
        steps_omitted_verified=omitted[TaskStatus.VERIFIED],
        running=running,
        waiting_on_you=actions,
        needs_attention=attention,
        needs_attention_omitted=attention_omitted,
        effects=effects,
        effects_omitted=effects_omitted,
        waiting_on_external=external,
        ready_for_review=reviews,
        artifact_store=artifact_store,
        record=record,
        hypotheses=hypotheses,
        decisions=decisions,
        findings=findings,
        notes_omitted=h_omitted + d_omitted + f_omitted,
        hypotheses_omitted=h_omitted,
        decisions_omitted=d_omitted,
        findings_omitted=f_omitted,
        recovery=recovery,
        interruption=interruption,
        sandboxes=_sandbox_items(state, sandboxes),
        budgets=_budget_items(state, budgets or {}, liveness.now if liveness else None),
        checkpoints=_checkpoint_items(state),
        secrets_redacted=state.secrets_redacted,
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
# Liveness and resources


def _sandbox_items(state: SessionState, observed: Sequence[SandboxItem]) -> list[SandboxItem]:
    """The observed sandboxes, with what the record says of each (who started it, what its start
    recorded, what it was restored from); subagents the caller did not observe are listed from the
    record alone."""
    by_name = {item.subagent: item for item in observed}
    names = sorted(set(by_name) | set(state.subagents))
    items = []
    for name in names:
        record = state.subagents.get(name)
        item = by_name.get(name) or SandboxItem(subagent=name)
        if record is not None and record.sandbox_starts:
            item = item.model_copy(
                update={
                    "started_by_attempt": record.sandbox_attempt,
                    "recorded": record.sandbox_detail,
                    # The first restore only seeds a sandbox; a later one recovered it.
                    "restored_from": record.last_restored_from if record.sandbox_starts > 1 else None,
                }
            )
        items.append(item)
    return items


def _budget_items(state: SessionState, limits: Mapping[str, int], now: datetime | None) -> list[BudgetItem]:
    """Each budget that is set, with what the record shows used (model calls and tokens as
    recorded, steps completed, wall clock since the first event)."""
    finished_steps = sum(
        t.status in (TaskStatus.DONE, TaskStatus.VERIFIED)
        for t in state.tasks.values()
        if t.task_id != t.owner
    )
    used: dict[str, int | None] = {
        "maxModelCalls": state.model_calls,
        "maxTokens": state.input_tokens + state.output_tokens,
        "maxSteps": finished_steps,
        "maxWallClockS": int((now - state.started_at).total_seconds()) if now and state.started_at else None,
    }
    items = []
    for name, limit in limits.items():
        amount = used.get(name)
        if amount is None:
            continue
        items.append(BudgetItem(name=name, limit=limit, used=amount, left=max(0, limit - amount)))
    return items


def _checkpoint_items(state: SessionState) -> list[CheckpointItem]:
    items = []
    for key in sorted(state.verified_checkpoints):
        record = state.verified_checkpoints[key]
        cp = record.checkpoint
        items.append(
            CheckpointItem(
                checkpoint_id=cp.checkpoint_id,
                subagent=cp.subagent,
                seq=record.seq,
                covers_seq=cp.covers_seq,
                verification=cp.verification.command if cp.verification else None,
                next_step=cp.next_step,
            )
        )
    return items


# --------------------------------------------------------------------------------------------------
# Renderers


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip() if moment else "no expiry"


def _quoted(text: str | None, limit: int = 400) -> str:
    if text is None:
        return "(none)"
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _difference(d: RequestDifference) -> str:
    if d.before is None:
        return f"{d.part}: added {_quoted(d.after)}"
    if d.after is None:
        return f"{d.part}: removed (was {_quoted(d.before)})"
    return f"{d.part}: {_quoted(d.before)} -> {_quoted(d.after)}"


def _verdict(v: StepVerdict) -> str:
    again = f", round {v.round}" if v.round > 1 else ""
    return f"{v.step} [now {v.status.value}{again}]: {v.why}"


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
    rows += _interruption_rows(b)
    if b.record:
        head("Record")
        item(f"events: {b.record}")
        item(f"artifacts: {b.artifact_store}")
    head(f"Asked (request v{b.request_version})")
    item(b.goal or "(no request recorded)")
    for name, text in b.request_parts.items():
        item(f"{name}: {text}", 2)
    if b.scope_changes:
        head("Scope changes")
        if b.scope_changes_omitted:
            item(f"... {b.scope_changes_omitted} earlier changes not shown")
        for index, c in enumerate(b.scope_changes):
            who = f" by {c.by}" if c.by else ""
            when = f" at {_when(c.at)}" if c.at else ""
            item(f"v{c.request_version}{when}{who}: {c.summary}")
            differences = [_difference(d) for d in c.changes]
            if index < len(b.scope_changes) - 1:
                # An earlier change in two lines, so the page holds them all; --json has every detail.
                steps = ", ".join(v.step for v in c.invalid_steps)
                if c.invalid_steps_omitted:
                    steps += f" and {c.invalid_steps_omitted:,} more"
                redone = f"; redone: {steps}" if steps else ""
                item("; ".join(differences) + f"; made {c.invalidated_count} results invalid{redone}", 2)
                continue
            for difference in differences:
                item(difference, 2)
            invalid = [_verdict(v) for v in c.invalid_steps]
            if c.invalid_steps_omitted:
                invalid.append(f"... and {c.invalid_steps_omitted:,} more steps")
            invalid += [f"{o.label} ({o.source}): {o.why}" for o in c.invalid_outputs]
            if c.invalid_outputs_omitted:
                invalid.append(f"... and {c.invalid_outputs_omitted} more")
            if invalid:
                item(f"made invalid ({c.invalidated_count} results; the steps are redone):", 2)
            elif c.invalidated_count:
                item(
                    f"made invalid: {c.invalidated_count} intermediate results, no step, artifact or note", 2
                )
            else:
                item("made invalid: nothing", 2)
            for line in invalid:
                item(line, 3)
            reusable = [_verdict(v) for v in c.reusable_steps]
            if c.reusable_steps_omitted:
                reusable.append(f"... and {c.reusable_steps_omitted} more steps")
            reusable += [f"{o.label} ({o.source})" for o in c.reusable_outputs]
            if c.reusable_outputs_omitted:
                reusable.append(f"... and {c.reusable_outputs_omitted} more")
            item("still reusable:" if reusable else "still reusable: nothing", 2)
            for line in reusable:
                item(line, 3)
    if b.rejections:
        head("Rejections")
        if b.rejections_omitted:
            item(f"... {b.rejections_omitted} earlier rejections not shown")
        for rejection in b.rejections:
            who = f" by {rejection.by}" if rejection.by else ""
            when = f" at {_when(rejection.at)}" if rejection.at else ""
            what = "deliverable" if rejection.kind == "deliverable" else "operation awaiting approval"
            reason = rejection.reason or "no reason given"
            item(
                f"{rejection.item} ({what}, sha256 {_short(rejection.sha256)}) rejected{who}{when}: {reason}"
            )
            for v in rejection.steps:
                item("redo " + _verdict(v).split(": ", 1)[0], 2)

    head("Steps")
    if b.steps_omitted:
        item(
            f"... {b.steps_omitted} earlier steps not shown "
            f"({b.steps_omitted_done} done, {b.steps_omitted_verified} verified)"
        )
    for s in b.steps:
        owner = f" [{s.owner}]" if s.owner else ""
        deliverable = f" -> {s.deliverable}" if s.deliverable else ""
        again = f" (round {s.round})" if s.round > 1 else ""
        item(f"{s.status.value:<9} {s.task_id}: {s.title or s.task_id}{owner}{deliverable}{again}")
        if s.reopened_because:
            item(f"to redo: {s.reopened_because}", 2)
    if not b.steps:
        item("no plan recorded")

    head("Running now")
    for r in b.running:
        who = f" [{r.subagent}]" if r.subagent else ""
        item(f"{r.kind} {r.id}: {r.description}{who}")
    if b.interruption is not None:
        item(f"nothing: attempt {b.interruption.attempt} is interrupted (see above)")
    elif not b.running:
        item("nothing")

    head("Waiting on you")
    for a in b.waiting_on_you:
        item(f"{a.kind} {a.id}: {a.summary}")
        if a.payload_sha256:
            item(f"payload sha256 {a.payload_sha256}, expires {_when(a.expires_at)}", 2)
        for f in a.fetch:
            item(f"read {f.what}: {f.command}  ({f.size} bytes, sha256 {f.sha256})", 2)
        item(f"run: {a.command}" + (f"  (or: {a.alternative})" if a.alternative else ""), 2)
    if not b.waiting_on_you:
        item("nothing")

    head("Needs attention")
    if b.needs_attention_omitted:
        item(
            f"... {b.needs_attention_omitted:,} earlier failed effects not shown; "
            f"`{commands.events(b.session_id)}` lists every one"
        )
    for attention in b.needs_attention:
        item(f"{attention.kind.replace('_', ' ')} {attention.id}: {attention.summary}")
        if attention.command:
            alternative = f"  (or: {attention.alternative})" if attention.alternative else ""
            item(f"run: {attention.command}{alternative}", 2)
    if not b.needs_attention:
        item("nothing")

    if b.effects:
        head("Effects in the world")
        if b.effects_omitted:
            item(f"... {b.effects_omitted} earlier effects not shown")
        for effect in b.effects:
            made = f" -> {effect.ref}" if effect.ref else ""
            when = f" at {_when(effect.at)}" if effect.at else ""
            detail = f": {effect.detail}" if effect.detail else ""
            item(f"{effect.outcome:<7} {effect.tool} {effect.operation_id}{made}{when}{detail}")

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
            stale = f" (invalid: {n.invalid_because})" if n.invalid_because else ""
            item(f"{n.note_id} [{n.status}]: {n.text}{stale}")
        if not notes:
            item("none")

    rows += _recovery_rows(b)
    rows += _resource_rows(b)
    rows += _redaction_rows(b)
    rows += _remote_rows(b)
    return rows


Row = tuple[int, str, str]


def _when_exactly(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if moment else "an unknown time"


def _interruption_rows(b: Briefing) -> list[Row]:
    """First thing after the heading: no attempt is alive, since when, and what to do."""
    gone = b.interruption
    if gone is None:
        return []
    title = f"{b.phase.value} since {_when_exactly(gone.since)}: {gone.why}"
    rows: list[Row] = [(0, title, title)]
    rows.append((1, "", f"it was doing: {gone.doing}"))
    for op in gone.operations:
        who = f" [{op.subagent}]" if op.subagent else ""
        rows.append((1, "", f"operation {op.operation_id} ({op.tool}{who}): {op.settled}"))
    if gone.operations_omitted:
        rows.append((1, "", f"... and {gone.operations_omitted} more operations"))
    rows.append((1, "", f"next: {gone.next}"))
    if gone.command:
        rows.append((2, "", f"run: {gone.command}"))
    return rows


def _recovery_rows(b: Briefing) -> list[Row]:
    """What happened to the attempts: only what did happen."""
    rec = b.recovery
    rows: list[Row] = [(0, "Attempts and recovery", "Attempts and recovery")]
    happened = []
    if rec.harness_lost:
        happened.append(f"harness lost {rec.harness_lost}x")
    if rec.sandbox_replaced:
        happened.append(f"sandboxes replaced {rec.sandbox_replaced}x")
    if rec.recovery_restores:
        restored = ""
        if rec.restored_from:
            restored = (
                f" from {rec.restored_from}"
                if rec.recovery_restores == 1
                else f" (last from {rec.restored_from})"
            )
        happened.append(f"restored {rec.recovery_restores}x{restored}")
    if rec.recovery_failures:
        happened.append(f"recovery failures {rec.recovery_failures}")
    attempt = f"attempt {rec.attempt}" + (" (interrupted, see above)" if b.interruption else "")
    happened = happened or ["no attempt lost, no sandbox replaced"]
    rows.append((1, "", f"{attempt}; " + "; ".join(happened)))
    if rec.last_failure:
        rows.append((2, "", f"last recovery failure: {rec.last_failure}"))
    if rec.unknown_outcomes:
        rows.append(
            (
                1,
                "",
                "unknown outcomes to reconcile: "
                + ", ".join(f"{u.operation_id} ({u.tool})" for u in rec.unknown_outcomes),
            )
        )
    if rec.reconciled:
        rows.append((1, "", "reconciled: " + ", ".join(rec.reconciled)))
    for cp in b.checkpoints:
        verification = f", verified by `{cp.verification}`" if cp.verification else ""
        nxt = f", next step {cp.next_step}" if cp.next_step else ""
        owner = f"{cp.subagent}: " if cp.subagent else ""
        rows.append(
            (
                1,
                "",
                f"last verified checkpoint {owner}{cp.checkpoint_id} "
                f"(covers seq {cp.covers_seq}{verification}{nxt})",
            )
        )
    if not b.checkpoints:
        rows.append((1, "", "no verified checkpoint yet"))
    return rows


def _resource_rows(b: Briefing) -> list[Row]:
    """Each subagent's sandbox and the budgets."""
    if not b.sandboxes and not b.budgets:
        return []
    rows: list[Row] = [(0, "Resources", "Resources")]
    for sandbox in b.sandboxes:
        state = {True: "alive", False: "not running", None: "not observed"}[sandbox.alive]
        facts = [
            f
            for f in (sandbox.where, f"profile {sandbox.network_profile}" if sandbox.network_profile else "")
            if f
        ]
        started = f"; started by attempt {sandbox.started_by_attempt}" if sandbox.started_by_attempt else ""
        restored = f", restored from {sandbox.restored_from}" if sandbox.restored_from else ""
        text = f"sandbox {sandbox.subagent}: {state}" + (f" ({', '.join(facts)})" if facts else "")
        rows.append((1, "", text + started + restored))
        if sandbox.recorded:
            rows.append((2, "", f"recorded: {sandbox.recorded}"))
    for budget in b.budgets:
        rows.append(
            (1, "", f"budget {budget.name}: {budget.used} used, {budget.left} left of {budget.limit}")
        )
    return rows


def _redaction_rows(b: Briefing) -> list[Row]:
    """A line for the secrets kept out of the record (`belay.harness.redaction`), when any were."""
    if not b.secrets_redacted:
        return []
    count = b.secrets_redacted
    what = f"{count} secret{'s' if count != 1 else ''} redacted"
    return [
        (0, "Secrets", "Secrets"),
        (1, "", f"{what} from tool requests and results before they were recorded"),
    ]


def _remote_rows(b: Briefing) -> list[Row]:
    """Each managed executor's remote session: its id, the endpoint used, what went through it."""
    if not b.remote_sessions:
        return []
    rows: list[Row] = [(0, "Managed executors", "Managed executors")]
    for remote in b.remote_sessions:
        where = f"{remote.executor} session {remote.remote_session_id} at {remote.endpoint}"
        rows.append((1, "", f"{remote.subagent}: {where}"))
        counts = (
            f"{remote.calls} calls asked for, {remote.delivered} results delivered, "
            f"{remote.refused} refused for their arguments, {remote.interruptions} interruptions"
        )
        rows.append((2, "", counts + (f"; failed: {remote.failure}" if remote.failure else "")))
    return rows


def render_rows(b: Briefing) -> list[tuple[int, str]]:
    """(level, text) rows for a renderer elsewhere (the HTML report): level 0 is a section
    heading, 1 an entry, 2 a detail under an entry."""
    return [(level, text) for level, _, text in _lines(b)]


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
