"""A long record reads as one, whether its events are in the backend's own storage or archived
out of it (etcd with segments, see `EtcdEventStore.archive`): reads across every boundary, tails,
the latest-of-type index, idempotent replays, watches, deletion, and the hash chain throughout.
Every backend runs these; on the archiving one they also check that the archive happened."""

from __future__ import annotations

import asyncio

import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind, Task, TaskStatus
from belay.stores.base import EventStore, RecordCorrupt, SessionDeleted
from tests.conformance.backends import EventBackend
from tests.conformance.test_event_store import collect

HANG_GUARD_SECONDS = 30
BATCHES = 10
BATCH = 4
EVENTS = BATCHES * BATCH


def note(note_id: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=note_id, kind=NoteKind.FINDING, text=note_id))


def batch(number: int) -> list[EventDraft]:
    drafts = [note(f"b{number}-{i}") for i in range(BATCH)]
    if number == 1:  # the only task, early: its latest-of-type entry points into the archive
        drafts[1] = EventDraft(payload=Task(task_id="t", status=TaskStatus.DONE))
    return drafts


async def long_record(backend: EventBackend, store: EventStore, session: str) -> list[Event]:
    events: list[Event] = []
    for number in range(BATCHES):
        events += await store.append(session, batch(number), idempotency_key=f"step-{number}")
    assert [e.seq for e in events] == list(range(1, EVENTS + 1))
    if backend.archived_events is not None:
        archived = await backend.archived_events(session)
        assert 0 < archived < EVENTS, "the archiving backend archived the record's older part"
    return events


async def test_a_long_record_reads_as_one_across_its_archive(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    events = await long_record(event_backend, event_store, session)
    assert await event_store.read(session) == events
    assert await event_backend.open_another().read(session) == events
    for first in range(1, EVENTS + 1, 3):
        assert await event_store.read(session, first, first + 7) == events[first - 1 : first + 7]
        assert await event_store.read(session, first, limit=5) == events[first - 1 : first + 4]
    assert await event_store.tail(session, EVENTS - 2) == events[2:]
    assert await event_store.latest(session, "task") == events[5]
    assert await event_store.last_seq(session) == EVENTS
    # A retried append of an archived batch returns the original events and writes nothing.
    assert await event_store.append(session, batch(0), idempotency_key="step-0") == events[:BATCH]
    assert await event_store.last_seq(session) == EVENTS


async def test_a_watch_from_the_start_runs_through_the_archive_into_live_appends(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    events = await long_record(event_backend, event_store, session)
    watcher = asyncio.create_task(collect(event_store.watch(session), EVENTS + 3 * BATCH))
    middle = asyncio.create_task(collect(event_store.watch(session, 7), EVENTS - 6 + 3 * BATCH))
    for number in range(BATCHES, BATCHES + 3):
        await event_store.append(session, batch(number))  # archived as it goes, where that is done
    seen = await asyncio.wait_for(watcher, HANG_GUARD_SECONDS)
    assert seen[:EVENTS] == events
    assert seen == await event_store.read(session)
    assert await asyncio.wait_for(middle, HANG_GUARD_SECONDS) == seen[6:]


async def test_an_archived_event_edited_fails_the_reads_that_cover_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await long_record(event_backend, event_store, session)
    stored = await event_backend.raw.events(session)
    await event_backend.raw.put_event(session, 2, stored[2].replace(b"b0-1", b"b0-X"))
    with pytest.raises(RecordCorrupt, match="at seq 2"):
        await event_store.read(session)
    with pytest.raises(RecordCorrupt, match="at seq 2"):
        await event_backend.open_another().read(session, 2, 2)
    with pytest.raises(RecordCorrupt, match="at seq 2"):
        await event_store.read(session, 1, 3)


async def test_a_deleted_record_takes_its_archive_with_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await long_record(event_backend, event_store, session)
    watch = event_store.watch(session)
    assert len(await asyncio.wait_for(collect(watch, EVENTS), HANG_GUARD_SECONDS)) == EVENTS
    waiting = asyncio.create_task(anext(watch))
    await asyncio.sleep(0.01)
    await event_store.delete_session(session)
    with pytest.raises(SessionDeleted):
        await asyncio.wait_for(waiting, HANG_GUARD_SECONDS)
    assert await event_store.read(session) == []
    assert await event_backend.raw.events(session) == {}
    if event_backend.archived_events is not None:
        assert await event_backend.archived_events(session) == 0
    again = await event_store.append(session, [note("new")])
    assert [e.seq for e in again] == [1] and await event_store.read(session) == again
