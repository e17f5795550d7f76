"""The `belay` command line's reading and writing of its home: where a session's record and
artifacts are (the home's own stores, those the session's manifest names, or those `--events` /
`--artifacts` name), the record folded and the liveness of its attempt, the briefing followed as the
record moves on, and a person's decision appended under its claim."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from belay.api.agentsession import AgentSession
from belay.cli import terminal
from belay.cli.core import brief as brief_command
from belay.cli.core.decide import OnDeliverable
from belay.cli.core.errors import CommandError
from belay.cli.core.handover import change_event, moved_executor
from belay.cli.terminal import fail
from belay.executors.endpoints import check_model, model_endpoint, not_configured, standin_model_refusal
from belay.journal.decisions import DecisionError, decision_write
from belay.journal.events import (
    Actor,
    Approval,
    Event,
    EventDraft,
    OperationOutcome,
    Rejection,
    ScopeChange,
    Wait,
)
from belay.journal.handover import change_phrase, executor_label
from belay.journal.phase import ENDED_PHASES, HEARTBEAT_INTERVAL_S, Liveness, attempt_alive, phase_of
from belay.journal.state import SessionState, apply
from belay.local.children import reject_collected
from belay.local.liveness import local_liveness, reap_orphans
from belay.local.record import OpenedRecord, open_session, reading
from belay.local.runtime import LocalHome, unknown_session
from belay.stores.base import ClaimTaken


class Context:
    home: LocalHome = LocalHome.resolve(None)


def home_of(session_id: str) -> LocalHome:
    """Where the session's record and artifacts are: the stores its manifest names, else those
    `--events` / `--artifacts` name, else the home's own."""
    return Context.home.for_session(session_id)


def stop_orphans(home: LocalHome) -> None:
    """Stop the sandbox servers of dead attempts before doing anything else, and say so."""
    found = asyncio.run(
        reap_orphans(
            home.root / "sessions",
            lambda session_id: home.for_session(session_id).open_event_store(read_only=True),
        )
    )
    for reaped in found:
        terminal.echo(reaped.message(), err=True)


def known_session(session_id: str) -> OpenedRecord:
    """The session's record opened as every command opens it (`belay.local.record`), or one
    `error:` line: damaged (the store's own words), or unknown here."""
    home = home_of(session_id)
    opened = asyncio.run(open_session(home, session_id))
    if not opened.state.last_seq:
        raise fail(unknown_session(session_id, home))
    return opened


def known_record(session_id: str) -> tuple[OpenedRecord, list[Event]]:
    """The session opened, and every event of its record (the report's timeline)."""
    opened = known_session(session_id)

    async def read() -> list[Event]:
        async with reading(home_of(session_id)) as store:
            return await store.read(session_id)

    return opened, asyncio.run(read())


def known_state(session_id: str) -> SessionState:
    return known_session(session_id).state


# How often `belay sessions --watch` and `belay objective --watch` look again.


async def render_brief(state: SessionState, style: str, liveness: Liveness | None) -> str:
    home = home_of(state.session_id)
    children = await brief_command.children_of(home, state)
    return brief_command.render(brief_command.of_home(home, state, liveness, children), style)


def print_brief(session_id: str, style: str) -> None:
    opened = known_session(session_id)
    sys.stdout.write(asyncio.run(render_brief(opened.state, style, opened.liveness)) + "\n")


def read_liveness(session_id: str) -> Liveness:
    async def read() -> Liveness:
        store = home_of(session_id).open_event_store(read_only=True)
        try:
            return await local_liveness(store, session_id)
        finally:
            await store.close()

    return asyncio.run(read())


# A follower prints once per burst of events, not once per event.


FOLLOW_SETTLE_S = 0.3


