"""`SessionState`: everything the projections need, folded from the log, and its queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from immutables import Map
from pydantic import BaseModel, ConfigDict, Field

from belay.journal.events import Checkpoint
from belay.journal.state.records import (
    ApprovalRecord,
    ArtifactRecord,
    CheckpointRecord,
    DecisionRecord,
    ExecutorChangeRecord,
    Lifecycle,
    NoteRecord,
    OperationRecord,
    RejectionRecord,
    RemoteCallRecord,
    RemoteSessionRecord,
    Request,
    ResultRecord,
    ScopeChangeRecord,
    SessionLinkRecord,
    SubagentRecord,
    TaskRecord,
    UserMessageRecord,
    WaitRecord,
)


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
    # What people decided, the latest RECENT_LIMIT, oldest first, and how many in all.
    decisions: tuple[DecisionRecord, ...] = ()
    decision_count: int = 0

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
    # Where operation ids count calls (`<subagent>.<step>[@<round>]`, or `<subagent>` outside any
    # step) -> the highest ordinal recorded there, in a tool request or a remote call: the next
    # call there is one past it (belay.journal.operations).
    operation_ordinals: Map[str, int] = _empty_map()
    # "<subagent>/<the executor's own call id>" -> operation id, for the calls recorded under an
    # operation id other than the executor's own id.
    provider_calls: Map[str, str] = _empty_map()

    # Delegations to child sessions (`start_session`, `await_session`): "<tool> <child>" by the
    # operation asking for it, and those whose latest call failed ("<tool> <child>" -> operation):
    # a coordinator with one cannot have done its objective.
    delegations: Map[str, str] = _empty_map()
    failed_delegations: Map[str, str] = _empty_map()

    approvals: Map[str, ApprovalRecord] = _empty_map()
    approvals_by_operation: Map[str, tuple[str, ...]] = _empty_map()
    pending_approvals: Map[str, int] = _empty_map()  # approval id -> requested seq

    artifacts: Map[str, ArtifactRecord] = _empty_map()  # by name, the latest version
    deliverables: Map[str, int] = _empty_map()  # name -> seq

    notes: Map[str, NoteRecord] = _empty_map()
    recent_notes: tuple[str, ...] = ()

    waits: Map[str, WaitRecord] = _empty_map()
    open_waits: Map[str, int] = _empty_map()  # wait id -> opened seq
    # subagent -> the wait its latest turn that ended without its deliverable opened
    turn_ends: Map[str, str] = _empty_map()
    user_messages: Map[str, UserMessageRecord] = _empty_map()  # by the wait each one answers

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
    cached_input_tokens: int = 0  # of input_tokens, read from a provider's prompt cache
    secrets_redacted: int = 0  # in tool requests and results, before they were recorded
    # When the first and the last event were recorded: the record's own first and last signs of
    # life, for views that ask "since when" (a view compares them with its own `now`; the fold
    # never reads a clock).
    started_at: datetime | None = None
    last_event_at: datetime | None = None

    # The coordinator pattern: the session that started this one, and the sessions it started.
    parent: SessionLinkRecord | None = None
    children: Map[str, SessionLinkRecord] = _empty_map()  # by child session name
    # Artifact inputs pinned by the operator (`session_link`, kind `input`): sha256 by
    # "<source session>/<deliverable>".
    input_pins: Map[str, str] = _empty_map()

    # The executor the session started on, and those it moved to, oldest first: the last says
    # which one runs it now (`current_executor`).
    started_executor: dict[str, Any] = Field(default_factory=dict)
    executor_changes: tuple[ExecutorChangeRecord, ...] = ()

    # ---- queries that read indexes only (cheap at any history length)

    def current_executor(self) -> dict[str, Any]:
        """`spec.executor` (API spelling) of the executor the session is on: the last it moved to,
        else the one it started on; empty when the record does not say."""
        return (
            dict(self.executor_changes[-1].executor) if self.executor_changes else dict(self.started_executor)
        )

    def operation(self, operation_id: str) -> OperationRecord | None:
        return self.operations.get(operation_id)

    def collected_from(self, name: str) -> SessionLinkRecord | None:
        """For a coordinator's artifact `name` (`<child>/<its name>`): the child whose end the record
        holds with these very bytes among its deliverables; None for any other artifact, and once
        the child was reopened or ended with other bytes."""
        child, _, own_name = name.partition("/")
        link = self.children.get(child) if own_name else None
        artifact = self.artifacts.get(name)
        if link is None or artifact is None or not link.phase:
            return None
        return link if dict(link.deliverables).get(own_name) == artifact.ref.sha256 else None

    def operation_of_call(self, subagent: str, call_id: str) -> OperationRecord | None:
        """The operation a call the executor named `call_id` was recorded as: the one recorded
        with it as its provider call id, else the operation of that id, unless that operation
        is another call's (recorded with a provider call id of its own)."""
        mapped = self.provider_calls.get(f"{subagent}/{call_id}")
        if mapped is not None:
            return self.operations.get(mapped)
        operation = self.operations.get(call_id)
        if operation is None or operation.provider_call_id not in (None, call_id):
            return None
        return operation

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
