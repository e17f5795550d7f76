"""The record key's fingerprint, in the EventStore conformance suite: each store keeps the one of
the key its records are written with, once, and the guard the operator and the harness run refuses
a process holding another key (or none where the records are keyed) before it reads a record,
instead of finding every record corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import EventStore, RecordKeyMismatch
from belay.stores.key_guard import IN_A_CLUSTER, guard_record_key
from tests.conformance.backends import EventBackend


def keyed(event_backend: EventBackend, tmp_path: Path, name: str, key: bytes) -> EventStore:
    path = tmp_path / name
    path.write_bytes(key)
    return event_backend.open_another(record_key_file=str(path))


async def write_a_record(store: EventStore, session: str) -> None:
    await store.append(session, [EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="kept"))])


async def test_the_first_fingerprint_kept_stays(event_backend: EventBackend, tmp_path: Path) -> None:
    one = keyed(event_backend, tmp_path, "one.key", b"1" * 32)
    two = keyed(event_backend, tmp_path, "two.key", b"2" * 32)
    assert one.key_fingerprint() != two.key_fingerprint() != event_backend.store.key_fingerprint()
    # The fingerprint is no copy of the key, and the same key gives the same one in every handle.
    assert "1" * 32 not in one.key_fingerprint()
    assert keyed(event_backend, tmp_path, "again.key", b"1" * 32).key_fingerprint() == one.key_fingerprint()

    assert await one.kept_key_fingerprint() is None
    assert await one.keep_key_fingerprint() == one.key_fingerprint()
    # Written once: a later handle with another key reads the first one, and cannot replace it.
    assert await two.keep_key_fingerprint() == one.key_fingerprint()
    assert await two.kept_key_fingerprint() == one.key_fingerprint()
    assert await event_backend.open_another().kept_key_fingerprint() == one.key_fingerprint()


async def test_the_guard_refuses_another_key_or_none_and_lets_the_same_key_on(
    event_backend: EventBackend, tmp_path: Path
) -> None:
    session = event_backend.session()
    writer = keyed(event_backend, tmp_path, "a.key", b"a" * 32)
    await guard_record_key(writer, "the test's store", IN_A_CLUSTER)
    await write_a_record(writer, session)

    for other in (keyed(event_backend, tmp_path, "b.key", b"b" * 32), event_backend.store):
        with pytest.raises(RecordKeyMismatch) as refused:
            await guard_record_key(other, "the test's store", IN_A_CLUSTER)
        assert "\n" not in str(refused.value)
        assert "stores.recordKey.existingSecret" in str(refused.value)
    # Nothing was written by the refused ones; the right key goes on reading and writing.
    same = keyed(event_backend, tmp_path, "a-again.key", b"a" * 32)
    await guard_record_key(same, "the test's store", IN_A_CLUSTER)
    await write_a_record(same, session)
    assert len(await same.read(session)) == 2


async def test_a_keyed_store_written_before_any_fingerprint_is_checked_by_its_records(
    event_backend: EventBackend, tmp_path: Path
) -> None:
    """Records written before the store kept a fingerprint (an earlier Belay): the guard reads one
    under the key it holds, and keeps the fingerprint only when it reads whole."""
    await write_a_record(event_backend.store, event_backend.session())  # unkeyed, no fingerprint
    new_key = keyed(event_backend, tmp_path, "new.key", b"n" * 32)
    with pytest.raises(RecordKeyMismatch, match=r"stores\.recordKey"):
        await guard_record_key(new_key, "the test's store", IN_A_CLUSTER)
    assert await event_backend.store.kept_key_fingerprint() is None  # the refused key kept nothing

    await guard_record_key(event_backend.open_another(), "the test's store", IN_A_CLUSTER)
    assert await new_key.kept_key_fingerprint() == event_backend.store.key_fingerprint()