async def follow_brief(session_id: str, style: str) -> None:
    """Print the briefing, then again whenever the record moves on or the phase changes without
    an event (an attempt that stops proving it is alive), until the session ends. The state is
    folded incrementally from the store's watch, which re-reads after any cut."""
    home = home_of(session_id)
    opened = await open_session(home, session_id)
    state, liveness = opened.state, opened.liveness
    if not state.last_seq:
        raise fail(unknown_session(session_id, home))
    store = home.open_event_store(read_only=True)
    sys.stdout.write(await render_brief(state, style, liveness) + "\n")
    sys.stdout.flush()
    arrived: asyncio.Queue[Event | None] = asyncio.Queue()
    first_new_seq = state.last_seq + 1

    # A timeout on the watch itself would close it; the pump keeps it open and the loop waits on
    # the queue instead. None in the queue means the watch ended (with an error to show).
    async def pump() -> None:
        try:
            async for event in store.watch(session_id, from_seq=first_new_seq):
                await arrived.put(event)
        finally:
            await arrived.put(None)

    async def next_event(timeout: float | None = None) -> Event:
        event = await asyncio.wait_for(arrived.get(), timeout)
        if event is None:
            pumping.result()  # raises what ended the watch
            raise fail("the event store's watch ended")
        return event

    pumping = asyncio.create_task(pump())
    shown = phase_of(state, liveness)
    try:
        while shown not in ENDED_PHASES:
            try:
                state = apply(state, await next_event(HEARTBEAT_INTERVAL_S))
            except TimeoutError:
                liveness = await local_liveness(store, session_id)
                if phase_of(state, liveness) == shown:
                    continue
            else:
                with contextlib.suppress(TimeoutError):
                    while True:
                        state = apply(state, await next_event(FOLLOW_SETTLE_S))
                liveness = await local_liveness(store, session_id)
            separator = "" if style == "json-lines" else f"--- seq {state.last_seq} ---\n"
            sys.stdout.write(separator + await render_brief(state, style, liveness) + "\n")
            sys.stdout.flush()
            shown = phase_of(state, liveness)
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        await store.close()


def append_decision(session_id: str, drafts: list[EventDraft], claim: str) -> None:
    """Append a decision under its claim; when someone else's decision holds the claim, fail
    with what they decided."""

    async def write() -> str | None:
        store = home_of(session_id).open_event_store()
        try:
            await store.append(session_id, drafts, claim=claim)
        except ClaimTaken as taken:
            [first] = await store.read(session_id, taken.seq, taken.seq)
            return decided_first(first)
        finally:
            await store.close()
        return None

    earlier = asyncio.run(write())
    if earlier is not None:
        raise fail(f"{earlier}; yours was not recorded (see `belay brief {session_id}`)")


def reject_collected_deliverable(session_id: str, target: OnDeliverable, by: str) -> str:
    """Turn down a deliverable the coordinator `session_id` collected from a child: the child runs
    again with the reason, and the coordinator's step that awaited it collects its next end. What
    was recorded, in words; fails with the decision that stands when someone was first."""
    named = target.deliverable
    home = home_of(session_id)
    found = asyncio.run(reject_collected(home, session_id, named.name, named.sha256, target.reason, by))
    if isinstance(found, int):

        async def first() -> str:
            store = home.open_event_store(read_only=True)
            try:
                [event] = await store.read(session_id, found, found)
            finally:
                await store.close()
            return decided_first(event)

        raise fail(f"{asyncio.run(first())}; yours was not recorded (see `belay brief {session_id}`)")
    return (
        f"rejected {named.name} (sha256 {named.sha256}); child session {found.child} runs again with "
        f"your reason (its step that made {found.in_child.name} is redone); the other children stand"
    )


def decided_first(event: Event) -> str:
    """What the decision that got there first decided, by whom, at which seq."""
    p: Any = event.payload
    who = (
        p.by if isinstance(p, Approval | OperationOutcome) and p.by else event.actor.name or event.actor.kind
    )
    match p:
        case Approval():
            decision = "granted" if p.granted else "rejected"
            return f"approval {p.approval_id} was already {decision} by {who} (seq {event.seq})"
        case OperationOutcome():
            verdict = "took effect" if p.succeeded else "did not take effect"
            return f"{p.operation_id} was already reconciled by {who}: it {verdict} (seq {event.seq})"
        case Wait():
            return f"{p.wait_id} was already answered by {who}: {p.reason} (seq {event.seq})"
        case Rejection():
            return f"{p.name} (sha256 {p.sha256}) was already rejected by {who}: {p.reason} (seq {event.seq})"
        case ScopeChange():
            return (
                f"request v{p.request_version} was already recorded by {who}: {p.summary} (seq {event.seq})"
            )
    return f"this was already decided by {who} (seq {event.seq})"


