"""What a session's record shows about how it went: whether it succeeded, what it delivered,
whether a step or an operation was done twice, how many attempts it took, and what it holds at a
provider. Pure functions of the events; the interruption drill (on one machine and in a cluster)
and the tests judge a record with them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from belay.journal.events import (
    Event,
    LifecycleEvent,
    RemoteEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.phase import Phase, phase_of
from belay.journal.state import fold


def completed(events: Sequence[Event]) -> bool:
    """Whether the record proves the session Succeeded (belay.journal.proof): a run's own claim
    that it completed the session is not enough."""
    claimed = any(isinstance(e, LifecycleEvent) and e.payload.kind == "session_completed" for e in events)
    return claimed and phase_of(fold(events)) == Phase.SUCCEEDED


def deliverables(events: Sequence[Event]) -> dict[str, str]:
    """Deliverable name -> the sha256 of its bytes."""
    return {
        e.payload.name: e.payload.ref.sha256
        for e in events
        if e.type == "artifact" and getattr(e.payload, "deliverable", False)
    }


def steps_run_twice(events: Sequence[Event]) -> list[str]:
    """Steps completed more than once, and operations requested or answered more than once."""
    done = Counter(
        e.payload.task_id
        for e in events
        if isinstance(e, TaskEvent) and "/" in e.payload.task_id and e.payload.status in ("done", "verified")
    )
    requests = Counter(e.payload.operation_id for e in events if isinstance(e, ToolRequestEvent))
    results = Counter(e.payload.operation_id for e in events if isinstance(e, ToolResultEvent))
    return sorted(
        [f"step {k} completed {n} times" for k, n in done.items() if n > 1]
        + [f"{k} requested {n} times" for k, n in requests.items() if n > 1]
        + [f"{k} answered {n} times" for k, n in results.items() if n > 1]
    )


def attempts(events: Sequence[Event]) -> int:
    return max((e.actor.attempt for e in events), default=0)


def remote_sessions(events: Sequence[Event]) -> dict[str, str]:
    """Subagent -> the remote session the record holds for it."""
    return {
        e.payload.subagent: e.payload.remote_session_id
        for e in events
        if isinstance(e, RemoteEvent) and e.payload.kind == "session"
    }


def deliveries(events: Sequence[Event], operation_id: str) -> list[RemoteEvent]:
    """The deliveries of an operation's result to the provider."""
    return [
        e
        for e in events
        if isinstance(e, RemoteEvent)
        and e.payload.kind == "result_delivered"
        and e.payload.operation_id == operation_id
    ]


def step_rounds(events: Sequence[Event]) -> dict[str, int]:
    """Plan step -> the round it is in (a scope change or a rejection that invalidates a step's
    work opens its next round). A subagent's own task is not a step."""
    return {t.task_id: t.round for t in fold(events).tasks.values() if t.task_id != t.owner}


def steps_done(events: Sequence[Event]) -> set[str]:
    """The plan steps the record shows done (or verified) in their current round."""
    return {
        t.task_id
        for t in fold(events).tasks.values()
        if t.task_id != t.owner and t.status.value in ("done", "verified")
    }


def steps_depending_on(events: Sequence[Event], touched: set[str]) -> set[str]:
    """The plan steps whose request parts (the goal counts as one) include one of `touched`; a
    step that names none depends on all of them."""
    return {
        t.task_id
        for t in fold(events).tasks.values()
        if t.task_id != t.owner and (t.request_parts is None or touched & set(t.request_parts))
    }


def done_after(events: Sequence[Event], seq: int) -> Counter[str]:
    """Plan step -> how many times the record shows it done (or verified) after `seq`."""
    return Counter(
        e.payload.task_id
        for e in events
        if isinstance(e, TaskEvent)
        and e.seq > seq
        and "/" in e.payload.task_id
        and e.payload.status in ("done", "verified")
    )


def requested_after(events: Sequence[Event], seq: int) -> dict[str, list[str]]:
    """Plan step -> the operations it requested after `seq`."""
    found: dict[str, list[str]] = {}
    for e in events:
        if isinstance(e, ToolRequestEvent) and e.seq > seq and e.payload.step:
            found.setdefault(e.payload.step, []).append(e.payload.operation_id)
    return found


def unsafe_answered_twice(events: Sequence[Event]) -> list[str]:
    """Each unsafe operation the record answered more than once."""
    unsafe = {
        e.payload.operation_id
        for e in events
        if isinstance(e, ToolRequestEvent) and e.payload.effect == "unsafe"
    }
    answered = Counter(
        e.payload.operation_id
        for e in events
        if isinstance(e, ToolResultEvent) and e.payload.operation_id in unsafe
    )
    return sorted(f"{op} answered {n} times" for op, n in answered.items() if n > 1)


def tickets_recorded(events: Sequence[Event]) -> int:
    """The tickets the record shows filed: each `create_ticket` operation answered ok, once."""
    tickets = {
        e.payload.operation_id
        for e in events
        if isinstance(e, ToolRequestEvent) and e.payload.tool == "create_ticket"
    }
    return len(
        {
            e.payload.operation_id
            for e in events
            if isinstance(e, ToolResultEvent) and e.payload.ok and e.payload.operation_id in tickets
        }
    )
