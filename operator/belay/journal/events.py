"""The closed, versioned set of session events.

Every event is an immutable envelope (`seq`, `session_id`, `type`, `created_at`, `payload`,
`parent_seq`, `actor`, `idempotency_key`, `chain`) whose payload is one typed model. The envelope is a
pydantic discriminated union on `type`, so a stored event always parses back to the exact class
that wrote it, and an unknown type is an error rather than a silently dropped dict.

Writers build an `EventDraft` (payload, parent, actor); the store assigns `seq`, `session_id`,
`created_at` and `chain` (the event's link in the record's hash chain, `belay.stores.integrity`) at
append time.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def canonical_json(value: Any) -> bytes:
    """Stable bytes for hashing: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


# --------------------------------------------------------------------------------------------------
# Shared value types


class Actor(Frozen):
    """Who wrote an event. The harness stamps its attempt, its version and the model's id."""

    kind: Literal["harness", "user", "operator", "system"] = "harness"
    attempt: int = 0
    harness_version: str = ""
    model_id: str | None = None
    subagent: str | None = None
    name: str | None = None


class EffectClass(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    KEYED = "keyed"
    UNSAFE = "unsafe"


# How a large tool argument stands in a `tool_request`: `{"$artifact": sha256, "size": n}`, its
# bytes in the artifact store.
ARTIFACT_ARGUMENT = "$artifact"


class ArtifactRef(Frozen):
    """A content-addressed blob: the hash is the identity, the uri says where it lives."""

    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    size: int = Field(ge=0)
    media_type: str = "application/octet-stream"
    uri: str = ""


class DerivedFrom(Frozen):
    """The inputs a result was derived from, so a scope change can invalidate exactly what it touched."""

    request_version: int | None = None
    request_parts: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()  # sha256 of upstream artifacts
    results: tuple[str, ...] = ()  # ids of upstream results


# --------------------------------------------------------------------------------------------------
# Payloads, one per event type. `EVENT_TYPE` ties a payload to its envelope.


class Payload(Frozen):
    EVENT_TYPE: ClassVar[str]
    schema_version: int = SCHEMA_VERSION


class UserInput(Payload):
    """The original request. `parts` names pieces of the request that results can depend on."""

    EVENT_TYPE: ClassVar[str] = "user_input"
    goal: str
    parts: dict[str, str] = Field(default_factory=dict)
    request_version: int = 1
    # The executor the session started on (`spec.executor` as the API spells it), which a later
    # `executor_change` moves it from; empty in a record that did not keep it.
    executor: dict[str, Any] = Field(default_factory=dict)


class ScopeChange(Payload):
    """Request version N+1: a new goal, changed or removed parts, and who changed them."""

    EVENT_TYPE: ClassVar[str] = "scope_change"
    request_version: int
    summary: str
    goal: str | None = None
    changed_parts: dict[str, str] = Field(default_factory=dict)
    removed_parts: tuple[str, ...] = ()
    by: str = ""  # a person, or the Kubernetes field manager that edited spec.request


class ModelOutput(Payload):
    EVENT_TYPE: ClassVar[str] = "model_output"
    text: str = ""
    tool_calls: tuple[str, ...] = ()  # operation ids requested in this turn
    input_tokens: int = 0
    output_tokens: int = 0
    # Of the input tokens, those the provider read from its prompt cache (0 when it does not say).
    cached_input_tokens: int = 0


class ToolRequest(Payload):
    EVENT_TYPE: ClassVar[str] = "tool_request"
    operation_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    effect: EffectClass
    step: str | None = None
    subagent: str | None = None
    idempotency_key: str | None = None  # passed to `keyed` tools
    payload_sha256: str = ""
    redactions: int = 0  # secrets replaced in the arguments before they were recorded
    # The executor's own id of the call (a provider's call id), kept when it is not the
    # operation id, which is derived from the record (belay.journal.operations).
    provider_call_id: str | None = None


class ToolResult(Payload):
    EVENT_TYPE: ClassVar[str] = "tool_result"
    operation_id: str
    ok: bool
    output: Any = None
    error: str | None = None
    output_ref: ArtifactRef | None = None
    result_id: str | None = None
    derived_from: DerivedFrom | None = None
    redactions: int = 0  # secrets replaced in the output and error before they were recorded


class ApprovalRequest(Payload):
    EVENT_TYPE: ClassVar[str] = "approval_request"
    approval_id: str
    operation_id: str
    tool: str
    payload_sha256: str
    summary: str
    expires_at: datetime | None = None
    # What the approval binds, stored before it is asked for so a person can read it: the
    # operation's canonical payload (its sha256 is `payload_sha256`), and the bytes the operation
    # would send out when its payload names them by hash (a deliverable's content).
    payload_ref: ArtifactRef | None = None
    content_ref: ArtifactRef | None = None
    content_name: str | None = None
    # "dispatch": may the operation run at all; "retry": an unsafe operation failed (it took no
    # effect) and may run once more; rejecting a retry goes on without the effect.
    kind: Literal["dispatch", "retry"] = "dispatch"


class Approval(Payload):
    """A decision on one operation, bound to one payload hash."""

    EVENT_TYPE: ClassVar[str] = "approval"
    approval_id: str
    operation_id: str
    payload_sha256: str
    granted: bool
    by: str = ""
    reason: str = ""
    expires_at: datetime | None = None


class Artifact(Payload):
    EVENT_TYPE: ClassVar[str] = "artifact"
    name: str
    ref: ArtifactRef
    deliverable: bool = False
    subagent: str | None = None
    description: str = ""
    result_id: str | None = None
    derived_from: DerivedFrom | None = None


class DeclaredArtifact(Frozen):
    name: str  # path relative to the workspace
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    size: int = Field(ge=0)
    uri: str = ""
    mode: int = 0o644


class Verification(Frozen):
    command: str
    status: Literal["passed", "failed", "not_run"] = "not_run"
    output_sha256: str | None = None
    exit_code: int | None = None


class Checkpoint(Payload):
    EVENT_TYPE: ClassVar[str] = "checkpoint"
    checkpoint_id: str
    covers_seq: int
    repository_revision: str | None = None
    patch: ArtifactRef | None = None
    runtime_image: str | None = None
    completed_steps: tuple[str, ...] = ()
    next_step: str | None = None
    declared_artifacts: tuple[DeclaredArtifact, ...] = ()
    # Declared files too many for one event: their list is this manifest in the artifact store
    # (`ArtifactStore.put_manifest`), and `declared_artifacts` is empty.
    declared_manifest: ArtifactRef | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    dependencies: dict[str, str] = Field(default_factory=dict)
    verification: Verification | None = None
    subagent: str | None = None
    result_id: str | None = None
    derived_from: DerivedFrom | None = None

    @property
    def verified(self) -> bool:
        return self.verification is not None and self.verification.status == "passed"


class NoteKind(StrEnum):
    HYPOTHESIS = "hypothesis"
    DECISION = "decision"
    FINDING = "finding"


class Note(Payload):
    EVENT_TYPE: ClassVar[str] = "note"
    note_id: str
    kind: NoteKind
    text: str
    status: Literal["open", "supported", "rejected", "accepted", "superseded"] = "open"
    evidence: tuple[str, ...] = ()
    result_id: str | None = None
    derived_from: DerivedFrom | None = None


class TaskStatus(StrEnum):
    PLANNED = "planned"
    RUNNING = "running"
    DONE = "done"
    VERIFIED = "verified"
    BLOCKED = "blocked"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Task(Payload):
    """A plan or subtask transition. The first event for a task id declares it."""

    EVENT_TYPE: ClassVar[str] = "task"
    task_id: str
    title: str = ""
    status: TaskStatus
    owner: str | None = None  # subagent name
    deliverable: str | None = None
    depends_on: tuple[str, ...] = ()
    detail: str = ""
    # The request parts a plan step depends on ("goal" included); None: every part and the goal.
    request_parts: tuple[str, ...] | None = None


class WaitKind(StrEnum):
    ON_USER = "on_user"
    ON_EXTERNAL = "on_external"
    READY_FOR_REVIEW = "ready_for_review"


class Wait(Payload):
    EVENT_TYPE: ClassVar[str] = "wait"
    wait_id: str
    kind: WaitKind
    reason: str
    resolved: bool = False
    condition: str | None = None
    artifact: str | None = None  # deliverable name for ready_for_review
    # On a person: the subagent ended its turn without this deliverable, which it owes. A person's
    # message (`user_message`), an amend of the request, or a no (the session ends) answers it.
    owed: str | None = None


class UserMessage(Payload):
    """A person's words to a subagent whose turn ended without its deliverable (`belay message`):
    its next user turn, given to whoever decides for it. Recorded with the answer to the wait."""

    EVENT_TYPE: ClassVar[str] = "user_message"
    subagent: str
    wait_id: str  # the wait on a person it answers
    text: str
    by: str = ""


class OperationOutcome(Payload):
    EVENT_TYPE: ClassVar[str] = "operation_outcome"
    operation_id: str
    outcome: Literal["unknown", "reconciled"]
    succeeded: bool | None = None
    detail: str = ""
    by: str = ""
    # What a reconcile probe found, by the names the external system gave them: more than one is
    # an operation that took effect more than once.
    effects: tuple[str, ...] = ()


class LifecycleKind(StrEnum):
    HARNESS_STARTED = "harness_started"
    HARNESS_LOST = "harness_lost"
    HARNESS_FINISHED = "harness_finished"
    # The attempt was told to stop (SIGTERM, SIGINT: `reason` names the signal) and stopped cleanly:
    # it dispatched nothing new, let the calls in flight finish within its bound, and recorded
    # what it left (`operations`: the calls in flight when it was told; `detail` says which
    # finished, which were cut off at the bound, and which it never dispatched).
    HARNESS_STOPPED = "harness_stopped"
    SANDBOX_STARTED = "sandbox_started"
    SANDBOX_REPLACED = "sandbox_replaced"
    # A subagent's sandbox pod went away under a running attempt (recorded by the operator, which
    # starts its replacement; the harness restores it and records sandbox_replaced and restored).
    SANDBOX_LOST = "sandbox_lost"
    RESTORED = "restored"
    RECOVERY_FAILED = "recovery_failed"
    SESSION_COMPLETED = "session_completed"
    SESSION_FAILED = "session_failed"
    # A subagent's tool server listed its tools (`reason`: the server; `listing`: what it offered).
    TOOLS_LISTED = "tools_listed"


class Lifecycle(Payload):
    EVENT_TYPE: ClassVar[str] = "lifecycle"
    kind: LifecycleKind
    attempt: int | None = None
    lease: int | None = None
    reason: str = ""
    detail: str = ""
    subagent: str | None = None
    checkpoint_id: str | None = None
    operations: tuple[str, ...] = ()
    listing: ArtifactRef | None = None


class Rejection(Payload):
    """A person turned down a published deliverable, with the reason: the step that produced it is
    redone, and everything derived from it is invalid."""

    EVENT_TYPE: ClassVar[str] = "rejection"
    name: str  # the deliverable
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # exactly the bytes rejected
    reason: str
    by: str = ""


class RemoteKind(StrEnum):
    # Something the executor created at the provider before its session (an agent, an
    # environment), named by `resource` and `resource_id`.
    RESOURCE = "resource"
    # The provider's session this subagent's executor holds (created, or found by its metadata);
    # one with another id than the subagent's last replaces that one, lost, seeded from the record.
    SESSION = "session"
    # The remote agent asked for a call; recorded before the call's tool request, so a resumed
    # attempt gives it the same operation id.
    CALL = "call"
    # A call whose arguments do not fit its tool's schema: never run; an error result is posted.
    CALL_REFUSED = "call_refused"
    # The provider accepted a result (or a refusal) for a call, under `idempotency_key`.
    RESULT_DELIVERED = "result_delivered"
    # The connection to the provider was cut or answered an error, and the executor went on.
    INTERRUPTED = "interrupted"
    # The remote session cannot go on (failed, terminated, deleted): the reason is in `detail`.
    # The executor replaces it (a `session` event follows), within its bound.
    FAILED = "failed"
    # The provider compacted the remote session's own context (its summary, in its records, not
    # Belay's); `detail` names the provider's event. Belay's record is not compacted by it.
    COMPACTED = "compacted"
    # The provider accepted a person's message (or the request's change) for the remote agent,
    # under `idempotency_key`, derived from the seq of the event that holds the words.
    MESSAGE_DELIVERED = "message_delivered"


class Remote(Payload):
    """What a managed executor did with the provider's session: the remote ids a resumed attempt
    settles against. Never a credential: `endpoint` is the provider's base URL without user info."""

    EVENT_TYPE: ClassVar[str] = "remote"
    kind: RemoteKind
    executor: str  # the executor type, e.g. "openai-agents"
    subagent: str
    remote_session_id: str = ""
    endpoint: str = ""
    resource: str | None = None
    resource_id: str | None = None
    turn_id: str | None = None
    call_id: str | None = None
    operation_id: str | None = None
    tool: str | None = None
    idempotency_key: str | None = None
    detail: str = ""


class SessionLinkKind(StrEnum):
    # This session started `session` for one part of its objective (recorded by the parent's
    # `start_session`), or learnt how that child ended (its `await_session`).
    CHILD = "child"
    # `session` started this one: recorded in the child's record with its request.
    PARENT = "parent"
    # This session takes `deliverable` of `session` (of its own namespace) as an input: the
    # operator pins its proven bytes (`deliverables`, name -> sha256) before the first harness
    # pod, and the harness seeds the first sandbox from the pin, never from the spec.
    INPUT = "input"


class SessionLink(Payload):
    """A link between a coordinating session and a session it started for one part of its
    objective; each side records its half, so either record alone says who is whose."""

    EVENT_TYPE: ClassVar[str] = "session_link"
    kind: SessionLinkKind
    session: str
    part: str
    objective: str = ""
    operation_id: str = ""  # the parent's start_session operation
    goal: str = ""  # what the child is asked (its request), for whoever starts it
    plan: str = ""  # a scripted child's plan file
    deliverable: str = ""  # what the child owes: it completes only once it is published
    phase: str = ""  # for a child that ended: Succeeded or Failed
    deliverables: dict[str, str] = Field(default_factory=dict)  # an ended child's: name -> sha256
    # The child's part changed in the parent's request: it runs again (its next round), and how it
    # ended before, with what, no longer stands.
    reopened: bool = False


class ExecutorChange(Payload):
    """From its next attempt on, the session runs on another executor (or another model): asked by
    a person (`belay resume --executor`), or by an edit of `spec.executor` in a cluster. What the
    new executor starts from is the record, never the old executor's memory; an approval stays
    bound to its payload's hash, so it covers nothing the new executor proposes differently."""

    EVENT_TYPE: ClassVar[str] = "executor_change"
    from_type: str
    from_model: str | None = None
    to_type: str
    to_model: str | None = None
    # The new `spec.executor` as the API spells it (type, model, plan, ...), which the next attempt
    # runs: the record, not the manifest on disk, says which executor the session is on.
    executor: dict[str, Any] = Field(default_factory=dict)
    at_seq: int = 0  # the record's last event when the change was asked
    by: str = ""
    reason: str = ""


# A coordinator's wait on one of its child sessions: id `session-<child>`, condition `session:<child>`.
CHILD_CONDITION_PREFIX = "session:"
CHILD_WAIT_PREFIX = "session-"


class Summary(Payload):
    """A compaction of earlier events; it never replaces them. Each summary folds in the one before
    it (`previous_seq`), so the newest covers every event from `covers_from_seq` (the first) to
    `covers_to_seq`, and the model's context needs only the newest."""

    EVENT_TYPE: ClassVar[str] = "summary"
    covers_from_seq: int
    covers_to_seq: int
    text: str
    previous_seq: int | None = None  # the summary this one folds in
    # What it relies on, for a reader who wants the full story: the events it draws on (steps
    # finished, notes, artifacts, checkpoints, decisions), and the sha256 of the artifacts.
    event_seqs: tuple[int, ...] = ()
    artifacts: tuple[str, ...] = ()
    made_by: str = ""  # the model that wrote the text, or "deterministic"
    input_tokens: int = 0
    output_tokens: int = 0


class StateSnapshot(Payload):
    """The folded state through `covers_seq`, stored as a content-addressed artifact
    (`belay.journal.snapshots`), so a reader folds only the events after it. It changes nothing
    in the state: a snapshot the reader cannot use (missing, damaged, or written by another version
    of the fold, `fold_version`) is passed over for the one before it (`previous_seq`), or for
    the whole record."""

    EVENT_TYPE: ClassVar[str] = "state_snapshot"
    ref: ArtifactRef  # the snapshot's root document
    covers_seq: int
    fold_version: str  # the fold that wrote it (`belay.journal.snapshots.FOLD_VERSION`)
    previous_seq: int | None = None  # the seq of the snapshot event before this one


PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    UserInput,
    ScopeChange,
    ModelOutput,
    ToolRequest,
    ToolResult,
    ApprovalRequest,
    Approval,
    Artifact,
    Checkpoint,
    Note,
    Task,
    Wait,
    OperationOutcome,
    Lifecycle,
    Rejection,
    Summary,
    Remote,
    StateSnapshot,
    SessionLink,
    ExecutorChange,
    UserMessage,
)
PAYLOAD_BY_TYPE: dict[str, type[Payload]] = {p.EVENT_TYPE: p for p in PAYLOAD_TYPES}
EVENT_TYPES: tuple[str, ...] = tuple(PAYLOAD_BY_TYPE)

