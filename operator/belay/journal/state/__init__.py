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

The package, along its seams: `records` (the record models), `session` (`SessionState` and its
queries), `building` (records built without a second validation), `invalidation` (results, and
what a scope change or a rejection invalidates and reopens), `handlers` (one per event class), and
`reducer` (`apply`, `fold`).
"""

from belay.journal.state.records import (
    GOAL_PART,
    MAX_ATTEMPTS,
    RECENT_LIMIT,
    TASK_HISTORY_LIMIT,
    ApprovalRecord,
    ArtifactRecord,
    CheckpointRecord,
    DecisionRecord,
    ExecutorChangeRecord,
    Lifecycle,
    LifecycleEntry,
    NoteRecord,
    OperationRecord,
    Record,
    RejectionRecord,
    RemoteCallRecord,
    RemoteSessionRecord,
    Request,
    RequestChange,
    ResultRecord,
    ScopeChangeRecord,
    SessionLinkRecord,
    SubagentRecord,
    TaskRecord,
    TaskTransition,
    UserMessageRecord,
    WaitRecord,
    attempts_counted,
    operation_ordinal,
    operation_payload_sha256,
)
from belay.journal.state.reducer import FoldError, apply, fold
from belay.journal.state.session import EMPTY, SessionState

__all__ = [
    "EMPTY",
    "GOAL_PART",
    "MAX_ATTEMPTS",
    "RECENT_LIMIT",
    "TASK_HISTORY_LIMIT",
    "ApprovalRecord",
    "ArtifactRecord",
    "CheckpointRecord",
    "DecisionRecord",
    "ExecutorChangeRecord",
    "FoldError",
    "Lifecycle",
    "LifecycleEntry",
    "NoteRecord",
    "OperationRecord",
    "Record",
    "RejectionRecord",
    "RemoteCallRecord",
    "RemoteSessionRecord",
    "Request",
    "RequestChange",
    "ResultRecord",
    "ScopeChangeRecord",
    "SessionLinkRecord",
    "SessionState",
    "SubagentRecord",
    "TaskRecord",
    "TaskTransition",
    "UserMessageRecord",
    "WaitRecord",
    "apply",
    "attempts_counted",
    "fold",
    "operation_ordinal",
    "operation_payload_sha256",
]
