"""`SessionState`: a pure fold over a session's events.

`apply(state, event) -> state` and `fold(events, state=EMPTY) -> state` never mutate their input.
Folding one event at a time equals folding any split of the same events into batches, because a
batch is nothing but repeated `apply`.

How it stays pure without copying the state per event
------------------------------------------------------
Every collection that grows with history (operations, tasks, approvals, artifacts, notes, waits,
results, and the indexes over them) is a persistent hash array mapped trie (`immutables.Map`, the
structure CPython itself uses for `contextvars`). `Map.set` returns a new map that shares all but
O(log32 n) nodes with the old one, so applying an event costs a handful of small node copies plus
one new record for the entity it touches, independent of how many events came before. An old
`SessionState` stays valid and unchanged forever; it is never invalidated by a later `apply`.
Lists that a projection reads on every call (recent notes, recent results, recent lifecycle
entries, a task's status history) are small tuples capped at a fixed length, so copying them is
bounded too.

Records are frozen pydantic models. Time-dependent questions (has an approval expired?) are not
answered here: the state keeps the facts and the projections take `now` as an argument.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal, TypeVar

from immutables import Map
from pydantic import BaseModel, ConfigDict

from belay.journal.events import (
    ArtifactRef,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    Event,
    LifecycleKind,
    NoteKind,
    RemoteKind,
    TaskStatus,
    WaitKind,
    sha256_of,
)

# The goal is an implicit request part: a result that records `request_parts=("goal",)` is
# invalidated when a scope change rewrites the goal.
GOAL_PART = "goal"

RECENT_LIMIT = 32  # cap of every "recent ..." tuple kept for bounded-cost projections
TASK_HISTORY_LIMIT = 32  # status transitions kept per task (the count of all is kept beside)


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def operation_payload_sha256(tool: str, arguments: dict[str, Any]) -> str:
    """The hash an approval binds to when a tool request does not carry its own."""
    return sha256_of({"tool": tool, "arguments": arguments})


# --------------------------------------------------------------------------------------------------
# Records


class Request(Record):
    goal: str = ""
    parts: dict[str, str] = {}  # never mutated: a scope change builds a new dict
    version: int = 0
    seq: int = 0


class RequestChange(Record):
    """One part of the request (or the goal) as it was before a scope change and after it."""

    part: str
    before: str | None = None  # None: the part did not exist
    after: str | None = None  # None: the part was removed


class ScopeChangeRecord(Record):
    seq: int
    request_version: int
    summary: str
    goal: str | None = None
    changed_parts: tuple[str, ...] = ()
    removed_parts: tuple[str, ...] = ()
    invalidated: tuple[str, ...] = ()  # result ids this change made invalid, in recording order
    by: str = ""
    at: datetime | None = None
    changes: tuple[RequestChange, ...] = ()  # the difference in the request, goal first
    reopened_steps: tuple[str, ...] = ()  # steps to redo because their results became invalid


class RejectionRecord(Record):
    """A person turned down a deliverable or an operation awaiting approval, with the reason."""

    seq: int
    kind: Literal["deliverable", "approval"]
    item: str  # the deliverable's name, or the approval id
    sha256: str  # the bytes (deliverable) or the payload (approval) rejected
    reason: str
    by: str = ""
    at: datetime | None = None
    operation_id: str | None = None
    invalidated: tuple[str, ...] = ()
    reopened_steps: tuple[str, ...] = ()


class TaskTransition(Record):
    seq: int
    status: TaskStatus
    detail: str = ""


class TaskRecord(Record):
    task_id: str
    title: str = ""
    owner: str | None = None
    deliverable: str | None = None
    depends_on: tuple[str, ...] = ()
    status: TaskStatus
    first_seq: int
    last_seq: int
    history: tuple[TaskTransition, ...] = ()  # the last TASK_HISTORY_LIMIT transitions
    transitions: int = 0
    ever_verified: bool = False
    request_parts: tuple[str, ...] | None = None  # what the step depends on; None: all of it
    # A step is done once per round; a scope change or a rejection that invalidates its results
    # reopens it for the next round (its work is redone under new operation ids).
    round: int = 1
    reopened_seq: int | None = None
    reopened_because: str = ""
    reopened_by_rejection: bool = False


OutcomeState = Literal["unknown", "reconciled"]


class OperationRecord(Record):
    operation_id: str
    tool: str
    effect: EffectClass
    request_seq: int
    payload_sha256: str
    step: str | None = None
    subagent: str | None = None
    idempotency_key: str | None = None
    attempt: int = 0
    request_version: int = 0  # the request version the call was decided under
    result_seq: int | None = None
    result_at: datetime | None = None
    ok: bool | None = None
    error: str | None = None
    result_id: str | None = None
    effect_ref: str = ""  # what an external effect made (a ticket id), from its result
    outcome: OutcomeState | None = None
    outcome_seq: int | None = None
    reconciled_succeeded: bool | None = None
    outcome_detail: str = ""
    effects: tuple[str, ...] = ()  # what a reconcile probe found

    @property
    def has_result(self) -> bool:
        return self.result_seq is not None


Decision = Literal["granted", "rejected"]


class ApprovalRecord(Record):
    approval_id: str
    operation_id: str
    payload_sha256: str  # what was asked for (or, with no request, what was decided)
    tool: str = ""
    summary: str = ""
    requested_seq: int | None = None
    request_expires_at: datetime | None = None
    payload_ref: ArtifactRef | None = None
    content_ref: ArtifactRef | None = None
    content_name: str | None = None
    kind: Literal["dispatch", "retry"] = "dispatch"
    decision: Decision | None = None
    decided_seq: int | None = None
    decided_by: str = ""
    decision_reason: str = ""
    decision_payload_sha256: str | None = None
    decision_expires_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None


class ArtifactRecord(Record):
    name: str
    ref: ArtifactRef
    deliverable: bool = False
    subagent: str | None = None
    description: str = ""
    result_id: str | None = None
    seq: int


class NoteRecord(Record):
    note_id: str
    kind: NoteKind
    text: str
    status: str
    evidence: tuple[str, ...] = ()
    first_seq: int
    last_seq: int
    result_id: str | None = None  # the result its latest version is, when it records its inputs


class WaitRecord(Record):
    wait_id: str
    kind: WaitKind
    reason: str
    condition: str | None = None
    artifact: str | None = None
    resolved: bool = False
    opened_seq: int
    last_seq: int


class CheckpointRecord(Record):
    seq: int
    checkpoint: Checkpoint

    @property
    def verified(self) -> bool:
        return self.checkpoint.verified


ResultSource = Literal["tool_result", "artifact", "note", "checkpoint"]


class ResultRecord(Record):
    """Anything a later step may reuse, with the inputs it was derived from."""

    result_id: str
    source: ResultSource
    label: str
    seq: int
    derived_from: DerivedFrom | None = None
    outputs: tuple[str, ...] = ()  # sha256 of artifacts this result produced
    invalidated_by_version: int | None = None  # request version whose scope change invalidated it
    step: str | None = None  # the plan step that produced it, when known
    invalidated_seq: int | None = None  # the scope change or rejection that invalidated it
    invalid_because: str = ""

    @property
    def valid(self) -> bool:
        return self.invalidated_by_version is None and self.invalidated_seq is None


class LifecycleEntry(Record):
    seq: int
    kind: LifecycleKind
    attempt: int | None = None
    reason: str = ""
    detail: str = ""
    subagent: str | None = None
    checkpoint_id: str | None = None


class Lifecycle(Record):
    attempt: int = 0  # the highest harness attempt seen
    lease: int = 0
    harness_running: bool = False
    harness_starts: int = 0
    harness_lost: int = 0
    # Attempts that stopped cleanly when told to (harness_stopped): not lost, not counted against
    # recovery.maxAttempts.
    clean_stops: int = 0
    sandbox_replaced: int = 0
    sandboxes_lost: int = 0
    # Subagents whose sandbox was lost under a running attempt and is not restored yet.
    lost_sandboxes: tuple[str, ...] = ()
    restores: int = 0
    # Restores into a sandbox that replaced an earlier one (a new attempt's, or a lost sandbox's
    # replacement): the recoveries. The first restore of each subagent only seeds it.
    recovery_restores: int = 0
    recovery_failures: int = 0
    last_recovery_failure: LifecycleEntry | None = None
    recovering: bool = False  # a harness or a sandbox was lost and no restore has succeeded since
    completed: bool = False
    failed: bool = False
    end_reason: str = ""
    recent: tuple[LifecycleEntry, ...] = ()
    # A completed session whose work a scope change or a rejection invalidated is open again.
    reopened: int = 0
    reopened_seq: int | None = None
    reopened_because: str = ""


class SubagentRecord(Record):
    name: str
    first_seq: int
    sandbox_starts: int = 0
    sandbox_replacements: int = 0
    # Sandbox pods lost under a running attempt; the operator numbers each replacement pod by it.
    sandbox_losses: int = 0
    # The last scope change or rejection that reopened one of its steps: a sandbox prepared before
    # it holds work that is invalid now.
    reopened_seq: int | None = None
    sandbox_attempt: int | None = None  # the attempt that started the current sandbox
    sandbox_detail: str = ""  # what that start recorded (pid, profile, isolation)
    last_restored_from: str | None = None  # the checkpoint the current sandbox was restored from


class RemoteSessionRecord(Record):
    """The provider's session a managed executor holds for one subagent."""

    subagent: str
    executor: str
    remote_session_id: str
    endpoint: str = ""
    seq: int  # where it was recorded
    calls: int = 0  # calls the remote agent asked for
    refused: int = 0  # of which refused for arguments that do not fit
    delivered: int = 0  # results (and refusals) the provider accepted
    interruptions: int = 0  # cut streams and errors the executor went on after
    failure: str = ""  # why the remote session cannot go on, when it cannot
    last_detail: str = ""


