"""Lease renewal, in the EventStore conformance suite: a running attempt proves it is alive by
renewing its lease; every reader sees the last renewal without reading the history."""

from __future__ import annotations

import pytest

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import EventStore, StaleLease
from tests.conformance.backends import EventBackend


async def test_a_renewal_is_read_back_and_replaced_by_the_next(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    assert await event_store.lease_renewal(session) is None
    lease = await event_store.acquire_lease(session, "attempt-1")
    first = await event_store.renew_lease(session, lease.number)
    assert (first.session_id, first.number) == (session, lease.number)
    assert await event_store.lease_renewal(session) == first
    second = await event_store.renew_lease(session, lease.number)
    assert second.renewed_at >= first.renewed_at
    assert await event_store.lease_renewal(session) == second
    # Another handle (another process, in a real deployment) reads the same renewal.
    assert await event_backend.open_another().lease_renewal(session) == second


async def test_renewals_add_no_events(event_backend: EventBackend, event_store: EventStore) -> None:
    session = event_backend.session()
    lease = await event_store.acquire_lease(session, "attempt-1")
    await event_store.append(session, [EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text=""))])
    for _ in range(5):
        await event_store.renew_lease(session, lease.number)
    assert await event_store.last_seq(session) == 1
    assert len(await event_store.read(session)) == 1


async def test_only_the_current_lease_can_be_renewed(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    with pytest.raises(StaleLease):
        await event_store.renew_lease(session, 1)  # never acquired
    old = await event_store.acquire_lease(session, "attempt-1")
    renewed = await event_store.renew_lease(session, old.number)
    new = await event_store.acquire_lease(session, "attempt-2")
    with pytest.raises(StaleLease):
        await event_store.renew_lease(session, old.number)
    with pytest.raises(StaleLease):
        await event_store.renew_lease(session, new.number + 1)
    # The refused renewal left the last one in place; the reader compares its number.
    assert await event_store.lease_renewal(session) == renewed
    assert (await event_store.renew_lease(session, new.number)).number == new.number


async def test_sessions_renew_independently_and_deletion_removes_the_renewal(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    one, two = event_backend.session("one"), event_backend.session("two")
    lease_one = await event_store.acquire_lease(one, "a")
    lease_two = await event_store.acquire_lease(two, "b")
    await event_store.renew_lease(one, lease_one.number)
    assert await event_store.lease_renewal(two) is None
    await event_store.renew_lease(two, lease_two.number)
    await event_store.delete_session(one)
    assert await event_store.lease_renewal(one) is None
    assert await event_store.lease_renewal(two) is not None
    # The id starts over: no lease, no renewal to mistake for the new session's.
    with pytest.raises(StaleLease):
        await event_store.renew_lease(one, lease_one.number)
