"""Results and what invalidates them: each result keeps the inputs it was derived from, so a scope
change (or a rejection) marks exactly what depended on what it touched, transitively, and reopens
the steps that made it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from immutables import Map

from belay.journal.events import DerivedFrom, TaskStatus, WaitKind
from belay.journal.state.building import Updates, new_record, push_recent, replaced
from belay.journal.state.records import (
    TASK_HISTORY_LIMIT,
    ApprovalRecord,
    CheckpointRecord,
    Lifecycle,
    ResultRecord,
    ResultSource,
    SubagentRecord,
    TaskRecord,
    TaskTransition,
    WaitRecord,
)
from belay.journal.state.session import SessionState


def register_result(
    s: SessionState,
    updates: dict[str, Any],
    *,
    result_id: str,
    source: ResultSource,
    label: str,
    seq: int,
    derived_from: DerivedFrom | None,
    output_sha256: str | None = None,
    step: str | None = None,
) -> None:
    """Record a result and its inputs in `updates`. A result built on inputs that a scope change
    already replaced (an older request version of a changed part, an invalid upstream) is recorded
    as invalid at once, naming the request version that made it so."""
    results: Map[str, ResultRecord] = updates.get("results", s.results)
    result_of_artifact: Map[str, str] = updates.get("result_of_artifact", s.result_of_artifact)
    previous = results.get(result_id)
    outputs: tuple[str, ...] = previous.outputs if previous is not None else ()
    if output_sha256 is not None and output_sha256 not in outputs:
        outputs = (*outputs, output_sha256)
        updates["result_of_artifact"] = result_of_artifact.set(output_sha256, result_id)

    invalidated_by: int | None = None
    invalidated_seq: int | None = None
    because = ""
    if derived_from is None and previous is not None:
        # An artifact naming an existing result adds an output; it does not erase its inputs.
        derived_from = previous.derived_from
        invalidated_by = previous.invalidated_by_version
        invalidated_seq = previous.invalidated_seq
        because = previous.invalid_because
    elif derived_from is not None:
        for part in derived_from.request_parts:
            changed_in = s.part_changed_in_version.get(part)
            if (
                changed_in is not None
                and derived_from.request_version is not None
                and changed_in > derived_from.request_version
            ):
                invalidated_by = max(invalidated_by or 0, changed_in)
                because = f"built on request v{derived_from.request_version}; {part} changed in v{changed_in}"
        upstream_ids = [*derived_from.results]
        upstream_ids.extend(result_of_artifact.get(sha, "") for sha in derived_from.artifacts)
        for upstream_id in upstream_ids:
            upstream = results.get(upstream_id)
            if upstream is not None and not upstream.valid:
                if upstream.invalidated_by_version is not None:
                    invalidated_by = max(invalidated_by or 0, upstream.invalidated_by_version)
                invalidated_seq = max(invalidated_seq or 0, upstream.invalidated_seq or 0) or None
                because = because or f"built on {upstream.label}, which is invalid"
    # A tool result naming the result its artifact or note opened keeps the more telling label.
    if previous is not None and previous.source != "tool_result" and source == "tool_result":
        source, label = previous.source, previous.label

    updates["results"] = results.set(
        result_id,
        new_record(
            ResultRecord,
            result_id=result_id,
            source=source,
            label=label,
            seq=seq,
            derived_from=derived_from,
            outputs=outputs,
            invalidated_by_version=invalidated_by,
            step=step or (previous.step if previous is not None else None),
            invalidated_seq=invalidated_seq,
            invalid_because=because,
        ),
    )
    updates["recent_results"] = push_recent(s.recent_results, result_id)


def invalidate(
    s: SessionState, touched_parts: Iterable[str], version: int, seq: int = 0
) -> tuple[Map[str, ResultRecord], tuple[str, ...]]:
    """Mark exactly the valid results that depend on a touched part, directly or through upstream
    results and the artifacts they produced. Returns the new results map and the ids, by seq."""
    touched = set(touched_parts)
    if not touched:
        return s.results, ()
    direct = {}
    for record in s.results.values():
        inputs = record.derived_from
        if inputs is not None and record.valid:
            hit = sorted(touched.intersection(inputs.request_parts))
            if hit:
                direct[record.result_id] = f"depends on {', '.join(hit)}, changed in v{version}"
    return invalidate_from(s.results, direct, seq=seq, version=version)


def running_on(s: SessionState, touched_parts: Iterable[str]) -> tuple[str, ...]:
    """The steps running when a scope change touches what they depend on (a step that named no
    inputs depends on all of the request). What such a step does next would answer the old request
    (a wait on CI ends for the old patch), so it is reopened like a finished one."""
    touched = set(touched_parts)
    return tuple(
        task.task_id
        for task in s.tasks.values()
        if task.task_id not in s.subagents
        and task.status == TaskStatus.RUNNING
        and (task.request_parts is None or touched.intersection(task.request_parts))
    )


def invalidate_from(
    results: Map[str, ResultRecord], direct: dict[str, str], *, seq: int, version: int | None
) -> tuple[Map[str, ResultRecord], tuple[str, ...]]:
    """Mark the results in `direct` (id -> why) invalid, and every valid result derived from them
    through upstream results and the artifacts they produced ("built on ...").

    Scope changes and rejections are rare, so this walks all results once to build the dependency
    graph rather than keeping reverse indexes up to date on every event (which would cost two more
    map updates per recorded result)."""
    if not direct:
        return results, ()
    dependents: dict[str, list[str]] = {}
    for record in results.values():
        inputs = record.derived_from
        if inputs is None:
            continue
        for upstream in inputs.results:
            dependents.setdefault(upstream, []).append(record.result_id)
        for sha in inputs.artifacts:
            dependents.setdefault("sha256:" + sha, []).append(record.result_id)
    marked: dict[str, int] = {}
    # Every direct hit first, so a result that is both keeps the direct reason.
    frontier: list[tuple[str, str]] = [(result_id, why) for result_id, why in direct.items()]
    position = 0
    while position < len(frontier):
        result_id, why = frontier[position]
        position += 1
        found = results.get(result_id)
        if found is None or result_id in marked or not found.valid:
            continue
        marked[result_id] = found.seq
        fields: dict[str, Any] = {"invalidated_seq": seq, "invalid_because": why}
        if version is not None:
            fields["invalidated_by_version"] = version
        results = results.set(result_id, replaced(found, fields))
        built_on = f"built on {found.label}"
        frontier.extend((d, built_on) for d in dependents.get(result_id, ()))
        for sha in found.outputs:
            frontier.extend((d, built_on) for d in dependents.get("sha256:" + sha, ()))
    ordered = tuple(sorted(marked, key=lambda r: (marked[r], r)))
    return results, ordered


def reopen(
    s: SessionState,
    updates: Updates,
    *,
    invalidated: Iterable[str],
    steps: Iterable[str] = (),
    seq: int,
    because: str,
    by_rejection: bool,
) -> tuple[str, ...]:
    """Reopen the steps whose results became invalid (and `steps`, named outright): each goes back
    to planned for its next round, its subagent's task with it; their deliverables are withdrawn;
    a completed session is open again. Returns the reopened step ids, in plan order."""
    results: Map[str, ResultRecord] = updates.get("results", s.results)
    invalid_ids = set(invalidated)
    reopened = _steps_to_reopen(results, updates.get("tasks", s.tasks), invalid_ids, steps)
    if reopened:
        _reopen_steps(s, updates, reopened, seq=seq, because=because, by_rejection=by_rejection)
        _reopen_session(s, updates, seq=seq, because=because)
        reopened_ids = [t.task_id for t in reopened]
        withdraw_external_waits(s, updates, reopened_ids, seq=seq, because=because)
        _withdraw_pending_approvals(s, updates, reopened_ids, seq=seq, because=because)
    _withdraw_deliverables(s, updates, invalid_ids, seq=seq, because=because)
    forget_invalid_checkpoints(s, updates, results)
    return tuple(t.task_id for t in reopened)


def _steps_to_reopen(
    results: Map[str, ResultRecord], tasks: Map[str, TaskRecord], invalid_ids: set[str], steps: Iterable[str]
) -> list[TaskRecord]:
    """The steps that made an invalid result and those named outright, in plan order; a
    cancelled step stays cancelled."""
    named = set(steps)
    for result_id in invalid_ids:
        step = results[result_id].step if result_id in results else None
        if step:
            named.add(step)
    return sorted(
        (tasks[t] for t in named if t in tasks and tasks[t].status != TaskStatus.CANCELLED),
        key=lambda t: (t.first_seq, t.task_id),
    )


def _back_to_planned(task: TaskRecord, seq: int, because: str, **more: Any) -> TaskRecord:
    transition = new_record(TaskTransition, seq=seq, status=TaskStatus.PLANNED, detail=because)
    return replaced(
        task,
        {
            "status": TaskStatus.PLANNED,
            "last_seq": seq,
            "verification": None,
            "verification_detail": "",
            "history": (*task.history, transition)[-TASK_HISTORY_LIMIT:],
            "transitions": task.transitions + 1,
            **more,
        },
    )


def _reopen_steps(
    s: SessionState,
    updates: Updates,
    reopened: list[TaskRecord],
    *,
    seq: int,
    because: str,
    by_rejection: bool,
) -> None:
    """Each step back to planned for its next round; the finished task of its subagent back to
    planned too, and the subagent marked as reopened (a sandbox prepared before holds invalid work)."""
    tasks: Map[str, TaskRecord] = updates.get("tasks", s.tasks)
    for task in reopened:
        next_round = {
            "round": task.round + 1,
            "reopened_seq": seq,
            "reopened_because": because,
            "reopened_by_rejection": by_rejection,
        }
        tasks = tasks.set(task.task_id, _back_to_planned(task, seq, because, **next_round))
    subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
    for owner in sorted({task.owner for task in reopened if task.owner}):
        subtask = tasks.get(owner)
        if subtask is not None and subtask.status in (TaskStatus.DONE, TaskStatus.VERIFIED):
            tasks = tasks.set(owner, _back_to_planned(subtask, seq, because))
        if owner in subagents:
            subagents = subagents.set(owner, replaced(subagents[owner], {"reopened_seq": seq}))
    updates["tasks"], updates["subagents"] = tasks, subagents


def _withdraw_deliverables(
    s: SessionState, updates: Updates, invalid_ids: set[str], *, seq: int, because: str
) -> None:
    """A deliverable whose result is invalid is withdrawn: no longer published, no longer for review."""
    deliverables: Map[str, int] = updates.get("deliverables", s.deliverables)
    waits: Map[str, WaitRecord] = updates.get("waits", s.waits)
    open_waits: Map[str, int] = updates.get("open_waits", s.open_waits)
    for name in list(deliverables):
        artifact = s.artifacts.get(name)
        if artifact is None or artifact.result_id not in invalid_ids:
            continue
        deliverables = deliverables.delete(name)
        for wait_id in [w for w in open_waits if waits[w].artifact == name]:
            if waits[wait_id].kind == WaitKind.READY_FOR_REVIEW:
                open_waits = open_waits.delete(wait_id)
                withdrawn = {"resolved": True, "last_seq": seq, "reason": f"withdrawn: {because}"}
                waits = waits.set(wait_id, replaced(waits[wait_id], withdrawn))
        updates["deliverables"], updates["waits"], updates["open_waits"] = deliverables, waits, open_waits


# The waits a call opens, by the call's tool: the kind its wait has.
WAITING_TOOLS = {"wait_on_external": WaitKind.ON_EXTERNAL, "wait_on_user": WaitKind.ON_USER}


def withdraw_external_waits(
    s: SessionState, updates: Updates, steps: Iterable[str], *, seq: int, because: str
) -> None:
    """An external condition a reopened step waits on (CI on the work the change made invalid),
    or a question it put to the person about that work, is no longer awaited: the wait ends
    withdrawn, so the step is done again at once, and a new wait, on the new work, is opened by its
    next round."""
    reopened = set(steps)
    waits: Map[str, WaitRecord] = updates.get("waits", s.waits)
    open_waits: Map[str, int] = updates.get("open_waits", s.open_waits)
    for operation_id in s.open_operations:
        operation = s.operations.get(operation_id)
        if operation is None or operation.tool not in WAITING_TOOLS or operation.step not in reopened:
            continue
        wait_id = f"wait-{operation_id}"  # the id the harness gives the wait its call opens
        if wait_id in open_waits and waits[wait_id].kind == WAITING_TOOLS[operation.tool]:
            open_waits = open_waits.delete(wait_id)
            withdrawn = {"resolved": True, "last_seq": seq, "reason": f"withdrawn: {because}"}
            waits = waits.set(wait_id, replaced(waits[wait_id], withdrawn))
    updates["waits"], updates["open_waits"] = waits, open_waits


def _withdraw_pending_approvals(
    s: SessionState, updates: Updates, steps: Iterable[str], *, seq: int, because: str
) -> None:
    """An approval asked for a call of a reopened step, and not yet decided, is withdrawn: the
    call was asked on the work the change made invalid, the person is no longer asked (an approval
    given now would bind a payload the step no longer sends), and the waiting call is answered
    'not run' so that its step makes its calls again."""
    reopened = set(steps)
    approvals: Map[str, ApprovalRecord] = updates.get("approvals", s.approvals)
    pending: Map[str, int] = updates.get("pending_approvals", s.pending_approvals)
    for approval_id in list(pending):
        record = approvals[approval_id]
        operation = s.operations.get(record.operation_id)
        if operation is None or operation.step not in reopened:
            continue
        pending = pending.delete(approval_id)
        withdrawn = {"withdrawn_seq": seq, "withdrawn_because": because}
        approvals = approvals.set(approval_id, replaced(record, withdrawn))
    updates["approvals"], updates["pending_approvals"] = approvals, pending


def _reopen_session(s: SessionState, updates: Updates, *, seq: int, because: str) -> None:
    """A completed session whose steps reopened is open again."""
    lc: Lifecycle = updates.get("lifecycle", s.lifecycle)
    if lc.completed:
        reopened = {"reopened": lc.reopened + 1, "reopened_seq": seq, "reopened_because": because}
        ended = {"completed": False, "end_reason": "", "end_detail": ""}
        updates["lifecycle"] = replaced(lc, {**ended, **reopened})


def forget_invalid_checkpoints(s: SessionState, updates: Updates, results: Map[str, ResultRecord]) -> None:
    """A verified checkpoint whose work is invalid now is no restore point: each subagent's last
    verified checkpoint, and the session's, fall back to the newest one still valid."""

    def valid(record: CheckpointRecord) -> bool:
        result = results.get(record.checkpoint.result_id) if record.checkpoint.result_id else None
        return result is None or result.valid

    verified = s.verified_checkpoints
    for owner, record in s.verified_checkpoints.items():
        if valid(record):
            continue
        earlier = [r for r in s.subagent_checkpoints.get(owner, ()) if r.verified and valid(r)]
        verified = verified.set(owner, earlier[-1]) if earlier else verified.delete(owner)
    if verified is s.verified_checkpoints:
        return
    updates["verified_checkpoints"] = verified
    latest = s.latest_verified_checkpoint
    if latest is not None and not valid(latest):
        updates["latest_verified_checkpoint"] = max(verified.values(), key=lambda r: r.seq, default=None)
