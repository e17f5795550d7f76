"""The hash chain: a record changed behind the store's back (an event edited, forged, deleted, the
tail cut off) fails every read with RecordCorrupt naming the seq; a record key makes even a
careful forger, who recomputes the chain, fail."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from belay.journal.events import Event, EventDraft, Lifecycle, LifecycleKind, Note, NoteKind, Task, TaskStatus
from belay.stores.base import EventStore, RecordCorrupt
from belay.stores.integrity import GENESIS, Chain, link_of
from tests.conformance.backends import EventBackend

HANG_GUARD_SECONDS = 30
EVENTS = 12


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


async def written(store: EventStore, session: str) -> list[Event]:
    """Twelve events in four batches, a task among them."""
    events: list[Event] = []
    for batch in range(3):
        events += await store.append(session, [note(f"b{batch}-{i}") for i in range(3)])
    events += await store.append(
        session, [note("b3-0"), EventDraft(payload=Task(task_id="t", status=TaskStatus.DONE)), note("b3-2")]
    )
    assert [e.seq for e in events] == list(range(1, EVENTS + 1))
    return events


def key_file(tmp_path: Path, name: str, key: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(key)
    return str(path)


def forged(session: str, seq: int, previous_link: bytes, chain: Chain) -> tuple[bytes, bytes]:
    """A session_completed event at `seq`, linked the way the store links events, with `chain`."""
    fields = json.dumps(
        {
            "seq": seq,
            "session_id": session,
            "created_at": "2030-01-01T00:00:00Z",
            "idempotency_key": None,
            "parent_seq": None,
            "actor": {"kind": "harness"},
            "type": "lifecycle",
            "payload": Lifecycle(kind=LifecycleKind.SESSION_COMPLETED).model_dump(mode="json"),
        },
        separators=(",", ":"),
    )[1:].encode()
    return chain.stored(previous_link, fields)


async def corrupt_at(store: EventStore, session: str, from_seq: int = 1) -> int:
    with pytest.raises(RecordCorrupt) as refused:
        await store.read(session, from_seq)
    assert refused.value.session_id == session
    assert f"at seq {refused.value.seq}" in str(refused.value)
    return refused.value.seq


async def test_an_intact_record_reads_back_with_its_links(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    events = await written(event_store, session)
    assert await event_store.read(session) == events
    assert await event_backend.open_another().read(session) == events
    assert len({e.chain for e in events}) == EVENTS and all(len(e.chain) == 64 for e in events)
    stored = await event_backend.raw.events(session)
    assert [link_of(session, seq, stored[seq]).decode() for seq in sorted(stored)] == [
        e.chain for e in events
    ]
    assert (await event_backend.raw.head(session))[:2] == (EVENTS, events[-1].chain.encode())
    # Partial reads check what they read from the event before them.
    assert await event_store.read(session, 5, 8) == events[4:8]
    assert await event_store.read(session, 4, limit=2) == events[3:5]
    assert await event_store.tail(session, 3) == events[-3:]
    assert await event_store.latest(session, "task") == events[10]


async def test_an_edited_event_fails_every_read_that_covers_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await written(event_store, session)
    stored = await event_backend.raw.events(session)
    await event_backend.raw.put_event(session, 5, stored[5].replace(b"b1-1", b"b1-X"))
    assert await corrupt_at(event_store, session) == 5
    assert await corrupt_at(event_backend.open_another(), session, from_seq=3) == 5
    with pytest.raises(RecordCorrupt, match="at seq 5"):
        await event_store.read(session, 5, 5)
    # The task at seq 11 edited: the latest index leads to it, and is refused there.
    await event_backend.raw.put_event(session, 11, stored[11].replace(b'"done"', b'"failed"'))
    with pytest.raises(RecordCorrupt, match="at seq 11"):
        await event_store.latest(session, "task")
    with pytest.raises(RecordCorrupt, match="at seq 11"):
        await event_store.tail(session, 2)


async def test_a_watch_stops_at_an_edited_event(event_backend: EventBackend, event_store: EventStore) -> None:
    session = event_backend.session()
    await written(event_store, session)
    stored = await event_backend.raw.events(session)
    await event_backend.raw.put_event(session, 7, stored[7].replace(b"b2-0", b"b2-X"))
    seen: list[int] = []

    async def follow() -> None:
        async for event in event_store.watch(session):
            seen.append(event.seq)

    with pytest.raises(RecordCorrupt, match="at seq 7"):
        await asyncio.wait_for(follow(), HANG_GUARD_SECONDS)
    # Pages are checked whole before any of their events is delivered: nothing from 7 on gets out.
    assert seen == list(range(1, len(seen) + 1)) and all(seq < 7 for seq in seen)


async def test_a_deleted_middle_event_is_missing_at_its_seq(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await written(event_store, session)
    await event_backend.raw.delete_event(session, 6)
    assert await corrupt_at(event_store, session) == 6
    assert await corrupt_at(event_store, session, from_seq=6) == 6
    # A read starting right after it has nothing to follow from.
    assert await corrupt_at(event_store, session, from_seq=7) == 6


async def test_a_truncated_tail_is_missing_against_the_head(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await written(event_store, session)
    for seq in (10, 11, 12):
        await event_backend.raw.delete_event(session, seq)
    with pytest.raises(RecordCorrupt, match="from seq 10 to 12 are missing") as refused:
        await event_store.read(session)
    assert refused.value.seq == 10
    with pytest.raises(RecordCorrupt, match="at seq 10"):
        await event_store.tail(session, 5)


async def test_a_forged_event_is_refused_where_it_stands(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """A session_completed inserted at seq 13 by someone who knows the format but not how the
    store links events (copied links), then one linked with a wrong key and the head moved to it."""
    session = event_backend.session()
    events = await written(event_store, session)
    stored = await event_backend.raw.events(session)
    unlinked = stored[12].replace(b'"seq":12', b'"seq":13')
    await event_backend.raw.put_event(session, 13, unlinked)
    assert await corrupt_at(event_store, session) == 13

    value, link = forged(session, 13, events[-1].chain.encode(), Chain(b"a guess at the key, 32 bytes or so"))
    await event_backend.raw.put_event(session, 13, value)
    other = Chain(b"a guess at the key, 32 bytes or so")
    await event_backend.raw.put_head(session, 13, link, other.seal(13, link))
    assert await corrupt_at(event_store, session) == 13


async def test_without_a_key_a_careful_forger_passes_and_with_one_is_refused(
    event_backend: EventBackend, tmp_path: Path
) -> None:
    """The record key is the wall against someone who can write the store and knows how links
    are made: with it switched off (no key), a forged session_completed linked with the empty key
    and a matching head reads back as genuine; with a key, the same forgery is refused."""
    for key in (None, b"k" * 32):
        session = event_backend.session(f"key-{bool(key)}")
        spec = {"record_key_file": key_file(tmp_path, "record.key", key)} if key else {}
        store = event_backend.open_another(**spec) if key else event_backend.store
        events = await written(store, session)
        forger = Chain(None)  # all a forger without the key can do
        value, link = forged(session, EVENTS + 1, events[-1].chain.encode(), forger)
        await event_backend.raw.put_event(session, EVENTS + 1, value)
        await event_backend.raw.put_head(session, EVENTS + 1, link, forger.seal(EVENTS + 1, link))
        if key is None:
            read = await store.read(session)
            assert read[-1].type == "lifecycle" and read[-1].seq == EVENTS + 1
        else:
            assert await corrupt_at(store, session) == EVENTS + 1


async def test_with_a_key_a_cut_tail_with_its_head_moved_back_is_refused(
    event_backend: EventBackend, tmp_path: Path
) -> None:
    """Removing the last events and pointing the head at the new last one needs a new seal."""
    session = event_backend.session()
    store = event_backend.open_another(record_key_file=key_file(tmp_path, "record.key", b"s" * 40))
    events = await written(store, session)
    for seq in (11, 12):
        await event_backend.raw.delete_event(session, seq)
    link = events[9].chain.encode()
    await event_backend.raw.put_head(session, 10, link, Chain(None).seal(10, link))
    with pytest.raises(RecordCorrupt, match="head record") as refused:
        await store.read(session)
    assert refused.value.seq == 10


async def test_a_record_read_with_another_key_is_refused_from_its_first_event(
    event_backend: EventBackend, tmp_path: Path
) -> None:
    session = event_backend.session()
    writer = event_backend.open_another(record_key_file=key_file(tmp_path, "a.key", b"a" * 32))
    events = await written(writer, session)
    assert await writer.read(session) == events
    for reader in (
        event_backend.open_another(record_key_file=key_file(tmp_path, "b.key", b"b" * 32)),
        event_backend.store,  # no key at all
    ):
        with pytest.raises(RecordCorrupt, match="BELAY_RECORD_KEY_FILE"):
            await reader.read(session)


async def test_appends_continue_the_chain_across_handles_and_batches(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Each event's link follows the previous event's, whoever wrote it."""
    session = event_backend.session()
    other = event_backend.open_another()
    for i in range(6):
        await (event_store if i % 2 else other).append(session, [note(f"n{i}-a"), note(f"n{i}-b")])
    stored = await event_backend.raw.events(session)
    link = GENESIS
    chain = Chain(None)
    for seq in sorted(stored):
        value, link = chain.stored(link, stored[seq][len(b'{"chain":"') + 66 :])
        assert value == stored[seq]
    assert len(await event_store.read(session)) == 12
