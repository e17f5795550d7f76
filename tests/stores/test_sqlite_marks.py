"""The high-water mark of a SQLite record (`belay.stores.sqlite.marks`): a record put back to an
earlier state of itself that is whole (its WAL lost, an older copy of the file restored) is
RecordCorrupt naming the mark, on every read and every append, instead of a record that never
went further."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import RecordCorrupt, StaleLease
from belay.stores.sqlite import SqliteEventStore
from belay.stores.sqlite.marks import SLOT_BYTES, marks_directory

KEY = b"k" * 32


def notes(prefix: str, count: int) -> list[EventDraft]:
    return [
        EventDraft(payload=Note(note_id=f"{prefix}-{i}", kind=NoteKind.FINDING, text=""))
        for i in range(count)
    ]


def lose_the_wal(home: Path, into: Path) -> Path:
    """What a lost WAL leaves: the main file as it is on disk, and the marks beside it."""
    into.mkdir()
    shutil.copyfile(home / "events.db", into / "events.db")
    shutil.copytree(marks_directory(home / "events.db"), marks_directory(into / "events.db"))
    return into / "events.db"


def copy_of(path: Path, into: Path) -> Path:
    """A whole copy of the record as it is now (a backup)."""
    into.mkdir(exist_ok=True)
    copy = into / path.name
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return copy


async def six_events_three_in_the_wal(path: Path) -> SqliteEventStore:
    """Three durable appends checkpointed into the main file, then three more in the WAL only;
    the store is left open, so nothing checkpoints them."""
    first = SqliteEventStore(path, record_key=KEY)
    await first.append("s", notes("a", 3))
    await first.close()  # the last connection to close checkpoints the WAL into the file
    store = SqliteEventStore(path, record_key=KEY)
    for index in range(3):
        await store.append("s", notes(f"b{index}", 1))
    return store


async def test_a_lost_wal_is_record_corrupt_naming_the_mark_on_every_read_and_append(tmp_path: Path) -> None:
    store = await six_events_three_in_the_wal(tmp_path / "home" / "events.db")
    try:
        lost = lose_the_wal(tmp_path / "home", tmp_path / "lost")
        assert await store.last_seq("s") == 6  # the record with its WAL is whole
    finally:
        await store.close()

    mark = marks_directory(lost) / SqliteEventStore(lost, record_key=KEY, read_only=True).marks.path("s").name
    for read_only in (True, False):
        reader = SqliteEventStore(lost, record_key=KEY, read_only=read_only)
        try:
            for read in (
                reader.read("s"),
                reader.tail("s", 2),
                reader.last_seq("s"),
                reader.latest("s", "note"),
            ):
                with pytest.raises(RecordCorrupt) as refused:
                    await read
                assert refused.value.seq == 4
                assert str(mark) in str(refused.value) and "records seq 6" in str(refused.value)
                assert "remove the mark" in str(refused.value)  # the way out
        finally:
            await reader.close()

    writer = SqliteEventStore(lost, record_key=KEY)
    try:
        with pytest.raises(RecordCorrupt):
            await writer.append("s", notes("c", 1))
    finally:
        await writer.close()
    conn = sqlite3.connect(lost)
    try:  # the refused append wrote nothing
        assert conn.execute("SELECT max(seq) FROM events").fetchone()[0] == 3
    finally:
        conn.close()


async def test_removing_the_mark_accepts_the_loss_and_the_record_goes_on(tmp_path: Path) -> None:
    store = await six_events_three_in_the_wal(tmp_path / "home" / "events.db")
    try:
        lost = lose_the_wal(tmp_path / "home", tmp_path / "lost")
    finally:
        await store.close()
    reader = SqliteEventStore(lost, record_key=KEY)
    try:
        with pytest.raises(RecordCorrupt):
            await reader.read("s")
    finally:
        await reader.close()

    shutil.rmtree(marks_directory(lost))
    writer = SqliteEventStore(lost, record_key=KEY)
    try:
        assert [e.seq for e in await writer.read("s")] == [1, 2, 3]
        assert [e.seq for e in await writer.append("s", notes("c", 1))] == [4]
        assert writer.marks.read("s") is not None and writer.marks.read("s").seq == 4  # type: ignore[union-attr]
    finally:
        await writer.close()


async def test_an_older_copy_written_on_since_is_corrupt_at_the_marked_seq(tmp_path: Path) -> None:
    path = tmp_path / "home" / "events.db"
    store = SqliteEventStore(path, record_key=KEY)
    try:
        await store.append("s", notes("a", 3))
        backup = copy_of(path, tmp_path / "backup")
        await store.append("s", notes("b", 3))
    finally:
        await store.close()
    # The backup, written on elsewhere past the mark's seq, then put in the record's place.
    elsewhere = SqliteEventStore(backup, record_key=KEY)
    try:
        await elsewhere.append("s", notes("c", 4))
    finally:
        await elsewhere.close()
    path.unlink()
    shutil.copyfile(backup, path)

    reader = SqliteEventStore(path, record_key=KEY, read_only=True)
    try:
        with pytest.raises(RecordCorrupt) as refused:
            await reader.read("s")
        assert refused.value.seq == 6 and "is not the one its mark" in str(refused.value)
    finally:
        await reader.close()


async def test_an_emptied_record_with_a_mark_is_corrupt_not_new(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    try:
        await store.append("s", notes("a", 2))
    finally:
        await store.close()
    with path.open("r+b") as record:
        record.truncate(0)
    reader = SqliteEventStore(path, read_only=True)
    try:
        with pytest.raises(RecordCorrupt) as refused:
            await reader.last_seq("s")
        assert refused.value.seq == 1 and "holds no event of it" in str(refused.value)
        assert await reader.last_seq("other") == 0  # a session never recorded is only new
    finally:
        await reader.close()


async def test_only_durable_commits_move_the_mark_and_a_refused_append_never_does(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    try:
        lease = await store.acquire_lease("s", "attempt-1")
        await store.append("s", notes("a", 2), lease=lease.number)
        assert store.marks.read("s").seq == 2  # type: ignore[union-attr]
        await store.append("s", notes("relaxed", 3), durable=False)
        assert store.marks.read("s").seq == 2  # type: ignore[union-attr]
        with pytest.raises(StaleLease):
            await store.append("s", notes("stale", 1), lease=lease.number + 1)
        assert store.marks.read("s").seq == 2  # type: ignore[union-attr]
        await store.append("s", notes("b", 1))  # its fsync covers the relaxed ones before it
        assert store.marks.read("s").seq == 6  # type: ignore[union-attr]
        assert store.marks.read("never") is None
    finally:
        await store.close()
    # Without an fsync at each durable commit, a machine crash could take back what a mark
    # records: such a store keeps none.
    normal = SqliteEventStore(tmp_path / "normal.db", synchronous="NORMAL")
    try:
        await normal.append("s", notes("a", 2))
        assert not marks_directory(tmp_path / "normal.db").exists()
    finally:
        await normal.close()


async def test_a_torn_or_forged_slot_is_passed_over_for_the_other(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path, record_key=KEY)
    try:
        await store.append("s", notes("a", 1))
        await store.append("s", notes("b", 1))
        mark_file = store.marks.path("s")
        data = bytearray(mark_file.read_bytes())
        newest = 0 if b" 2 " in data[:SLOT_BYTES] else 1
        torn = data[:]
        torn[newest * SLOT_BYTES + 20 : newest * SLOT_BYTES + 40] = b"\0" * 20
        mark_file.write_bytes(bytes(torn))
        assert store.marks.read("s").seq == 1  # type: ignore[union-attr]
    finally:
        await store.close()
    # A mark sealed under another key (or none) holds no mark of this record: damage, as the
    # record's own chain is under another key.
    mark_file.write_bytes(bytes(data))
    for other_key in (b"x" * 32, b""):
        other = SqliteEventStore(path, record_key=other_key, read_only=True)
        try:
            with pytest.raises(RecordCorrupt):
                other.marks.read("s")
        finally:
            await other.close()


def zeroed(data: bytes) -> bytes:
    return b"\0" * len(data)


def cut_short(data: bytes) -> bytes:
    return data[: SLOT_BYTES // 2]


def emptied(data: bytes) -> bytes:
    return b""


def garbage(data: bytes) -> bytes:
    return bytes((byte * 7 + 13) % 256 for byte in data)


def first_slot_only(data: bytes) -> bytes:
    return data[:SLOT_BYTES]  # a whole slot, but the file cut short: the other slot may be ahead


@pytest.mark.parametrize("damage", [zeroed, cut_short, emptied, garbage, first_slot_only])
async def test_a_damaged_mark_file_is_record_corrupt_with_the_way_out_not_no_mark(
    tmp_path: Path, damage: object
) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path, record_key=KEY)
    try:
        await store.append("s", notes("a", 2))
        mark_file = store.marks.path("s")
    finally:
        await store.close()
    mark_file.write_bytes(damage(mark_file.read_bytes()))  # type: ignore[operator]

    for read_only in (True, False):
        reader = SqliteEventStore(path, record_key=KEY, read_only=read_only)
        try:
            for read in (reader.read("s"), reader.last_seq("s")):
                with pytest.raises(RecordCorrupt) as refused:
                    await read
                assert str(mark_file) in str(refused.value) and "is damaged" in str(refused.value)
                assert "remove the mark" in str(refused.value)  # the same way out as a lost WAL
                assert "\n" not in str(refused.value)
        finally:
            await reader.close()
    writer = SqliteEventStore(path, record_key=KEY)
    try:
        with pytest.raises(RecordCorrupt):
            await writer.append("s", notes("b", 1))
    finally:
        await writer.close()

    mark_file.unlink()  # the way out: the record goes on as it is
    writer = SqliteEventStore(path, record_key=KEY)
    try:
        assert [e.seq for e in await writer.append("s", notes("b", 1))] == [3]
        assert writer.marks.read("s").seq == 3  # type: ignore[union-attr]
        assert len(mark_file.read_bytes()) == 2 * SLOT_BYTES
    finally:
        await writer.close()


async def test_deleting_a_session_removes_its_mark_and_one_left_behind_is_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    try:
        await store.append("s", notes("a", 5))
        left_behind = store.marks.path("s").read_bytes()
        await store.delete_session("s")
        assert not store.marks.path("s").exists()
        # A deletion cut short between its commit and the mark's removal leaves the old mark:
        # it is of the session id before the deletion, and says nothing of the new session.
        store.marks.path("s").write_bytes(left_behind)
    finally:
        await store.close()
    again = SqliteEventStore(path)
    try:
        assert [e.seq for e in await again.append("s", notes("new", 2))] == [1, 2]
        assert [e.seq for e in await again.read("s")] == [1, 2]
    finally:
        await again.close()
