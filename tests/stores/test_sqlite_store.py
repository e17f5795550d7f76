"""What is specific to the SQLite event store; the shared behaviour is in tests/conformance/."""

from __future__ import annotations

import asyncio
import gc
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind
from belay.stores import open_event_store
from belay.stores.base import (
    IdempotencyConflict,
    RecordCorrupt,
    StaleLease,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
)
from belay.stores.sqlite import SqliteEventStore
from tests.testenv.polling import wait_until_async


def notes(prefix: str, count: int) -> list[EventDraft]:
    return [
        EventDraft(payload=Note(note_id=f"{prefix}-{i}", kind=NoteKind.FINDING, text=""))
        for i in range(count)
    ]


async def test_the_file_is_in_wal_mode_with_its_tables(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    await store.close()
    conn = sqlite3.connect(tmp_path / "events.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"events", "sessions", "idempotency", "leases", "latest_of_type", "claims"} <= tables
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        conn.close()


async def test_the_record_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    lease = await store.acquire_lease("s", "attempt-1")
    written = await store.append("s", notes("a", 3), idempotency_key="k", lease=lease.number)
    await store.close()

    reopened = open_event_store(f"sqlite://{path}")
    try:
        assert await reopened.read("s") == written
        assert await reopened.current_lease("s") == lease
        assert await reopened.append("s", notes("a", 3), idempotency_key="k") == written
        latest = await reopened.latest("s", "note")
        assert latest is not None and latest.seq == 3
    finally:
        await reopened.close()


async def test_the_latest_index_follows_every_batch(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    try:
        for batch in range(5):
            await store.append("s", notes(f"b{batch}", 3))
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "events.db")
    try:
        rows = conn.execute("SELECT type, seq FROM latest_of_type WHERE session_id = 's'").fetchall()
    finally:
        conn.close()
    assert rows == [("note", 15)]


async def test_a_write_lock_held_too_long_is_store_unavailable_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path, busy_timeout_ms=100)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable):
            await store.append("s", notes("blocked", 2))
        blocker.execute("ROLLBACK")
        assert await store.last_seq("s") == 0
        # Once the lock is released the store carries on from seq 1.
        appended = await store.append("s", notes("after", 1))
        assert [e.seq for e in appended] == [1]
    finally:
        blocker.close()
        await store.close()


async def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "events.db")
    await store.close()
    with pytest.raises(StoreError):
        await store.append("s", notes("late", 1))
    await store.close()  # closing twice is harmless


async def test_a_watcher_on_another_event_loop_is_woken(tmp_path: Path) -> None:
    """Appends wake watchers wherever they run: here a watcher on its own loop in another thread.
    The poll interval is an hour, so without the wake-up the join below would hit its guard."""
    store = SqliteEventStore(tmp_path / "events.db", poll_interval=3600)
    seen: list[int] = []

    def watch_in_thread() -> None:
        async def consume() -> None:
            async for event in store.watch("s"):
                seen.append(event.seq)
                if len(seen) == 3:
                    return

        asyncio.run(consume())

    thread = threading.Thread(target=watch_in_thread)
    thread.start()
    try:
        # Append once the watch has read the empty record and waits: only the wake-up brings it more.
        assert await asyncio.to_thread(store.wait_until_watched, "s", 10)
        await store.append("s", notes("live", 3))
        await asyncio.to_thread(thread.join, 30)
        assert not thread.is_alive()
        assert seen == [1, 2, 3]
    finally:
        await store.close()


# Abandoning a watch on a loop that then closes is the point; its generator's late finalizer
# complaining about the closed loop is expected noise.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_abandoned_watch_on_a_closed_loop_does_not_fail_appends(tmp_path: Path) -> None:
    # The poll interval is an hour: once the watch waits for an append, it stays waiting.
    store = SqliteEventStore(tmp_path / "events.db", poll_interval=3600)
    abandoned: list[object] = []

    def abandon_a_watch() -> None:
        loop = asyncio.new_event_loop()
        stream = store.watch("s")

        async def first_event() -> Event:
            return await anext(stream)

        pending = loop.create_task(first_event())
        # Run the loop until the watch has read the empty record and waits for an append.
        assert loop.run_until_complete(loop.run_in_executor(None, store.wait_until_watched, "s", 30))
        assert not pending.done()
        loop.close()  # without finishing the task: its generator never runs its cleanup
        abandoned.extend([stream, pending])

    try:
        await asyncio.to_thread(abandon_a_watch)
        appended = await store.append("s", notes("after", 2))
        assert [e.seq for e in appended] == [1, 2]
        # The store keeps working after waking (or failing to wake) the abandoned watcher.
        appended = await asyncio.wait_for(store.append("s", notes("later", 1)), 30)
        assert [e.seq for e in appended] == [3]
    finally:
        await store.close()
        abandoned.clear()
        gc.collect()