class RemoteCallRecord(Record):
    """One call a remote agent asked for, by the operation id its tool request carries."""

    operation_id: str
    subagent: str
    call_id: str
    turn_id: str | None = None
    tool: str | None = None
    seq: int
    refused_seq: int | None = None
    refusal: str = ""
    delivered_seq: int | None = None
    idempotency_key: str | None = None  # the key the result was delivered under

    @property
    def delivered(self) -> bool:
        return self.delivered_seq is not None


class SessionLinkRecord(Record):
    """The other end of a link between sessions: the parent that started this session, or a
    child this session started for one part of its objective."""

    session: str
    part: str
    objective: str = ""
    operation_id: str = ""
    goal: str = ""
    plan: str = ""
    seq: int
    phase: str = ""  # a child that ended: how
    deliverables: tuple[tuple[str, str], ...] = ()  # an ended child's (name, sha256)


# --------------------------------------------------------------------------------------------------
# The state


def _empty_map() -> Map[Any, Any]:
    return Map()


class SessionState(BaseModel):
    """Everything the projections need, folded from the log. Build it with `fold` or `apply`."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    session_id: str = ""
    last_seq: int = 0
    event_count: int = 0

    request: Request = Request()
    scope_changes: tuple[ScopeChangeRecord, ...] = ()
    part_changed_in_version: Map[str, int] = _empty_map()
    rejections: tuple[RejectionRecord, ...] = ()

    tasks: Map[str, TaskRecord] = _empty_map()
    current_step: str | None = None

    operations: Map[str, OperationRecord] = _empty_map()
    open_operations: Map[str, int] = _empty_map()  # operation id -> request seq, no result yet
    external_operations: Map[str, int] = _empty_map()  # unsafe or keyed: effects in the world
    # The external operations a reader lists without walking them all: those whose latest result
    # failed (-> request seq), and the latest RECENT_LIMIT by request, oldest first.
    failed_external_operations: Map[str, int] = _empty_map()
    recent_external_operations: tuple[str, ...] = ()
    unknown_outcomes: Map[str, int] = _empty_map()  # operation id -> seq marked unknown
    reconciled_operations: Map[str, int] = _empty_map()  # operation id -> seq reconciled
    repeated_effects: Map[str, int] = _empty_map()  # operation id -> seq of a probe that found several

    approvals: Map[str, ApprovalRecord] = _empty_map()
    approvals_by_operation: Map[str, tuple[str, ...]] = _empty_map()
    pending_approvals: Map[str, int] = _empty_map()  # approval id -> requested seq

    artifacts: Map[str, ArtifactRecord] = _empty_map()  # by name, the latest version
    deliverables: Map[str, int] = _empty_map()  # name -> seq

    notes: Map[str, NoteRecord] = _empty_map()
    recent_notes: tuple[str, ...] = ()

    waits: Map[str, WaitRecord] = _empty_map()
    open_waits: Map[str, int] = _empty_map()  # wait id -> opened seq

    latest_checkpoint: CheckpointRecord | None = None
    latest_verified_checkpoint: CheckpointRecord | None = None
    # subagent -> its latest verified checkpoint ("" for checkpoints that name no subagent)
    verified_checkpoints: Map[str, CheckpointRecord] = _empty_map()
    checkpoint_count: int = 0
    subagent_checkpoints: Map[str, tuple[CheckpointRecord, ...]] = _empty_map()  # one per step

    lifecycle: Lifecycle = Lifecycle()
    subagents: Map[str, SubagentRecord] = _empty_map()

    results: Map[str, ResultRecord] = _empty_map()
    recent_results: tuple[str, ...] = ()
    result_of_artifact: Map[str, str] = _empty_map()  # artifact sha256 -> producing result id

    # Managed executors: the remote session of each subagent, and the remote calls by operation id.
    remote_sessions: Map[str, RemoteSessionRecord] = _empty_map()
    remote_calls: Map[str, RemoteCallRecord] = _empty_map()
    remote_resources: Map[str, str] = _empty_map()  # "<subagent>/<resource>" -> its remote id

    latest_summary_seq: int | None = None
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    secrets_redacted: int = 0  # in tool requests and results, before they were recorded
    # When the first and the last event were recorded: the record's own first and last signs of
    # life, for views that ask "since when" (a view compares them with its own `now`; the fold
    # never reads a clock).
    started_at: datetime | None = None
    last_event_at: datetime | None = None

    # The coordinator pattern: the session that started this one, and the sessions it started.
    parent: SessionLinkRecord | None = None
    children: Map[str, SessionLinkRecord] = _empty_map()  # by child session name

    # ---- queries that read indexes only (cheap at any history length)

    def operation(self, operation_id: str) -> OperationRecord | None:
        return self.operations.get(operation_id)

    def open_operation_records(self) -> list[OperationRecord]:
        ids = sorted(self.open_operations, key=lambda op: (self.open_operations[op], op))
        return [self.operations[op] for op in ids]

    def approvals_for(self, operation_id: str) -> list[ApprovalRecord]:
        """Every approval requested or decided for one operation, in the order first seen."""
        return [self.approvals[a] for a in self.approvals_by_operation.get(operation_id, ())]

    def pending_approval_records(self) -> list[ApprovalRecord]:
        ids = sorted(self.pending_approvals, key=lambda a: (self.pending_approvals[a], a))
        return [self.approvals[a] for a in ids]

    def open_wait_records(self) -> list[WaitRecord]:
        ids = sorted(self.open_waits, key=lambda w: (self.open_waits[w], w))
        return [self.waits[w] for w in ids]

    def invalid_results(self) -> list[ResultRecord]:
        return sorted((r for r in self.results.values() if not r.valid), key=lambda r: r.seq)

    def last_scope_change(self) -> ScopeChangeRecord | None:
        return self.scope_changes[-1] if self.scope_changes else None

    def checkpoint_valid(self, checkpoint: Checkpoint) -> bool:
        """A checkpoint whose work a scope change or a rejection invalidated is no restore point."""
        result = self.results.get(checkpoint.result_id) if checkpoint.result_id else None
        return result is None or result.valid

    def last_valid_checkpoint(self, subagent: str, *, verified: bool = False) -> CheckpointRecord | None:
        """The subagent's newest checkpoint that is still valid (and verified, if asked)."""
        for record in reversed(self.subagent_checkpoints.get(subagent, ())):
            if self.checkpoint_valid(record.checkpoint) and (record.verified or not verified):
                return record
        return None

    def external_operation_records(self) -> list[OperationRecord]:
        """Every external operation, by request: as long as the history (a reader that lists
        them uses `recent_external_operations` and `failed_external_operations`)."""
        ids = sorted(self.external_operations, key=lambda op: (self.external_operations[op], op))
        return [self.operations[op] for op in ids]

    def attention_operation_records(self) -> list[OperationRecord]:
        """The external operations whose outcome is unknown or whose latest result failed, by
        request: what a person may have to act on, read without walking every operation."""
        ids = {
            *self.failed_external_operations,
            *(o for o in self.unknown_outcomes if o in self.external_operations),
        }
        return [self.operations[op] for op in sorted(ids, key=lambda op: (self.external_operations[op], op))]