# --------------------------------------------------------------------------------------------------
# Envelopes


class EventBase(Frozen):
    # The event's link in the session's hash chain (hex), assigned by the store; see
    # `belay.stores.integrity`. Empty only for an event built outside a store.
    chain: str = ""
    seq: int = Field(ge=1)
    session_id: str
    created_at: datetime
    parent_seq: int | None = None
    actor: Actor = Actor()
    idempotency_key: str | None = None


class UserInputEvent(EventBase):
    type: Literal["user_input"] = "user_input"
    payload: UserInput


class ScopeChangeEvent(EventBase):
    type: Literal["scope_change"] = "scope_change"
    payload: ScopeChange


class ModelOutputEvent(EventBase):
    type: Literal["model_output"] = "model_output"
    payload: ModelOutput


class ToolRequestEvent(EventBase):
    type: Literal["tool_request"] = "tool_request"
    payload: ToolRequest


class ToolResultEvent(EventBase):
    type: Literal["tool_result"] = "tool_result"
    payload: ToolResult


class ApprovalRequestEvent(EventBase):
    type: Literal["approval_request"] = "approval_request"
    payload: ApprovalRequest


class ApprovalEvent(EventBase):
    type: Literal["approval"] = "approval"
    payload: Approval


class ArtifactEvent(EventBase):
    type: Literal["artifact"] = "artifact"
    payload: Artifact


