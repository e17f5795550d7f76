"""The briefing's scope changes and rejections: for each one shown, what it made invalid and what
stays reusable, and why.

The briefing keeps what it shows, not the history: one pass over the results serves every change
shown, streamed (`SnapshotMap.items`), keeping only the records shown and counting the rest.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from belay.journal.events import TaskStatus
from belay.journal.state import RejectionRecord, ResultRecord, ScopeChangeRecord, SessionState, TaskRecord
from belay.views.briefing.model import (
    LIST_LIMIT,
    RESULT_LIMIT,
    STEP_LIMIT,
    OutputVerdict,
    RejectionItem,
    RequestDifference,
    ScopeChangeItem,
    StepVerdict,
)


def plan_order(task: TaskRecord) -> tuple[int, str]:
    return task.first_seq, task.task_id


def step_verdict(state: SessionState, step: str, why: str) -> StepVerdict:
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


def _collected_from_reopened(
    state: SessionState, result: ResultRecord, change: ScopeChangeRecord
) -> str | None:
    """For a deliverable collected from a child session (`<child>/<its name>`) whose child the
    change reopens (by the rule that reopens it, `SessionLinkRecord.depends_on`): why it is not
    reusable. None for any other result."""
    child, _, own_name = result.label.partition("/")
    link = state.children.get(child) if result.source == "artifact" and own_name else None
    if link is None or not link.depends_on((*change.changed_parts, *change.removed_parts)):
        return None
    return (
        f"child session {child} depends on {link.part}, changed in v{change.request_version}: "
        "it makes this deliverable again, these bytes no longer stand"
    )


class _ChangeScan:
    """What one pass over the results finds for one scope change: its notable invalidated outputs
    (the first LIST_LIMIT in the order the change recorded them), why each shown step was redone,
    and its notable reusable outputs (the LIST_LIMIT recorded last before it); only those records
    are kept, the rest are counted."""

    def __init__(self, change: ScopeChangeRecord) -> None:
        self.change = change
        self.position = {result_id: i for i, result_id in enumerate(change.invalidated)}
        self.shown_steps = list(change.reopened_steps[:STEP_LIMIT])
        self.why: dict[str, tuple[int, str]] = {}  # shown step -> (position, reason)
        self.invalid: list[tuple[int, str, ResultRecord, str]] = []  # a max-heap on -position
        self.invalid_count = 0
        self.children_outputs = 0  # collected from a child the change reopens: invalid, not reusable
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
                self._invalid(position, result, result.invalid_because or "invalid")
        elif result.seq < self.change.seq and result.valid and _notable(result, state):
            # A child's deliverable the coordinator collected stands only while the child does.
            redone = _collected_from_reopened(state, result, self.change)
            if redone is not None:
                self._invalid(len(self.position) + result.seq, result, redone)
                self.children_outputs += 1
                return
            self.reusable_count += 1
            heapq.heappush(self.reusable, (result.seq, result.result_id, result))
            if len(self.reusable) > LIST_LIMIT:
                heapq.heappop(self.reusable)

    def _invalid(self, position: int, result: ResultRecord, why: str) -> None:
        self.invalid_count += 1
        heapq.heappush(self.invalid, (-position, result.result_id, result, why))
        if len(self.invalid) > LIST_LIMIT:
            heapq.heappop(self.invalid)


def scan_results(
    state: SessionState, changes: Sequence[ScopeChangeRecord]
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
    state: SessionState, change: ScopeChangeRecord, parts_by_step: dict[str, set[str]]
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

    shown = heapq.nsmallest(STEP_LIMIT, reusable(), key=plan_order)
    verdicts = []
    for task in shown:
        parts = parts_of(task)
        why = (
            f"depends on {', '.join(parts)} only: unchanged" if parts else "depends on no part of the request"
        )
        verdicts.append(step_verdict(state, task.task_id, why))
    return verdicts, count - len(shown)


def scope_change_item(
    state: SessionState, scan: _ChangeScan, parts_by_step: dict[str, set[str]]
) -> ScopeChangeItem:
    change = scan.change
    invalid_outputs = [
        OutputVerdict(
            result_id=r.result_id,
            label=_output_label(r, state),
            source=_output_source(r, state),
            why=why,
        )
        for _, _, r, why in sorted(scan.invalid, reverse=True)
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
        invalidated_count=len(change.invalidated) + scan.children_outputs,
        by=change.by,
        at=change.at,
        changes=[RequestDifference(part=c.part, before=c.before, after=c.after) for c in change.changes],
        invalid_steps=[
            step_verdict(
                state,
                step,
                scan.why[step][1] if step in scan.why else "it was under way on what changed: done again",
            )
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


def rejection_item(state: SessionState, rejection: RejectionRecord) -> RejectionItem:
    why = f"{rejection.item} rejected" + (f": {rejection.reason}" if rejection.reason else "")
    return RejectionItem(
        kind=rejection.kind,
        item=rejection.item,
        sha256=rejection.sha256,
        reason=rejection.reason,
        by=rejection.by,
        at=rejection.at,
        steps=[step_verdict(state, step, why) for step in rejection.reopened_steps],
        invalidated_count=len(rejection.invalidated),
        child=_reopened_child(state, rejection),
    )


def _reopened_child(state: SessionState, rejection: RejectionRecord) -> str:
    """The child session a rejection of a deliverable collected from it (`<child>/<name>`) reopened."""
    child, _, own_name = rejection.item.partition("/")
    return child if rejection.kind == "deliverable" and own_name and child in state.children else ""