EMPTY = SessionState()


class FoldError(ValueError):
    """The events cannot belong to this state: another session, or a gap in seq."""


# --------------------------------------------------------------------------------------------------
# Helpers


def _push_recent(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    if items and items[-1] == item:
        return items
    if item in items:
        items = tuple(i for i in items if i != item)
    return (*items, item)[-RECENT_LIMIT:]


_M = TypeVar("_M", bound=BaseModel)


# Per record class: every field in declaration order with its default (required fields map to
# None until given), and the names of the required fields. Reading `model_fields` on every call
# would cost more than building the record.
_SHAPES: dict[type[BaseModel], tuple[dict[str, Any], frozenset[str]]] = {}


def _shape(cls: type[BaseModel]) -> tuple[dict[str, Any], frozenset[str]]:
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = cls.model_fields
        template = {
            name: None if info.is_required() else info.get_default(call_default_factory=True)
            for name, info in fields.items()
        }
        required = frozenset(name for name, info in fields.items() if info.is_required())
        shape = _SHAPES[cls] = (template, required)
    return shape


def _new(cls: type[_M], **fields: Any) -> _M:
    """Build a record from values that were validated already (they come from parsed events),
    skipping a second validation on the hot path of `apply`. Unknown or missing fields still fail."""
    template, required = _shape(cls)
    values = {**template, **fields}  # keeps declaration order, as validation would
    if len(values) != len(template) or not required.issubset(fields):
        unknown = sorted(set(fields) - template.keys())
        missing = sorted(required - fields.keys())
        raise TypeError(f"{cls.__name__}: unknown fields {unknown}, missing fields {missing}")
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", set(fields))
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def _replace(model: _M, updates: dict[str, Any]) -> _M:
    """`model_copy(update=...)` without its generic deep-copy machinery: records are frozen and
    their values immutable, so sharing them is safe, and this is the hot path of `apply`."""
    new = object.__new__(type(model))
    object.__setattr__(new, "__dict__", {**model.__dict__, **updates})
    object.__setattr__(new, "__pydantic_fields_set__", model.__pydantic_fields_set__)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def _register_result(
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
        _new(
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
    updates["recent_results"] = _push_recent(s.recent_results, result_id)


def _invalidate(
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
    return _invalidate_from(s.results, direct, seq=seq, version=version)


def _invalidate_from(
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
        results = results.set(result_id, _replace(found, fields))
        built_on = f"built on {found.label}"
        frontier.extend((d, built_on) for d in dependents.get(result_id, ()))
        for sha in found.outputs:
            frontier.extend((d, built_on) for d in dependents.get("sha256:" + sha, ()))
    ordered = tuple(sorted(marked, key=lambda r: (marked[r], r)))
    return results, ordered


def _reopen(
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
    tasks: Map[str, TaskRecord] = updates.get("tasks", s.tasks)
    invalid_ids = set(invalidated)
    named = set(steps)
    for result_id in invalid_ids:
        step = results[result_id].step if result_id in results else None
        if step:
            named.add(step)
    reopened = sorted(
        (tasks[t] for t in named if t in tasks and tasks[t].status != TaskStatus.CANCELLED),
        key=lambda t: (t.first_seq, t.task_id),
    )
    owners: set[str] = set()
    for task in reopened:
        transition = _new(TaskTransition, seq=seq, status=TaskStatus.PLANNED, detail=because)
        tasks = tasks.set(
            task.task_id,
            _replace(
                task,
                {
                    "status": TaskStatus.PLANNED,
                    "last_seq": seq,
                    "history": (*task.history, transition)[-TASK_HISTORY_LIMIT:],
                    "transitions": task.transitions + 1,
                    "round": task.round + 1,
                    "reopened_seq": seq,
                    "reopened_because": because,
                    "reopened_by_rejection": by_rejection,
                },
            ),
        )
        if task.owner:
            owners.add(task.owner)
    subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
    for owner in sorted(owners):
        subtask = tasks.get(owner)
        if subtask is not None and subtask.status in (TaskStatus.DONE, TaskStatus.VERIFIED):
            transition = _new(TaskTransition, seq=seq, status=TaskStatus.PLANNED, detail=because)
            tasks = tasks.set(
                owner,
                _replace(
                    subtask,
                    {
                        "status": TaskStatus.PLANNED,
                        "last_seq": seq,
                        "history": (*subtask.history, transition)[-TASK_HISTORY_LIMIT:],
                        "transitions": subtask.transitions + 1,
                    },
                ),
            )
        if owner in subagents:
            subagents = subagents.set(owner, _replace(subagents[owner], {"reopened_seq": seq}))
    if reopened:
        updates["tasks"] = tasks
        updates["subagents"] = subagents
    # A deliverable whose result is invalid is withdrawn: no longer published, no longer for review.
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
                waits = waits.set(wait_id, _replace(waits[wait_id], withdrawn))
        updates["deliverables"], updates["waits"], updates["open_waits"] = deliverables, waits, open_waits
    lc: Lifecycle = updates.get("lifecycle", s.lifecycle)
    if reopened and lc.completed:
        reopen = {"reopened": lc.reopened + 1, "reopened_seq": seq, "reopened_because": because}
        updates["lifecycle"] = _replace(lc, {"completed": False, "end_reason": "", **reopen})
    _forget_invalid_checkpoints(s, updates, results)
    return tuple(t.task_id for t in reopened)


def _forget_invalid_checkpoints(s: SessionState, updates: Updates, results: Map[str, ResultRecord]) -> None:
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


def _note_subagent(s: SessionState, updates: dict[str, Any], name: str | None, seq: int) -> None:
    if not name:
        return
    subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
    if name not in subagents:
        updates["subagents"] = subagents.set(name, _new(SubagentRecord, name=name, first_seq=seq))


# --------------------------------------------------------------------------------------------------
# One handler per event type. Each returns the fields of SessionState it changes.


Updates = dict[str, Any]


def _on_user_input(s: SessionState, e: Any) -> Updates:
    p = e.payload
    return {"request": _new(Request, goal=p.goal, parts=dict(p.parts), version=p.request_version, seq=e.seq)}


def _on_scope_change(s: SessionState, e: Any) -> Updates:
    p = e.payload
    old = s.request
    parts = dict(old.parts)
    changed = tuple(sorted(k for k, v in p.changed_parts.items() if old.parts.get(k) != v))
    removed = tuple(sorted(k for k in p.removed_parts if k in old.parts))
    parts.update(p.changed_parts)
    for k in removed:
        del parts[k]
    goal = old.goal
    touched = [*changed, *removed]
    differences = []
    if p.goal is not None and p.goal != old.goal:
        goal = p.goal
        touched.append(GOAL_PART)
        differences.append(_new(RequestChange, part=GOAL_PART, before=old.goal, after=p.goal))
    differences += [
        _new(RequestChange, part=k, before=old.parts.get(k), after=p.changed_parts[k]) for k in changed
    ]
    differences += [_new(RequestChange, part=k, before=old.parts[k], after=None) for k in removed]
    part_versions = s.part_changed_in_version
    for part in touched:
        part_versions = part_versions.set(part, p.request_version)
    results, invalidated = _invalidate(s, touched, p.request_version, e.seq)
    updates: Updates = {
        "request": _new(Request, goal=goal, parts=parts, version=p.request_version, seq=e.seq),
        "part_changed_in_version": part_versions,
        "results": results,
    }
    who = p.by or e.actor.name or e.actor.kind
    reopened = _reopen(
        s,
        updates,
        invalidated=invalidated,
        seq=e.seq,
        because=f"request v{p.request_version} ({who}): {p.summary}",
        by_rejection=False,
    )
    updates["scope_changes"] = (
        *s.scope_changes,
        _new(
            ScopeChangeRecord,
            seq=e.seq,
            request_version=p.request_version,
            summary=p.summary,
            goal=p.goal,
            changed_parts=changed,
            removed_parts=removed,
            invalidated=invalidated,
            by=who,
            at=e.created_at,
            changes=tuple(differences),
            reopened_steps=reopened,
        ),
    )
    return updates


def _on_model_output(s: SessionState, e: Any) -> Updates:
    p = e.payload
    updates: Updates = {"model_calls": s.model_calls + 1}
    if p.input_tokens or p.output_tokens:
        updates["input_tokens"] = s.input_tokens + p.input_tokens
        updates["output_tokens"] = s.output_tokens + p.output_tokens
    return updates


def _on_tool_request(s: SessionState, e: Any) -> Updates:
    p = e.payload
    subagent = p.subagent or e.actor.subagent
    record = _new(
        OperationRecord,
        operation_id=p.operation_id,
        tool=p.tool,
        effect=p.effect,
        request_seq=e.seq,
        payload_sha256=p.payload_sha256 or operation_payload_sha256(p.tool, p.arguments),
        step=p.step,
        subagent=subagent,
        idempotency_key=p.idempotency_key,
        attempt=e.actor.attempt,
        request_version=s.request.version,
    )
    updates: Updates = {
        "operations": s.operations.set(p.operation_id, record),
        "open_operations": s.open_operations.set(p.operation_id, e.seq),
    }
    if p.effect in (EffectClass.UNSAFE, EffectClass.KEYED) and p.operation_id not in s.external_operations:
        updates["external_operations"] = s.external_operations.set(p.operation_id, e.seq)
        recent = (*s.recent_external_operations, p.operation_id)
        updates["recent_external_operations"] = recent[-RECENT_LIMIT:]
    if p.step:
        updates["current_step"] = p.step
    if p.redactions:
        updates["secrets_redacted"] = s.secrets_redacted + p.redactions
    _note_subagent(s, updates, subagent, e.seq)
    return updates


def _operation_named(s: SessionState, e: Any, operation_id: str) -> OperationRecord:
    """The operation an event names. One whose request we never saw is still tracked (as unsafe,
    the cautious class), so its result or outcome closes it rather than being dropped."""
    existing = s.operations.get(operation_id)
    if existing is not None:
        return existing
    return _new(
        OperationRecord,
        operation_id=operation_id,
        tool="",
        effect=EffectClass.UNSAFE,
        request_seq=e.parent_seq or e.seq,
        payload_sha256="",
    )


def _on_tool_result(s: SessionState, e: Any) -> Updates:
    p = e.payload
    existing = _operation_named(s, e, p.operation_id)
    fields: dict[str, Any] = {
        "result_seq": e.seq,
        "result_at": e.created_at,
        "ok": p.ok,
        "error": p.error,
        "result_id": p.result_id,
    }
    updates: Updates = {}
    requested = s.external_operations.get(p.operation_id)
    if requested is not None:
        fields["effect_ref"] = _effect_ref(p.output) if p.ok else ""
        failed = s.failed_external_operations
        if not p.ok:
            updates["failed_external_operations"] = failed.set(p.operation_id, requested)
        elif p.operation_id in failed:
            updates["failed_external_operations"] = failed.delete(p.operation_id)
    record = _replace(existing, fields)
    updates["operations"] = s.operations.set(p.operation_id, record)
    if p.operation_id in s.open_operations:
        updates["open_operations"] = s.open_operations.delete(p.operation_id)
    if p.redactions:
        updates["secrets_redacted"] = s.secrets_redacted + p.redactions
    if p.result_id:
        _register_result(
            s,
            updates,
            result_id=p.result_id,
            source="tool_result",
            label=record.tool or p.operation_id,
            seq=e.seq,
            derived_from=p.derived_from,
            output_sha256=p.output_ref.sha256 if p.output_ref else None,
            step=record.step,
        )
    return updates


def _effect_ref(output: Any) -> str:
    """What an external effect made, as its system names it (a ticket's id), when it says."""
    if isinstance(output, dict):
        for key in ("id", "url", "key"):
            if isinstance(output.get(key), str | int):
                return str(output[key])
    return ""


def _on_approval_request(s: SessionState, e: Any) -> Updates:
    p = e.payload
    record = _new(
        ApprovalRecord,
        approval_id=p.approval_id,
        operation_id=p.operation_id,
        payload_sha256=p.payload_sha256,
        tool=p.tool,
        summary=p.summary,
        requested_seq=e.seq,
        request_expires_at=p.expires_at,
        payload_ref=p.payload_ref,
        content_ref=p.content_ref,
        content_name=p.content_name,
        kind=p.kind,
    )
    previous = s.approvals.get(p.approval_id)
    if previous is not None and previous.decision is not None:
        # A decision recorded before its request (e.g. declared in the spec) stays in force.
        record = _replace(
            record,
            {
                k: getattr(previous, k)
                for k in (
                    "decision",
                    "decided_seq",
                    "decided_by",
                    "decision_reason",
                    "decision_payload_sha256",
                    "decision_expires_at",
                )
            },
        )
    updates: Updates = {
        "approvals": s.approvals.set(p.approval_id, record),
        "approvals_by_operation": _add_approval_id(s, p.operation_id, p.approval_id),
    }
    if record.pending:
        updates["pending_approvals"] = s.pending_approvals.set(p.approval_id, e.seq)
    return updates


def _add_approval_id(s: SessionState, operation_id: str, approval_id: str) -> Map[str, tuple[str, ...]]:
    ids = s.approvals_by_operation.get(operation_id, ())
    if approval_id in ids:
        return s.approvals_by_operation
    return s.approvals_by_operation.set(operation_id, (*ids, approval_id))


def _on_approval(s: SessionState, e: Any) -> Updates:
    p = e.payload
    previous = s.approvals.get(p.approval_id)
    decision: Decision = "granted" if p.granted else "rejected"
    fields = {
        "decision": decision,
        "decided_seq": e.seq,
        "decided_by": p.by,
        "decision_reason": p.reason,
        "decision_payload_sha256": p.payload_sha256,
        "decision_expires_at": p.expires_at,
    }
    if previous is None:
        record = _new(
            ApprovalRecord,
            approval_id=p.approval_id,
            operation_id=p.operation_id,
            payload_sha256=p.payload_sha256,
            **fields,
        )
    else:
        record = _replace(previous, fields)
    updates: Updates = {
        "approvals": s.approvals.set(p.approval_id, record),
        "approvals_by_operation": _add_approval_id(s, p.operation_id, p.approval_id),
    }
    if p.approval_id in s.pending_approvals:
        updates["pending_approvals"] = s.pending_approvals.delete(p.approval_id)
        if not p.granted and record.kind == "dispatch":
            _reject_pending_operation(s, updates, e, record)
    return updates


def _reject_pending_operation(s: SessionState, updates: Updates, e: Any, approval: ApprovalRecord) -> None:
    """An operation turned down before it ran: the step that asked for it is redone, with the
    reason for the executor to act on, instead of going on as if it had run."""
    p = e.payload
    operation = s.operations.get(p.operation_id)
    _record_rejection(
        s,
        updates,
        e,
        kind="approval",
        item=p.approval_id,
        sha256=approval.payload_sha256,
        reason=p.reason,
        step=operation.step if operation is not None else None,
        produced=None,
        operation_id=p.operation_id,
    )


def _on_rejection(s: SessionState, e: Any) -> Updates:
    """A published deliverable turned down: the result that published it, the step that made it
    and everything built on them are invalid; the step is redone with the reason."""
    p = e.payload
    artifact = s.artifacts.get(p.name)
    produced = None
    if artifact is not None and artifact.ref.sha256 == p.sha256 and artifact.result_id:
        produced = artifact.result_id  # other bytes under the name are not what was rejected
    result = s.results.get(produced) if produced else None
    updates: Updates = {}
    _record_rejection(
        s,
        updates,
        e,
        kind="deliverable",
        item=p.name,
        sha256=p.sha256,
        reason=p.reason,
        step=result.step if result is not None else None,
        produced=produced,
        operation_id=produced if produced in s.operations else None,
    )
    return updates


def _record_rejection(
    s: SessionState,
    updates: Updates,
    e: Any,
    *,
    kind: Literal["deliverable", "approval"],
    item: str,
    sha256: str,
    reason: str,
    step: str | None,
    produced: str | None,
    operation_id: str | None,
) -> None:
    """Invalidate what was rejected (the result that `produced` it, and the work of its `step` in
    its current round) and everything built on it, reopen the step, and keep the rejection."""
    who = e.payload.by or e.actor.name or e.actor.kind
    because = f"{item} rejected by {who}" + (f": {reason}" if reason else "")
    direct = {produced: because} if produced else {}
    if step is not None:
        direct.update({r.result_id: because for r in s.results.values() if r.step == step and r.valid})
    invalidated: tuple[str, ...] = ()
    if direct:
        updates["results"], invalidated = _invalidate_from(s.results, direct, seq=e.seq, version=None)
    # An approval turned down reopens its step even before the step produced anything.
    named = (step,) if step is not None and (kind == "approval" or produced) else ()
    reopened = _reopen(
        s, updates, invalidated=invalidated, steps=named, seq=e.seq, because=because, by_rejection=True
    )
    updates["rejections"] = (
        *s.rejections,
        _new(
            RejectionRecord,
            seq=e.seq,
            kind=kind,
            item=item,
            sha256=sha256,
            reason=reason,
            by=who,
            at=e.created_at,
            operation_id=operation_id,
            invalidated=invalidated,
            reopened_steps=reopened,
        ),
    )


def _on_artifact(s: SessionState, e: Any) -> Updates:
    p = e.payload
    subagent = p.subagent or e.actor.subagent
    record = _new(
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
    _note_subagent(s, updates, subagent, e.seq)
    _register_result(
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


def _on_checkpoint(s: SessionState, e: Any) -> Updates:
    p = e.payload
    record = _new(CheckpointRecord, seq=e.seq, checkpoint=p)
    updates: Updates = {"latest_checkpoint": record, "checkpoint_count": s.checkpoint_count + 1}
    if record.verified:
        updates["latest_verified_checkpoint"] = record
        updates["verified_checkpoints"] = s.verified_checkpoints.set(p.subagent or "", record)
    owner = p.subagent or e.actor.subagent
    if owner:
        previous = s.subagent_checkpoints.get(owner, ())
        updates["subagent_checkpoints"] = s.subagent_checkpoints.set(owner, (*previous, record))
    if p.result_id:
        # A step's checkpoint is named after the step, with "@<round>" from its second round on.
        step = p.checkpoint_id.split("@", 1)[0]
        _register_result(
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


def _on_note(s: SessionState, e: Any) -> Updates:
    p = e.payload
    previous = s.notes.get(p.note_id)
    record = _new(
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
        "recent_notes": _push_recent(s.recent_notes, p.note_id),
    }
    if p.result_id or p.derived_from is not None:
        _register_result(
            s,
            updates,
            result_id=p.result_id or f"note:{p.note_id}",
            source="note",
            label=p.note_id,
            seq=e.seq,
            derived_from=p.derived_from,
        )
    return updates


def _on_task(s: SessionState, e: Any) -> Updates:
    p = e.payload
    previous = s.tasks.get(p.task_id)
    transition = _new(TaskTransition, seq=e.seq, status=p.status, detail=p.detail)
    if previous is None:
        record = _new(
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
        record = _replace(
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
            },
        )
    updates: Updates = {"tasks": s.tasks.set(p.task_id, record)}
    if p.status == TaskStatus.RUNNING:
        updates["current_step"] = p.task_id
    _note_subagent(s, updates, record.owner, e.seq)
    return updates


def _on_wait(s: SessionState, e: Any) -> Updates:
    p = e.payload
    previous = s.waits.get(p.wait_id)
    record = _new(
        WaitRecord,
        wait_id=p.wait_id,
        kind=p.kind,
        reason=p.reason,
        condition=p.condition,
        artifact=p.artifact,
        resolved=p.resolved,
        opened_seq=previous.opened_seq if previous else e.seq,
        last_seq=e.seq,
    )
    updates: Updates = {"waits": s.waits.set(p.wait_id, record)}
    if p.resolved:
        if p.wait_id in s.open_waits:
            updates["open_waits"] = s.open_waits.delete(p.wait_id)
    else:
        updates["open_waits"] = s.open_waits.set(p.wait_id, record.opened_seq)
    return updates


def _on_operation_outcome(s: SessionState, e: Any) -> Updates:
    p = e.payload
    existing = _operation_named(s, e, p.operation_id)
    record = _replace(
        existing,
        {
            "outcome": p.outcome,
            "outcome_seq": e.seq,
            "reconciled_succeeded": p.succeeded if p.outcome == "reconciled" else None,
            "outcome_detail": p.detail,
            "effects": p.effects or existing.effects,
        },
    )
    updates: Updates = {"operations": s.operations.set(p.operation_id, record)}
    if len(p.effects) > 1:
        updates["repeated_effects"] = s.repeated_effects.set(p.operation_id, e.seq)
    if p.outcome == "unknown":
        updates["unknown_outcomes"] = s.unknown_outcomes.set(p.operation_id, e.seq)
    else:
        if p.operation_id in s.unknown_outcomes:
            updates["unknown_outcomes"] = s.unknown_outcomes.delete(p.operation_id)
        updates["reconciled_operations"] = s.reconciled_operations.set(p.operation_id, e.seq)
        # Reconciling settles the operation: it no longer waits for a result.
        if p.operation_id in s.open_operations:
            updates["open_operations"] = s.open_operations.delete(p.operation_id)
    return updates


def _on_lifecycle(s: SessionState, e: Any) -> Updates:
    p = e.payload
    entry = _new(
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
    kind = p.kind
    updates: Updates = {}
    if kind == LifecycleKind.HARNESS_STARTED:
        fields["harness_running"] = True
        fields["harness_starts"] = lc.harness_starts + 1
    elif kind == LifecycleKind.HARNESS_LOST:
        fields["harness_running"] = False
        fields["harness_lost"] = lc.harness_lost + 1
        fields["recovering"] = True
    elif kind == LifecycleKind.HARNESS_FINISHED:
        fields["harness_running"] = False
    elif kind == LifecycleKind.HARNESS_STOPPED:
        fields["harness_running"] = False
        fields["clean_stops"] = lc.clean_stops + 1
    elif kind == LifecycleKind.SANDBOX_STARTED or kind == LifecycleKind.SANDBOX_REPLACED:
        replaced = kind == LifecycleKind.SANDBOX_REPLACED
        if replaced:
            fields["sandbox_replaced"] = lc.sandbox_replaced + 1
        if p.subagent:
            _note_subagent(s, updates, p.subagent, e.seq)
            subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
            sub = subagents[p.subagent]
            sub = _replace(
                sub,
                {
                    "sandbox_starts": sub.sandbox_starts + 1,
                    "sandbox_replacements": sub.sandbox_replacements + int(replaced),
                    "sandbox_attempt": p.attempt,
                    "sandbox_detail": p.detail,
                    "last_restored_from": None,
                },
            )
            updates["subagents"] = subagents.set(p.subagent, sub)
    elif kind == LifecycleKind.SANDBOX_LOST:
        fields["sandboxes_lost"] = lc.sandboxes_lost + 1
        if p.subagent:
            _note_subagent(s, updates, p.subagent, e.seq)
            subagents = updates.get("subagents", s.subagents)
            sub = subagents[p.subagent]
            updates["subagents"] = subagents.set(
                p.subagent, _replace(sub, {"sandbox_losses": sub.sandbox_losses + 1})
            )
            # A finished subagent's harness never uses its sandbox again: nothing waits on a restore.
            task = s.tasks.get(p.subagent)
            if task is None or task.status not in (TaskStatus.DONE, TaskStatus.VERIFIED):
                fields["lost_sandboxes"] = tuple(sorted({*lc.lost_sandboxes, p.subagent}))
                fields["recovering"] = True
    elif kind == LifecycleKind.RESTORED:
        fields["restores"] = lc.restores + 1
        restored = s.subagents.get(p.subagent) if p.subagent else None
        if restored is not None:
            if restored.sandbox_starts > 1:
                fields["recovery_restores"] = lc.recovery_restores + 1
            updates["subagents"] = s.subagents.set(
                p.subagent, _replace(restored, {"last_restored_from": p.checkpoint_id})
            )
        elif lc.harness_starts > 1 or lc.harness_lost:
            fields["recovery_restores"] = lc.recovery_restores + 1
        remaining = tuple(name for name in lc.lost_sandboxes if name != p.subagent)
        fields["lost_sandboxes"] = remaining
        fields["recovering"] = bool(remaining)
    elif kind == LifecycleKind.RECOVERY_FAILED:
        fields["recovery_failures"] = lc.recovery_failures + 1
        fields["last_recovery_failure"] = entry
    elif kind == LifecycleKind.SESSION_COMPLETED:
        fields.update(completed=True, failed=False, harness_running=False, end_reason=p.reason)
    elif kind == LifecycleKind.SESSION_FAILED:
        fields.update(failed=True, completed=False, harness_running=False, end_reason=p.reason)
    updates["lifecycle"] = _replace(lc, fields)
    return updates


def _on_summary(s: SessionState, e: Any) -> Updates:
    return {"latest_summary_seq": e.seq}


def _on_remote(s: SessionState, e: Any) -> Updates:
    p = e.payload
    updates: Updates = {}
    if p.kind == RemoteKind.RESOURCE and p.resource and p.resource_id:
        updates["remote_resources"] = s.remote_resources.set(f"{p.subagent}/{p.resource}", p.resource_id)
        return updates
    if p.kind == RemoteKind.SESSION:
        previous = s.remote_sessions.get(p.subagent)
        if previous is not None and previous.remote_session_id == p.remote_session_id:
            session = _replace(
                previous, {"endpoint": p.endpoint or previous.endpoint, "last_detail": p.detail}
            )
        else:
            session = _new(
                RemoteSessionRecord,
                subagent=p.subagent,
                executor=p.executor,
                remote_session_id=p.remote_session_id,
                endpoint=p.endpoint,
                seq=e.seq,
                last_detail=p.detail,
            )
        updates["remote_sessions"] = s.remote_sessions.set(p.subagent, session)
        _note_subagent(s, updates, p.subagent, e.seq)
        return updates
    calls = s.remote_calls
    call = calls.get(p.operation_id) if p.operation_id else None
    counter: str | None = None  # the remote session's count this event adds one to
    if p.kind == RemoteKind.CALL and p.operation_id and call is None:
        call = _new(
            RemoteCallRecord,
            operation_id=p.operation_id,
            subagent=p.subagent,
            call_id=p.call_id or "",
            turn_id=p.turn_id,
            tool=p.tool,
            seq=e.seq,
        )
        updates["remote_calls"] = calls.set(p.operation_id, call)
        counter = "calls"
    elif p.kind == RemoteKind.CALL_REFUSED and call is not None:
        changed = {"refused_seq": e.seq, "refusal": p.detail}
        updates["remote_calls"] = calls.set(p.operation_id, _replace(call, changed))
        counter = "refused"
    elif p.kind == RemoteKind.RESULT_DELIVERED and call is not None and call.delivered_seq is None:
        changed = {"delivered_seq": e.seq, "idempotency_key": p.idempotency_key}
        updates["remote_calls"] = calls.set(p.operation_id, _replace(call, changed))
        counter = "delivered"
    elif p.kind == RemoteKind.INTERRUPTED:
        counter = "interruptions"
    known = s.remote_sessions.get(p.subagent)
    if known is not None:
        fields: dict[str, Any] = {"last_detail": p.detail}
        if counter is not None:
            fields[counter] = getattr(known, counter) + 1
        if p.kind == RemoteKind.FAILED:
            fields["failure"] = p.detail
        updates["remote_sessions"] = s.remote_sessions.set(p.subagent, _replace(known, fields))
    return updates


def _on_state_snapshot(s: SessionState, e: Any) -> Updates:
    # A snapshot of the state is not a fact about the session: folding it changes nothing.
    return {}


def _on_session_link(s: SessionState, e: Any) -> Updates:
    p = e.payload
    if p.kind == "parent":
        link = _new(
            SessionLinkRecord,
            session=p.session,
            part=p.part,
            objective=p.objective,
            operation_id=p.operation_id,
            seq=e.seq,
        )
        return {"parent": link}
    known = s.children.get(p.session)
    fields: dict[str, Any] = {
        "session": p.session,
        "part": p.part or (known.part if known else ""),
        "objective": p.objective or (known.objective if known else ""),
        "operation_id": p.operation_id or (known.operation_id if known else ""),
        "goal": p.goal or (known.goal if known else ""),
        "plan": p.plan or (known.plan if known else ""),
        "seq": known.seq if known else e.seq,
        "phase": p.phase or (known.phase if known else ""),
        "deliverables": tuple(sorted(p.deliverables.items())) or (known.deliverables if known else ()),
    }
    return {"children": s.children.set(p.session, _new(SessionLinkRecord, **fields))}


_HANDLERS: dict[str, Callable[[SessionState, Any], Updates]] = {
    "user_input": _on_user_input,
    "scope_change": _on_scope_change,
    "model_output": _on_model_output,
    "tool_request": _on_tool_request,
    "tool_result": _on_tool_result,
    "approval_request": _on_approval_request,
    "approval": _on_approval,
    "artifact": _on_artifact,
    "checkpoint": _on_checkpoint,
    "note": _on_note,
    "task": _on_task,
    "wait": _on_wait,
    "operation_outcome": _on_operation_outcome,
    "lifecycle": _on_lifecycle,
    "rejection": _on_rejection,
    "summary": _on_summary,
    "remote": _on_remote,
    "state_snapshot": _on_state_snapshot,
    "session_link": _on_session_link,
}


# --------------------------------------------------------------------------------------------------
# The reducer


def apply(state: SessionState, event: Event) -> SessionState:
    """The state after one more event. An event already folded (seq <= last_seq) changes nothing,
    so a follower that re-reads after a cut watch can apply what it reads without bookkeeping."""
    if state.session_id and event.session_id != state.session_id:
        raise FoldError(f"event of session {event.session_id!r} applied to {state.session_id!r}")
    if event.seq <= state.last_seq:
        return state
    if event.seq != state.last_seq + 1:
        raise FoldError(f"gap in seq: state is at {state.last_seq}, next event is {event.seq}")
    updates = _HANDLERS[event.type](state, event)
    updates["session_id"] = event.session_id
    updates["last_seq"] = event.seq
    updates["event_count"] = state.event_count + 1
    updates["last_event_at"] = event.created_at
    if state.started_at is None:
        updates["started_at"] = event.created_at
    return _replace(state, updates)


def fold(events: Iterable[Event], state: SessionState = EMPTY) -> SessionState:
    """`apply` over each event in turn.

    The cyclic garbage collector is paused for the loop: every `apply` allocates small trie nodes
    that outlive a few young-generation passes, and scanning them again and again costs more than
    the fold itself (about 2x at 10^5 events). The reducer builds no reference cycles, so reference
    counting alone frees everything it discards; the collector's previous setting is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for event in events:
            state = apply(state, event)
    finally:
        if was_enabled:
            gc.enable()
    return state