class CheckpointEvent(EventBase):
    type: Literal["checkpoint"] = "checkpoint"
    payload: Checkpoint


class NoteEvent(EventBase):
    type: Literal["note"] = "note"
    payload: Note


class TaskEvent(EventBase):
    type: Literal["task"] = "task"
    payload: Task


class WaitEvent(EventBase):
    type: Literal["wait"] = "wait"
    payload: Wait


class OperationOutcomeEvent(EventBase):
    type: Literal["operation_outcome"] = "operation_outcome"
    payload: OperationOutcome


class LifecycleEvent(EventBase):
    type: Literal["lifecycle"] = "lifecycle"
    payload: Lifecycle


class RejectionEvent(EventBase):
    type: Literal["rejection"] = "rejection"
    payload: Rejection


class SummaryEvent(EventBase):
    type: Literal["summary"] = "summary"
    payload: Summary


class RemoteEvent(EventBase):
    type: Literal["remote"] = "remote"
    payload: Remote


class StateSnapshotEvent(EventBase):
    type: Literal["state_snapshot"] = "state_snapshot"
    payload: StateSnapshot


class SessionLinkEvent(EventBase):
    type: Literal["session_link"] = "session_link"
    payload: SessionLink


class ExecutorChangeEvent(EventBase):
    type: Literal["executor_change"] = "executor_change"
    payload: ExecutorChange