def decide(state: SessionState, item_id: str, granted: bool, reason: str, by: str) -> str:
    """Record one decision on an approval or a wait under its claim, so that of two people deciding
    at once, one decision is recorded and the other person is told who decided first."""
    try:
        write = decision_write(state, item_id, granted, reason, by)
    except DecisionError as error:
        raise fail(str(error)) from None
    append_decision(state.session_id, list(write.drafts), write.claim)
    return write.outcome


def reopened_after(session_id: str, seq: int) -> str:
    """What a decision just recorded reopened, and how the work goes on."""
    state = known_state(session_id)
    steps = [t.task_id for t in state.tasks.values() if t.reopened_seq is not None and t.reopened_seq > seq]
    if not steps:
        return ""
    return (
        f"; to redo: {', '.join(sorted(steps))}. A running harness takes it from here; "
        f"otherwise continue with `belay resume {session_id}`"
    )


MOVED_BY = Actor(kind="user", name="belay resume")


def move_executor(
    session: AgentSession, state: SessionState, to_type: str, model: str | None, reason: str
) -> None:
    """Record that the session's next attempt runs on `to_type` (`--model`), or refuse with why
    and record nothing: no such executor, one not configured here, a model its provider does not
    know, an ended session, or an attempt still live (it holds the lease, and moving it mid-step
    would split a step between two executors)."""
    session_id = session.session_id
    try:
        moved = moved_executor(session, to_type, model)
    except CommandError as error:
        raise fail(f"{error}; nothing was recorded") from None
    if moved is None:
        label = executor_label(session.spec.executor.type, session.spec.executor.model)
        terminal.echo(f"belay: {session_id} is on {label} already; it goes on there", err=True)
        return
    new = moved.spec.executor
    lifecycle = state.lifecycle
    if lifecycle.completed or lifecycle.failed:
        ended = phase_of(state).value
        raise fail(f"session {session_id} has ended ({ended}): there is no next attempt to move")
    liveness = read_liveness(session_id)
    if attempt_alive(state, liveness):
        raise fail(
            f"session {session_id} has a live attempt ({liveness.holder}, lease {liveness.lease}): stop "
            "it first (Ctrl-C or SIGTERM where it runs), then resume with --executor; nothing was recorded"
        )
    problem = not_configured(new.type, new.plan, os.environ, base_url=new.base_url)
    if problem is None and new.model:
        # Whoever will answer for the model is asked whether it knows it before anything is
        # recorded: the provider configured here, else the session's local stand-in, by its rule
        # (it starts beside the attempt, as a provider's service is already up).
        endpoint = model_endpoint(new.type, os.environ, base_url=new.base_url)
        if endpoint is not None:
            checked = check_model(new.type, endpoint, new.model)
            problem = checked.refusal
            if checked.unchecked is not None:
                terminal.echo(f"belay: {checked.unchecked}; going on", err=True)
        elif new.managed:
            problem = standin_model_refusal(new.type, new.model)
    if problem is not None:
        raise fail(f"{problem}; nothing was recorded")
    change = change_event(session, new, at_seq=state.last_seq, by=MOVED_BY.name or "", reason=reason)

    async def write() -> int:
        store = home_of(session_id).open_event_store()
        try:
            [event] = await store.append(session_id, [EventDraft(payload=change, actor=MOVED_BY)])
        finally:
            await store.close()
        return event.seq

    seq = asyncio.run(write())
    phrase = change_phrase(change.from_type, change.from_model, change.to_type, change.to_model)
    terminal.echo(f"belay: {session_id} {phrase} (recorded at seq {seq}); this attempt runs there", err=True)
