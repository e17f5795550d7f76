"""Appends of several sessions through one etcd store share a transaction while another is in
flight: each is still written whole or not at all, a conflict of one never loses another, and a
shared transaction stays within etcd's limits. Which appends shared a transaction is read back from
etcd itself: every key a transaction puts has that transaction's revision."""

from __future__ import annotations

import asyncio
import uuid

import aetcd
import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind
from belay.stores.etcd import EtcdEventStore

pytestmark = pytest.mark.testenv

HANG_GUARD_SECONDS = 30


def note(text: str, size: int = 0) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text="x" * size))


def fresh_store(endpoint: str) -> EtcdEventStore:
    return EtcdEventStore([endpoint], prefix=f"/shared-{uuid.uuid4().hex[:10]}")


async def event_revisions(endpoint: str, store: EtcdEventStore) -> dict[tuple[str, int], int]:
    """(session, seq) -> the revision its event key was written at."""
    async with aetcd.Client(host="127.0.0.1", port=int(endpoint.rsplit(":", 1)[1])) as client:
        kvs = await client.get_prefix(f"{store.prefix}/sessions/".encode())
    revisions = {}
    for kv in kvs:
        session, _, rest = kv.key.decode().removeprefix(f"{store.prefix}/sessions/").partition("/")
        if rest.startswith("events/"):
            revisions[(session, int(rest.removeprefix("events/")))] = kv.mod_revision
    return revisions


async def gathered(*appends: object) -> list[list[Event]]:
    return list(await asyncio.wait_for(asyncio.gather(*appends), HANG_GUARD_SECONDS))  # type: ignore[call-overload]


async def test_writers_of_eight_sessions_share_transactions_and_each_gets_its_own_dense_record(
    etcd_endpoint: str,
) -> None:
    store = fresh_store(etcd_endpoint)
    sessions = [f"s{n}" for n in range(8)]
    try:
        for round_number in range(5):
            results = await gathered(
                *(store.append(s, [note(f"{s}-{round_number}-{i}") for i in range(2)]) for s in sessions)
            )
            for session, events in zip(sessions, results, strict=True):
                assert [e.seq for e in events] == [2 * round_number + 1, 2 * round_number + 2]
                assert all(e.session_id == session for e in events)
        for session in sessions:
            stored = await store.read(session)
            assert [e.payload.note_id for e in stored if isinstance(e.payload, Note)] == [
                f"{session}-{r}-{i}" for r in range(5) for i in range(2)
            ]
        revisions = await event_revisions(etcd_endpoint, store)
        # In every round the first append went out alone and the seven others behind it together.
        first_round = {revisions[(s, 1)] for s in sessions}
        assert len(first_round) == 2
        assert len(set(revisions.values())) < len(sessions) * 5
    finally:
        await store.close()


async def test_a_stale_session_in_a_shared_transaction_costs_the_others_nothing(etcd_endpoint: str) -> None:
    store = fresh_store(etcd_endpoint)
    other = EtcdEventStore([etcd_endpoint], prefix=store.prefix)
    try:
        for session in ("w", "x", "y", "z"):
            await store.append(session, [note(f"{session}-1")])
        # Another writer moves x on: this store's remembered head of x is stale, so x's compare
        # fails the transaction it shares with y and z.
        await other.append("x", [note("x-by-other")])
        w, x, y, z = await gathered(
            store.append("w", [note("w-2")]),
            store.append("x", [note("x-2")]),
            store.append("y", [note("y-2")]),
            store.append("z", [note("z-2")]),
        )
        assert [e.seq for e in w + x + y + z] == [2, 3, 2, 2]
        assert [e.payload.note_id for e in await store.read("x") if isinstance(e.payload, Note)] == [
            "x-1",
            "x-by-other",
            "x-2",
        ]
        for session in ("y", "z"):
            assert [e.seq for e in await store.read(session)] == [1, 2]
    finally:
        await store.close()
        await other.close()


async def test_a_shared_transaction_stays_within_the_operation_and_size_limits_of_etcd(
    etcd_endpoint: str,
) -> None:
    """Four batches of 60 events are 240 puts, above etcd's 128 operations per transaction; three
    batches of 100 events of 8 KiB are 2.4 MiB, above its 1.5 MiB per request. Each fits alone."""
    store = fresh_store(etcd_endpoint)
    try:
        many = await gathered(
            *(store.append(f"many-{n}", [note(f"m{n}-{i}") for i in range(60)]) for n in range(5))
        )
        assert all([e.seq for e in events] == list(range(1, 61)) for events in many)
        large = await gathered(
            *(store.append(f"large-{n}", [note(f"l{n}-{i}", 8000) for i in range(100)]) for n in range(4))
        )
        assert all(len(events) == 100 for events in large)
        for n in range(4):
            assert len(await store.read(f"large-{n}")) == 100
    finally:
        await store.close()


async def test_an_append_cancelled_while_it_waits_for_a_transaction_is_never_written(
    etcd_endpoint: str,
) -> None:
    store = fresh_store(etcd_endpoint)
    try:
        in_flight = asyncio.ensure_future(store.append("first", [note("first")]))
        await asyncio.sleep(0)  # the first append's transaction is on its way
        waiting = asyncio.ensure_future(store.append("waiting", [note("waiting")]))
        behind = asyncio.ensure_future(store.append("behind", [note("behind")]))
        await asyncio.sleep(0)  # both are queued behind it
        waiting.cancel()
        await asyncio.wait_for(asyncio.gather(in_flight, behind), HANG_GUARD_SECONDS)
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await store.read("waiting") == []
        assert [e.seq for e in await store.read("behind")] == [1]
        assert [e.seq for e in await store.append("waiting", [note("again")])] == [1]
    finally:
        await store.close()
