"""The records a `SessionState` keeps: frozen models, one per entity the events describe, and the
limits of the bounded tuples they hold."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from belay.journal.events import (
    ArtifactRef,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    LifecycleKind,
    NoteKind,
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


def operation_ordinal(operation_id: str) -> tuple[str, int] | None:
    """Where an operation id counts calls, and its count there: `<place>.<k>` with k a decimal
    ordinal (`belay.journal.operations`); None for any other id (`.start`, `.done`, the
    `remote-<n>` of older records)."""
    place, _, last = operation_id.rpartition(".")
    if not place or not last.isascii() or not last.isdigit():
        return None
    return place, int(last)


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


DecisionKind = Literal["approval", "rejection", "answer", "reconciliation", "amend"]


class DecisionRecord(Record):
    """What a person decided: an approval or its refusal, a rejected deliverable, an answer to a
    wait, a verdict on an unknown outcome, an amended request; who, when and why."""

    seq: int
    kind: DecisionKind
    item: str  # the approval, deliverable, wait or operation decided on; "request vN" for an amend
    outcome: str  # "granted", "rejected", "yes", "no", "took effect", "took no effect", "v2"
    by: str = ""
    at: datetime | None = None
    reason: str = ""


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
    # The verification of the checkpoint that finished it in this round ("passed", "failed",
    # "not_run"; None before one): a step whose verification failed is not done, whatever its
    # status says (belay.journal.proof). Cleared when the step runs again or is reopened.
    verification: str | None = None
    verification_detail: str = ""  # "`<command>` (exit <code>)"


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
    # The executor's own id of the call (a provider's call id), when it is not the operation id.
    provider_call_id: str | None = None
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
    # A change of request that reopened the operation's step before anyone decided: the request
    # is no longer asked (its step makes its calls again), and nothing decides it now.
    withdrawn_seq: int | None = None
    withdrawn_because: str = ""

    @property
    def pending(self) -> bool:
        return self.decision is None and self.withdrawn_seq is None


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
    subagent: str | None = None  # who opened it
    owed: str | None = None  # the deliverable its subagent ended a turn without


class UserMessageRecord(Record):
    """A person's message to a subagent, answering the wait its turn's end opened."""

    wait_id: str
    subagent: str
    text: str
    by: str = ""
    seq: int
    at: datetime | None = None


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


class RepeatedFailure(Record):
    """Attempts in a row that ended abnormally at the same point with the same error (folded
    from their lifecycle entries: belay.journal.state.repeats)."""

    point: str  # where the record stood when each of them ended (failure_point)
    error: str  # what each of them ended with: reason and detail
    step: str = ""  # the step the session was at
    count: int = 1
    first_attempt: int | None = None
    last_attempt: int | None = None
    seq: int = 0  # the last of them


# The reason of a session_failed recorded when an attempt would be beyond recovery.maxAttempts.
MAX_ATTEMPTS = "MaxAttempts"


class Lifecycle(Record):
    attempt: int = 0  # the highest harness attempt seen
    model_id: str = ""  # what the latest attempt started deciding with (its harness_started)
    lease: int = 0
    harness_running: bool = False
    harness_starts: int = 0
    harness_lost: int = 0
    # Attempts that stopped cleanly when told to (harness_stopped): not lost, not counted against
    # recovery.maxAttempts.
    clean_stops: int = 0
    # Attempts counted before the session failed for exhausting recovery.maxAttempts: a person who
    # resumes it by hand after that gives it a fresh budget (belay.journal.state.attempts_counted).
    attempts_forgiven: int = 0
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
    end_detail: str = ""  # the session's end in words (its session_completed or session_failed)
    recent: tuple[LifecycleEntry, ...] = ()
    # A completed session whose work a scope change or a rejection invalidated is open again.
    reopened: int = 0
    reopened_seq: int | None = None
    reopened_because: str = ""
    # The latest abnormal ends of attempts, while each repeated the one before it.
    repeated_failure: RepeatedFailure | None = None


def attempts_counted(lifecycle: Lifecycle) -> int:
    """The attempts that count against recovery.maxAttempts, the next one included: every start but
    the clean stops (an attempt told to stop was not lost) and those spent before a failure for
    exhausting them (a person who resumes such a session by hand gives it a fresh budget)."""
    return lifecycle.harness_starts + 1 - lifecycle.clean_stops - lifecycle.attempts_forgiven


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
    # Each tool server's latest listing (server, sha256 of the listing), and the latest change of
    # one between two listings, as the harness described it.
    tool_listings: tuple[tuple[str, str], ...] = ()
    tools_changed: str = ""


class RemoteSessionRecord(Record):
    """The provider's session a managed executor holds for one subagent."""

    subagent: str
    executor: str
    remote_session_id: str
    endpoint: str = ""
    seq: int  # where it was recorded
    calls: int = 0  # calls the remote agent asked for
    refused: int = 0  # of which refused for arguments that do not fit
    not_run: int = 0  # of which answered "not run": asked on work a change reopened
    delivered: int = 0  # results (and refusals) the provider accepted
    interruptions: int = 0  # cut streams and errors the executor went on after
    failure: str = ""  # why the remote session cannot go on, when it cannot
    last_detail: str = ""
    # The remote sessions of this subagent it replaced, oldest first (each lost: gone, failed or
    # terminated), why the last of them was lost, and how many of them in a row, up to that one,
    # were lost before any took a result.
    replaced: tuple[str, ...] = ()
    replaced_because: str = ""
    lost_in_a_row: int = 0
    messages: int = 0  # a person's messages (and changes of the request) the provider accepted
    message_keys: tuple[str, ...] = ()  # the idempotency keys they went under
    # The turn that had ended when the last of them went: its end answers none of them.
    message_turn: str = ""


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
    deliverable: str = ""  # what the child owes
    seq: int
    phase: str = ""  # a child that ended: how
    deliverables: tuple[tuple[str, str], ...] = ()  # an ended child's (name, sha256)
    round: int = 1  # reopened by a change of its part: the round it runs in now

    def depends_on(self, touched: Collection[str]) -> bool:
        """Whether a change of the coordinator's request that touched these parts reopens this
        child: its request is its own goal and its part of the coordinator's request, so it
        depends on that part alone (a change of the coordinator's goal reopens no child)."""
        return self.part in touched


class ExecutorChangeRecord(Record):
    """The session moved to another executor from its next attempt on (`ExecutorChange`)."""

    seq: int
    from_type: str
    from_model: str | None = None
    to_type: str
    to_model: str | None = None
    executor: dict[str, Any] = Field(default_factory=dict)  # the new spec.executor, API spelling
    at_seq: int = 0
    by: str = ""
    reason: str = ""
    at: datetime | None = None
