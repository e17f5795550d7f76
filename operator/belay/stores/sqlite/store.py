"""The embedded event store: one SQLite file in WAL mode.

Why it is shaped this way:
- Every append runs inside a `BEGIN IMMEDIATE` transaction. The idempotency check, the fencing-lease
  check, the seq assignment and the insert all happen under the database's single write lock, so
  they are atomic against other writers in this process and in other processes alike. A writer
  killed in the middle of a batch leaves uncommitted WAL frames that SQLite ignores on the next open.
- All writes of one store instance go through one dedicated thread and connection: in-process
  writers queue there instead of spinning on SQLite's busy handler, and writes that queue up while a
  commit is in flight share the next transaction (group commit: one fsync for many appends, each
  still accepted or refused on its own). Other processes (or other instances) contend through
  `busy_timeout`.
- Reads run on a small pool of threads, each with its own connection; WAL lets them proceed while a
  write is in progress. The first INLINE_READ_EVENTS events of a `read` are read on the caller's
  thread instead: the tail an attempt folds after each step is a few events, and handing such a
  read to a thread and its answer back (waiting for the GIL twice) costs more than the read.
- `latest_of_type` keeps (session, type) -> seq, so `latest()` is two primary-key lookups however long
  the history is.
- `watch()` is woken by appends made through this instance (`wakeups`) and polls at a short
  interval for appends made by other processes. Each page it reads comes with the session's
  deletion count from the same read transaction, so a deleted session ends the watch
  (SessionDeleted); `wait_until_watched` says when a watch has caught up and waits for more.
  `watch_sessions()` is woken the same way and polls `PRAGMA data_version`, one statement for
  every session, reading the heads only when another connection committed.
- Durability is chosen per write: with `synchronous="FULL"`, a transaction whose writes all said
  `durable=False` (and every lease renewal) commits with `synchronous = NORMAL`, which in WAL mode
  skips the fsync. WAL frames are appended in commit order and recovered as a prefix, so a machine
  crash can only lose such a tail, never reorder it; the next durable commit's fsync makes it
  durable too, and a process crash loses nothing either way.
- `delete_session()` removes a session's rows from every table in one transaction.
- Each event row holds its stored bytes with their link in the record's hash chain
  (`belay.stores.integrity`), and the `sessions` row is the head: last seq, last link and seal,
  written in the append's transaction. A read takes the head, the event before its range and the
  range in one read transaction and checks them (RecordCorrupt).
- Each session's high-water mark (`marks`) is written outside the file after every durable commit,
  fsynced before the append is acknowledged, and checked once per session by each instance (after
  its first read, before its first append): a record put back behind it (a lost WAL, an older copy
  of the file) is RecordCorrupt naming the mark.
- A decision's claim is a `claims` row, looked up and inserted in the append's transaction.
- `read_only=True` (the commands that only read) opens the file with `mode=ro` and never writes,
  so reads work on a full disk; a missing or emptied file reads as an empty record (`opening`).
- A SQLite error is said in the person's terms (`opening.store_failure`): damaged pages are
  StoreCorrupt, a full disk says so, the rest is StoreUnavailable.

The tables are in `schema`, the SQL of each read and write in `records`, the writer thread in
`writer`, the high-water marks in `marks`, the waiting watches in `wakeups`, the read-only opening
and the meaning of SQLite's errors in `opening`; this module puts them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from belay.journal.events import Event, EventDraft, batch_digest, now_utc
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    Lease,
    LeaseRenewal,
    PayloadTooLarge,
    RecordCorrupt,
    SessionDeleted,
    StaleLease,
    StoreError,
)
from belay.stores.integrity import Chain, record_key_for
from belay.stores.sqlite.marks import Mark, RecordMarks, behind_mark, generation
from belay.stores.sqlite.opening import ReadSource, read_source, store_failure
from belay.stores.sqlite.records import (
    append_within,
    checked_events,
    data_version,
    delete_within,
    read_transaction,
    session_head,
    session_marks,
    watch_page,
)
from belay.stores.sqlite.schema import create_schema
from belay.stores.sqlite.wakeups import ANY_SESSION, Wakeups
from belay.stores.sqlite.writer import GroupCommitWriter, Synchronous

# How often a caught-up watch re-reads, to see appends made by other processes or instances.
DEFAULT_POLL_INTERVAL = 0.05
# How long a writer waits for another process's write lock before giving up (StoreUnavailable).
DEFAULT_BUSY_TIMEOUT_MS = 30_000
# The events a read takes on the caller's thread; the rest of a longer read goes to a reader thread.
INLINE_READ_EVENTS = 64

T = TypeVar("T")


def create_private(path: Path) -> None:
    """A new record file only its owner may read, whatever the umask: SQLite gives its WAL and
    shared-memory files the mode of the database file."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class SqliteEventStore:
    """`EventStore` on a local SQLite file. Safe for many writers in one process and across processes.

    `synchronous="FULL"` (the default) fsyncs the WAL at every commit, so an acknowledged append
    survives a power loss; "NORMAL" survives a process crash only, and is faster.

    `record_key`: the key of the record's hash chain; by default the one BELAY_RECORD_KEY_FILE
    names, if any (`belay.stores.integrity`). b"" for none, whatever the environment says.

    `read_only`: for a reader that never writes (see `opening`); every write is refused.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        read_threads: int = 2,
        record_key: bytes | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.chain = Chain(record_key if record_key is not None else record_key_for())
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.poll_interval = poll_interval
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._wakeups = Wakeups()
        self._closed = False
        self._source: ReadSource | None = None
        self._writer: GroupCommitWriter | None = None
        # The high-water marks (`marks`), kept when a durable commit is fsynced: with NORMAL or OFF
        # a machine crash may take back what a mark would already record.
        self.marks = RecordMarks(self.path, self.chain)
        self._keeps_marks = synchronous in ("FULL", "EXTRA") and not read_only
        # Sessions whose record this instance found at or past its mark, or wrote the mark of: a
        # record is put back behind a process's back only while no process has it open.
        self._verified: set[str] = set()
        if read_only:
            self._source = read_source(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            create_private(self.path)
            self._create_schema()
            self._writer = GroupCommitWriter(
                self._open_connection,
                self._wakeups.wake,
                synchronous,
                failure=lambda error: store_failure(self.path, error, "nothing written to"),
            )
        self._readers = ThreadPoolExecutor(max_workers=read_threads, thread_name_prefix="belay-sqlite-read")

    # ---------------------------------------------------------------------------------------------
    # connections and threads

    def _open_connection(self) -> sqlite3.Connection:
        timeout = self.busy_timeout_ms / 1000
        try:
            if self._source is not None:
                conn = self._source.connect(timeout)
            else:
                # isolation_level=None: the module issues no implicit BEGIN; transactions are
                # explicit. check_same_thread=False only so close() can close every thread's connection.
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=timeout
                )
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        except sqlite3.Error as exc:
            raise store_failure(self.path, exc, "cannot open") from exc
        return conn

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open_connection()
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _create_schema(self) -> None:
        conn = self._open_connection()
        try:
            create_schema(conn, self.path)
        except sqlite3.Error as exc:
            raise store_failure(self.path, exc, "cannot create the schema in") from exc
        finally:
            conn.close()

    async def _run(self, executor: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")

        def guarded() -> T:
            try:
                return fn()
            except sqlite3.Error as exc:
                raise store_failure(self.path, exc, "cannot read") from exc

        return await asyncio.get_running_loop().run_in_executor(executor, guarded)

    async def _write(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        wakes: str | None = None,
        durable: bool = True,
        after_durable_commit: Callable[[T], None] | None = None,
    ) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        if self._writer is None:
            raise StoreError(f"{self.path} was opened for reading only")
        future = self._writer.submit(work, wakes, durable, after_durable_commit)
        result: T = await asyncio.wrap_future(future)
        return result

    def _check_mark(self, conn: sqlite3.Connection, session_id: str) -> None:
        """RecordCorrupt when the session's record is behind its high-water mark (`marks`); checked
        once per session by this instance, before its first append and after its first read."""
        if session_id in self._verified:
            return
        # Read before the transaction that checks it: the commit it records is then in that
        # transaction's snapshot, however other processes append meanwhile.
        try:
            mark = self.marks.read(session_id)
        except RecordCorrupt:
            with read_transaction(conn):
                checked_events(conn, self.chain, session_id, 1)  # a change inside is said first
            raise
        if mark is not None:
            with read_transaction(conn):
                problem = behind_mark(conn, session_id, mark, self.marks.path(session_id), self.path)
                if problem is not None:
                    # A change inside the record (an event edited, forged or removed) is said where
                    # it is, at its seq, as without a mark; the mark speaks for a record that is
                    # whole but shorter, or another branch of it.
                    checked_events(conn, self.chain, session_id, 1)
            if problem is not None:
                raise problem
        self._verified.add(session_id)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(self._readers, lambda: fn(self._connection()))

    # ---------------------------------------------------------------------------------------------
    # appends

    async def append(
        self,
        session_id: str,
        drafts: Sequence[EventDraft],
        *,
        idempotency_key: str | None = None,
        lease: int | None = None,
        claim: str | None = None,
        unless_newer: tuple[str, int] | None = None,
        durable: bool = True,
    ) -> list[Event]:
        if not session_id:
            raise ValueError("session_id must not be empty")
        drafts = list(drafts)
        if not drafts:
            return []
        for draft in drafts:
            if draft.payload_size > MAX_PAYLOAD_BYTES:
                raise PayloadTooLarge(
                    f"a {draft.type} payload is {draft.payload_size} bytes, above {MAX_PAYLOAD_BYTES}; "
                    "store the bytes as an artifact and reference them by hash"
                )
        digest = batch_digest(drafts) if idempotency_key is not None else None
        chain = self.chain
        reached: list[Mark] = []

        def work(conn: sqlite3.Connection) -> list[Event]:
            self._check_mark(conn, session_id)
            events = append_within(
                conn, chain, session_id, drafts, idempotency_key, digest, lease, claim, unless_newer
            )
            last = events[-1]
            reached.append(Mark(generation(conn, session_id), last.seq, (last.chain or "").encode()))
            return events

        def mark(events: list[Event]) -> None:
            self.marks.advance(session_id, reached[-1])

        return await self._write(
            work,
            wakes=session_id,
            durable=durable,
            after_durable_commit=mark if self._keeps_marks else None,
        )

    # ---------------------------------------------------------------------------------------------
    # reads

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        if self._closed:
            raise StoreError("the store is closed")
        first_part = INLINE_READ_EVENTS if limit is None else min(limit, INLINE_READ_EVENTS)
        try:
            conn = self._connection()
            events = checked_events(conn, self.chain, session_id, from_seq, to_seq, first_part)
            self._check_mark(conn, session_id)
        except sqlite3.Error as exc:
            raise store_failure(self.path, exc, "cannot read") from exc
        if len(events) < first_part or (limit is not None and limit == first_part):
            return events
        rest = None if limit is None else limit - first_part
        return events + await self._read(
            lambda conn: checked_events(conn, self.chain, session_id, events[-1].seq + 1, to_seq, rest)
        )

    async def tail(self, session_id: str, count: int) -> list[Event]:
        if count <= 0:
            return []

        def query(conn: sqlite3.Connection) -> list[Event]:
            with read_transaction(conn):
                head = session_head(conn, session_id)
                if head is not None:
                    last = head.last_seq
                else:  # no head: any event there is fails the check
                    row = conn.execute("SELECT max(seq) FROM events WHERE session_id = ?", (session_id,))
                    last = row.fetchone()[0] or 0
                events = checked_events(conn, self.chain, session_id, max(1, last - count + 1))
            self._check_mark(conn, session_id)
            return events

        return await self._read(query)

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        def query(conn: sqlite3.Connection) -> Event | None:
            with read_transaction(conn):
                row = conn.execute(
                    "SELECT seq FROM latest_of_type WHERE session_id = ? AND type = ?",
                    (session_id, event_type),
                ).fetchone()
                events = [] if row is None else checked_events(conn, self.chain, session_id, row[0], row[0])
            self._check_mark(conn, session_id)
            if row is None:
                return None
            if not events or events[0].type != event_type:
                raise RecordCorrupt(
                    session_id, row[0], f"the index of the latest {event_type} event is wrong"
                )
            return events[0]

        return await self._read(query)

    async def last_seq(self, session_id: str) -> int:
        def query(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            self._check_mark(conn, session_id)
            return int(row[0]) if row is not None else 0

        return await self._read(query)

    async def list_sessions(self) -> list[str]:
        return await self._read(
            lambda conn: [
                row[0] for row in conn.execute("SELECT session_id FROM sessions ORDER BY session_id")
            ]
        )

    # ---------------------------------------------------------------------------------------------
    # watch

    async def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        next_seq = max(from_seq, 1)
        loop = asyncio.get_running_loop()
        deletions: int | None = None
        while True:
            # Register before reading, so an append that lands between the read and the wait
            # still wakes this watcher.
            woken: asyncio.Future[None] = loop.create_future()
            self._wakeups.add(session_id, woken)
            try:
                page, count = await self._read(
                    functools.partial(self._watch_page, session_id=session_id, from_seq=next_seq)
                )
                if deletions is None:
                    deletions = count
                elif count != deletions:
                    raise SessionDeleted(f"session {session_id!r} was deleted at seq {next_seq - 1}")
                if not page:
                    self._wakeups.caught_up(session_id, woken)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(woken), timeout=self.poll_interval)
                    continue
            finally:
                self._wakeups.remove(session_id, woken)
            for event in page:
                yield event
                next_seq = event.seq + 1

    def _watch_page(
        self, conn: sqlite3.Connection, session_id: str, from_seq: int
    ) -> tuple[list[Event], int]:
        page = watch_page(conn, self.chain, session_id, from_seq)
        self._check_mark(conn, session_id)
        return page

    async def watch_sessions(self) -> AsyncIterator[str | None]:
        """Woken by this instance's writes, and polling `PRAGMA data_version` on a connection of
        its own for other processes' (one statement per poll, however many sessions there are);
        only when that moved are the heads and deletion counts read and compared with the last."""
        loop = asyncio.get_running_loop()
        conn = await self._run(self._readers, self._open_connection)
        # A cancelled watch leaves its last query running on a reader thread; closing the connection
        # under it would free what SQLite is still using (a crash): queries and the close take turns.
        in_use = threading.Lock()

        def on_conn(query: Callable[[sqlite3.Connection], T]) -> Callable[[], T]:
            def locked() -> T:
                with in_use:
                    return query(conn)

            return locked

        try:
            version, marks = await self._run(self._readers, on_conn(session_marks))
            yield None
            while True:
                woken: asyncio.Future[None] = loop.create_future()
                self._wakeups.add(ANY_SESSION, woken)
                try:
                    now = await self._run(self._readers, on_conn(data_version))
                    if now == version:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(woken), timeout=self.poll_interval)
                        continue
                finally:
                    self._wakeups.remove(ANY_SESSION, woken)
                version, latest = await self._run(self._readers, on_conn(session_marks))
                moved = [s for s in marks.keys() | latest.keys() if marks.get(s) != latest.get(s)]
                marks = latest
                for session_id in sorted(moved):
                    yield session_id
        finally:
            with in_use:  # one short statement at most
                conn.close()

    def wait_until_watched(self, session_id: str, timeout: float) -> bool:
        """Block until a watch of the session, on any thread or event loop, has read all there
        is and waits for the next append (True), or `timeout` seconds pass (False). For a caller
        that must know a follower is in place before it appends; a watch of every session says
        so itself, with its first None."""
        return self._wakeups.wait_caught_up(session_id, timeout)

    # ---------------------------------------------------------------------------------------------
    # deletion

    async def delete_session(self, session_id: str) -> None:
        self._verified.discard(session_id)
        await self._write(
            lambda conn: delete_within(conn, session_id),
            wakes=session_id,
            # After the commit: a deletion cut short leaves a mark of the generation before it.
            after_durable_commit=lambda _: self.marks.remove(session_id),
        )

    # ---------------------------------------------------------------------------------------------
    # leases

    async def acquire_lease(self, session_id: str, holder: str) -> Lease:
        def advance(conn: sqlite3.Connection) -> Lease:
            row = conn.execute(
                "INSERT INTO leases (session_id, number, holder, acquired_at) VALUES (?, 1, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE "
                "SET number = number + 1, holder = excluded.holder, acquired_at = excluded.acquired_at "
                "RETURNING number",
                (session_id, holder, now_utc().isoformat()),
            ).fetchone()
            return Lease(session_id=session_id, number=int(row[0]), holder=holder)

        return await self._write(advance)

    async def current_lease(self, session_id: str) -> Lease | None:
        def query(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT number, holder FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                return None
            return Lease(session_id=session_id, number=int(row[0]), holder=row[1])

        return await self._read(query)

    async def renew_lease(self, session_id: str, lease: int) -> LeaseRenewal:
        def renew(conn: sqlite3.Connection) -> LeaseRenewal:
            row = conn.execute("SELECT number FROM leases WHERE session_id = ?", (session_id,)).fetchone()
            current = row[0] if row is not None else 0
            if row is None or lease != current:
                raise StaleLease(
                    f"renewal of lease {lease} of session {session_id!r}; the current lease is {current}"
                )
            renewal = LeaseRenewal(session_id=session_id, number=lease, renewed_at=now_utc())
            conn.execute(
                "INSERT INTO lease_renewals (session_id, number, renewed_at) VALUES (?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE "
                "SET number = excluded.number, renewed_at = excluded.renewed_at",
                (session_id, lease, renewal.renewed_at.isoformat()),
            )
            return renewal

        # A renewal only says the holder is alive now: after a machine crash it is not, so it
        # never needs to survive one.
        return await self._write(renew, durable=False)

    async def lease_renewal(self, session_id: str) -> LeaseRenewal | None:
        def query(conn: sqlite3.Connection) -> LeaseRenewal | None:
            row = conn.execute(
                "SELECT number, renewed_at FROM lease_renewals WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                return None
            return LeaseRenewal(
                session_id=session_id, number=int(row[0]), renewed_at=datetime.fromisoformat(row[1])
            )

        return await self._read(query)

    # ---------------------------------------------------------------------------------------------
    # the record key's fingerprint

    def key_fingerprint(self) -> str:
        return self.chain.fingerprint()

    async def kept_key_fingerprint(self) -> str | None:
        def query(conn: sqlite3.Connection) -> str | None:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'store_facts'").fetchone():
                return None  # a file no writer of this version has opened yet
            row = conn.execute("SELECT value FROM store_facts WHERE name = 'record_key'").fetchone()
            return None if row is None else str(row[0])

        return await self._read(query)

    async def keep_key_fingerprint(self) -> str:
        fingerprint = self.key_fingerprint()

        def keep(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT INTO store_facts (name, value) VALUES ('record_key', ?) "
                "ON CONFLICT (name) DO NOTHING",
                (fingerprint,),
            )
            row = conn.execute("SELECT value FROM store_facts WHERE name = 'record_key'").fetchone()
            return str(row[0])

        return await self._write(keep)

    # ---------------------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        if self._writer is not None:
            self._writer.stop()
        self._readers.shutdown(wait=True)
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