async def test_queued_writes_commit_together_and_a_refused_one_is_rolled_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    await store.append("s", notes("first", 1), idempotency_key="taken")
    committed_before = store._writer.transactions
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        # Hold the write lock so the writer stalls on its next transaction while more writes queue.
        blocker.execute("BEGIN IMMEDIATE")
        stalled = asyncio.ensure_future(store.append("s", notes("stalled", 1)))
        await asyncio.sleep(0)  # let it reach the queue
        # The writer takes the stalled write alone and waits for the lock.
        await wait_until_async(
            lambda: store._writer.queued() == 0, "the writer's queue to empty", timeout=30, interval=0.01
        )
        grouped = [
            asyncio.ensure_future(store.append("s", notes("ok-1", 2))),
            asyncio.ensure_future(store.append("s", notes("conflict", 1), idempotency_key="taken")),
            asyncio.ensure_future(store.append("s", notes("stale", 1), lease=7)),
            asyncio.ensure_future(store.append("s", notes("ok-2", 1))),
        ]
        await wait_until_async(
            lambda: store._writer.queued() == len(grouped), "every write queued", timeout=30, interval=0.01
        )
        blocker.execute("ROLLBACK")
        results = await asyncio.wait_for(
            asyncio.gather(stalled, *grouped, return_exceptions=True), timeout=30
        )
    finally:
        blocker.close()
    try:
        stalled_events, ok1, conflict, stale, ok2 = results
        assert isinstance(conflict, IdempotencyConflict)
        assert isinstance(stale, StaleLease)
        assert [e.seq for e in stalled_events] == [2]  # type: ignore[union-attr]
        assert [e.seq for e in ok1] == [3, 4]  # type: ignore[union-attr]
        assert [e.seq for e in ok2] == [5]  # type: ignore[union-attr]
        assert store._writer.transactions - committed_before == 2
        stored = await store.read("s")
        assert [e.payload.note_id for e in stored if isinstance(e.payload, Note)] == [
            "first-0",
            "stalled-0",
            "ok-1-0",
            "ok-1-1",
            "ok-2-0",
        ]
    finally:
        await store.close()


# What the fsync test's child does: opens the store, then makes `count` appends with the given
# durability, renewing its lease after each.
FSYNC_CHILD = """
import asyncio, sys
from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.sqlite import SqliteEventStore

async def main(path, count, durable):
    store = SqliteEventStore(path)
    lease = (await store.current_lease("s")).number
    for i in range(count):
        draft = EventDraft(payload=Note(note_id=f"{durable}-{i}", kind=NoteKind.FINDING, text="x"))
        await store.append("s", [draft], lease=lease, durable=durable)
        await store.renew_lease("s", lease)
    await store.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "durable"))
"""


def fsyncs_of(path: Path, count: int, durability: str) -> int:
    """The fsync and fdatasync calls a process makes for `count` appends and renewals, by strace."""
    strace = shutil.which("strace")
    assert strace, "strace is missing: hack/build-all.sh installs it"
    trace = path.with_suffix(f".{durability}.strace")
    traced = [strace, "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(trace)]
    child = [sys.executable, "-c", FSYNC_CHILD, str(path), str(count), durability]
    subprocess.run(
        [*traced, *child],
        check=True,
        timeout=120,
    )
    return sum(1 for line in trace.read_text().splitlines() if "fsync(" in line or "fdatasync(" in line)


async def test_only_durable_appends_wait_for_the_disk(tmp_path: Path) -> None:
    """With synchronous=FULL, an append that says it need not be durable, and every lease renewal,
    commits without an fsync; a durable append still syncs at each commit."""
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    await store.acquire_lease("s", "attempt-1")
    await store.close()
    # Opening, the first write and closing sync the schema, a new WAL and its checkpoint whatever
    # the appends are: what 20 more appends add is what each costs.
    relaxed = [await asyncio.to_thread(fsyncs_of, path, count, "relaxed") for count in (5, 25)]
    durable = [await asyncio.to_thread(fsyncs_of, path, count, "durable") for count in (5, 25)]
    assert durable[1] - durable[0] >= 20
    assert relaxed[1] - relaxed[0] <= 1
    reopened = SqliteEventStore(path)
    try:
        ids = [e.payload.note_id for e in await reopened.read("s") if isinstance(e.payload, Note)]
        expected = [f"{durable}-{i}" for durable in (False, True) for count in (5, 25) for i in range(count)]
        assert ids == expected
    finally:
        await reopened.close()


async def test_a_read_only_store_never_writes_and_reads_the_live_file(tmp_path: Path) -> None:
    """A missing file reads as an empty record and is not created; every write is refused; once
    a writer has made the file, the reader sees what it appends, as any reader of the file does."""
    path = tmp_path / "events.db"
    missing = SqliteEventStore(path, read_only=True)
    try:
        assert await missing.list_sessions() == [] and await missing.read("s") == []
        with pytest.raises(StoreError, match="opened for reading only"):
            await missing.append("s", notes("refused", 1))
    finally:
        await missing.close()
    assert not path.exists()
    writer = SqliteEventStore(path)
    reader = None
    try:
        await writer.append("s", notes("first", 2))
        reader = SqliteEventStore(path, read_only=True)
        assert [e.seq for e in await reader.read("s")] == [1, 2]
        await writer.append("s", notes("later", 1))
        assert await reader.last_seq("s") == 3
    finally:
        await writer.close()
        if reader is not None:
            await reader.close()


async def test_damaged_pages_are_store_corrupt_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = SqliteEventStore(path)
    try:
        for batch in range(20):
            await store.append("s", notes(f"b{batch}", 10))
    finally:
        await store.close()
    size = path.stat().st_size
    with path.open("r+b") as record:
        record.seek(size // 2 // 4096 * 4096)
        record.write(bytes(8192))
    for read_only in (True, False):
        damaged = SqliteEventStore(path, read_only=read_only)
        try:
            with pytest.raises(StoreCorrupt, match=f"RecordCorrupt: {path} is damaged") as raised:
                await damaged.read("s")
            assert isinstance(raised.value, RecordCorrupt)  # refused wherever a damaged record is
        finally:
            await damaged.close()
