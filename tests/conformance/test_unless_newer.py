"""Appends decided on the latest event of a type (`unless_newer`): written while that event is still
the latest of its type, refused (Superseded) once another writer recorded a newer one, the check
made in the append's own transaction; against other handles, in one process and in several
sessions at once."""

from __future__ import annotations

import asyncio

import pytest

from belay.journal.events import Event, EventDraft, ExecutorChange, Note, NoteKind
from belay.stores.base import ClaimTaken, EventStore, StaleLease, Superseded
from tests.conformance.backends import EventBackend

MOVE = ExecutorChange.EVENT_TYPE
# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 60


def step(text: str) -> list[EventDraft]:
    return [EventDraft(payload=Note(note_id=text, kind=NoteKind.DECISION, text=text))]


def move(to_type: str) -> list[EventDraft]:
    return [EventDraft(payload=ExecutorChange(from_type="scripted", to_type=to_type))]


def texts(events: list[Event]) -> list[str]:
    return [e.payload.text for e in events if isinstance(e.payload, Note)]


async def test_an_append_is_refused_once_a_newer_event_of_its_type_is_recorded(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    other = event_backend.open_another()
    # None of the type yet: an append decided on "none" is written, and events of other types
    # (its own included) do not supersede it.
    await event_store.append(session, step("first"), unless_newer=(MOVE, 0))
    await event_store.append(session, step("second"), unless_newer=(MOVE, 0))
    [moved] = await other.append(session, move("openai-agents"))
    with pytest.raises(Superseded) as refused:
        await event_store.append(session, [*step("late"), *step("later")], unless_newer=(MOVE, 0))
    assert (refused.value.session_id, refused.value.event_type) == (session, MOVE)
    assert (refused.value.seen, refused.value.latest) == (0, moved.seq)
    # Decided on the move it saw: written, until a newer move is recorded.
    await event_store.append(session, step("after the move"), unless_newer=(MOVE, moved.seq))
    [again] = await other.append(session, move("scripted"))
    with pytest.raises(Superseded) as refused:
        await event_store.append(session, step("stale"), unless_newer=(MOVE, moved.seq))
    assert (refused.value.seen, refused.value.latest) == (moved.seq, again.seq)
    # A seq that is not the latest of its type at all is refused too.
    with pytest.raises(Superseded):
        await event_store.append(session, step("wrong"), unless_newer=(MOVE, again.seq + 1))
    # The same check in another session of the same store sees only that session's events.
    await event_store.append(event_backend.session("elsewhere"), step("there"), unless_newer=(MOVE, 0))
    assert texts(await event_store.read(session)) == ["first", "second", "after the move"]


async def test_a_stale_lease_and_a_taken_claim_come_first_and_a_replay_is_answered(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    lease = await event_store.acquire_lease(session, "attempt-1")
    original = await event_store.append(
        session, step("grant"), idempotency_key="k1", claim="approval/a", unless_newer=(MOVE, 0)
    )
    [moved] = await event_backend.open_another().append(session, move("openai-agents"))
    # The replay of a batch written before the move is answered: it writes nothing.
    replayed = await event_store.append(
        session, step("grant"), idempotency_key="k1", claim="approval/a", unless_newer=(MOVE, 0)
    )
    assert replayed == original
    with pytest.raises(ClaimTaken):
        await event_store.append(session, step("reject"), claim="approval/a", unless_newer=(MOVE, 0))
    await event_store.append(session, step("fenced"), lease=lease.number, unless_newer=(MOVE, moved.seq))
    await event_store.acquire_lease(session, "attempt-2")
    with pytest.raises(StaleLease):
        await event_store.append(session, step("stale"), lease=lease.number, unless_newer=(MOVE, 0))
    assert texts(await event_store.read(session)) == ["grant", "fenced"]


async def test_a_refused_append_does_not_hold_back_the_appends_beside_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Appends of several sessions made at once through one handle (etcd sends those that come
    while one is in flight as one transaction): the one decided on a superseded record is refused,
    the others are written."""
    first, refused, *others = [event_backend.session(f"s{n}") for n in range(5)]
    [moved] = await event_store.append(refused, move("openai-agents"))
    results = await asyncio.wait_for(
        asyncio.gather(
            event_store.append(first, step(first)),  # in flight while the others come
            *(event_store.append(s, step(s), unless_newer=(MOVE, 0)) for s in [refused, *others]),
            return_exceptions=True,
        ),
        HANG_GUARD_SECONDS,
    )
    assert isinstance(results[1], Superseded), results[1]
    assert results[1].latest == moved.seq
    assert texts(await event_store.read(refused)) == []
    for session, result in zip([first, *others], [results[0], *results[2:]], strict=True):
        assert not isinstance(result, BaseException), result
        assert texts(await event_store.read(session)) == [session]


async def test_racing_deciders_each_write_only_on_the_latest_they_saw(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Four deciders on independent handles, each recording its step only if no move was recorded
    since it looked, while a fifth records moves: no step lands after a move its decider had not
    seen."""
    session = event_backend.session()
    handles = [event_store, *(event_backend.open_another() for _ in range(4))]
    rounds = 15

    async def decider(number: int) -> None:
        store = handles[number]
        for index in range(rounds):
            latest = await store.latest(session, MOVE)
            seen = latest.seq if latest is not None else 0
            # The note says which move its decider saw, so the record shows what it decided on.
            note = f"{number}:{index}:{seen}"
            try:
                await store.append(session, step(note), unless_newer=(MOVE, seen))
            except Superseded as refused:
                assert refused.seen == seen and refused.latest > seen

    async def mover() -> None:
        for index in range(rounds):
            await handles[4].append(session, move(f"executor-{index}"))
            await asyncio.sleep(0)

    await asyncio.wait_for(asyncio.gather(mover(), *(decider(n) for n in range(4))), HANG_GUARD_SECONDS)
    latest_move = 0
    steps = 0
    for event in await event_store.read(session):
        if isinstance(event.payload, ExecutorChange):
            latest_move = event.seq
        elif isinstance(event.payload, Note):
            steps += 1
            assert int(event.payload.text.split(":")[2]) == latest_move, (event.seq, event.payload.text)
    assert steps > 0