class UserMessageEvent(EventBase):
    type: Literal["user_message"] = "user_message"
    payload: UserMessage


Event = Annotated[
    UserInputEvent
    | ScopeChangeEvent
    | ModelOutputEvent
    | ToolRequestEvent
    | ToolResultEvent
    | ApprovalRequestEvent
    | ApprovalEvent
    | ArtifactEvent
    | CheckpointEvent
    | NoteEvent
    | TaskEvent
    | WaitEvent
    | OperationOutcomeEvent
    | LifecycleEvent
    | RejectionEvent
    | SummaryEvent
    | RemoteEvent
    | StateSnapshotEvent
    | SessionLinkEvent
    | ExecutorChangeEvent
    | UserMessageEvent,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
DATETIME_JSON: TypeAdapter[datetime] = TypeAdapter(datetime)
ENVELOPE_BY_TYPE: dict[str, type[EventBase]] = {
    envelope.model_fields["type"].default: envelope for envelope in EventBase.__subclasses__()
}


class EventDraft(Frozen):
    """An event before the store has given it a seq: what writers hand to `EventStore.append`."""

    payload: Payload
    parent_seq: int | None = None
    actor: Actor = Actor()

    def model_post_init(self, context: Any, /) -> None:
        # A draft is made to be appended: serialize it now, not on the append's path, where
        # every backend reads these (cached properties live in the instance's dict, so a read is
        # a plain lookup; pydantic compares, dumps and validates the fields alone).
        self.stored_tail  # noqa: B018
        self.payload_size  # noqa: B018

    @functools.cached_property
    def payload_json(self) -> str:
        return self.payload.model_dump_json()

    @functools.cached_property
    def payload_size(self) -> int:
        """Bytes of the payload's JSON, the size the payload limit applies to."""
        return len(self.payload_json.encode())

    @functools.cached_property
    def stored_tail(self) -> str:
        """The draft's part of its stored JSON, the fields after those the store assigns; see
        `EnvelopeJson`."""
        return (
            f'"parent_seq":{json.dumps(self.parent_seq)},"actor":{self.actor.model_dump_json()},'
            f'"type":{json.dumps(self.type)},"payload":{self.payload_json}}}'
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> EventDraft:
        # A copy with changed fields must not keep the original's serialized form.
        copy = super().model_copy(update=update, deep=deep)
        for cached in ("type", "payload_json", "payload_size", "stored_tail"):
            copy.__dict__.pop(cached, None)
        copy.model_post_init(None)
        return copy

    @functools.cached_property
    def type(self) -> str:
        return self.payload.EVENT_TYPE

    def payload_dict(self) -> dict[str, Any]:
        return self.payload.model_dump(mode="json")

    def content_digest(self) -> str:
        """What idempotency compares: everything the writer chose, nothing the store assigns."""
        return sha256_of(
            {
                "type": self.type,
                "payload": self.payload_dict(),
                "parent_seq": self.parent_seq,
                "actor": self.actor.model_dump(mode="json"),
            }
        )


def batch_digest(drafts: list[EventDraft] | tuple[EventDraft, ...]) -> str:
    return sha256_of([d.content_digest() for d in drafts])


def now_utc() -> datetime:
    return datetime.now(UTC)


def build_event(
    draft: EventDraft,
    *,
    seq: int,
    session_id: str,
    created_at: datetime,
    idempotency_key: str | None,
    chain: str = "",
) -> Event:
    """Turn a draft into its stored envelope; used by every EventStore backend. The draft's type
    names the envelope class, so it is validated as that class directly, not as the union."""
    envelope = ENVELOPE_BY_TYPE[draft.type].model_validate(
        {
            "chain": chain,
            "seq": seq,
            "session_id": session_id,
            "type": draft.type,
            "created_at": created_at,
            "parent_seq": draft.parent_seq,
            "actor": draft.actor,
            "idempotency_key": idempotency_key,
            "payload": draft.payload,
        }
    )
    return cast("Event", envelope)


def event_from_json(data: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(data)


def event_line(event: Any) -> str:
    """One event as `belay events --json` prints it (and the operator exports it for `kubectl
    belay events`): seq, type, created_at, actor, parent_seq, payload."""
    return json.dumps(
        {
            "seq": event.seq,
            "type": event.type,
            "created_at": event.created_at.isoformat(),
            "actor": event.actor.model_dump(mode="json"),
            "parent_seq": event.parent_seq,
            "payload": event.payload.model_dump(mode="json"),
        },
        sort_keys=True,
    )
