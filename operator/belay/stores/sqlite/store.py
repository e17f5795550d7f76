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
- `watch()` is woken by appends made through this instance and polls at a short interval for
  appends made by other processes. Each page it reads comes with the session's deletion count from
  the same read transaction, so a deleted session ends the watch (SessionDeleted).
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
- A decision's claim is a `claims` row, looked up and inserted in the append's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import TypeAdapter

from belay.journal.events import (
    EnvelopeJson,
    Event,
    EventDraft,
    batch_digest,
    build_event,
    now_utc,
)
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    ClaimTaken,
    IdempotencyConflict,
    Lease,
    LeaseRenewal,
    PayloadTooLarge,
    RecordCorrupt,
    SessionDeleted,
    StaleLease,
    StoreError,
    StoreUnavailable,
)
from belay.stores.integrity import GENESIS, Chain, Head, RecordCheck, record_key_for

# 2: events carry their link in the hash chain, sessions are the chain's head, claims exist.
SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    session_id      TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    type            TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    idempotency_key TEXT,
    event_json      BLOB    NOT NULL,  -- the stored envelope (UTF-8 JSON): its chain link, then the rest
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- The head of each session's hash chain: its last seq, that event's link, and the seal over both.
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT    NOT NULL PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    chain      BLOB    NOT NULL,
    seal       BLOB    NOT NULL
) WITHOUT ROWID;

-- One row per claim a batch took (`append(claim=...)`): seq is the batch's first event.
CREATE TABLE IF NOT EXISTS claims (
    session_id TEXT    NOT NULL,
    claim      TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (session_id, claim)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS idempotency (
    session_id TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS leases (
    session_id  TEXT    NOT NULL PRIMARY KEY,
    number      INTEGER NOT NULL,
    holder      TEXT    NOT NULL,
    acquired_at TEXT    NOT NULL
) WITHOUT ROWID;

-- How many times each session id was deleted: a watch that sees the count move knows the events
-- it follows are gone, even when a new session has since reused the id.
CREATE TABLE IF NOT EXISTS deletions (
    session_id TEXT    NOT NULL PRIMARY KEY,
    count      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS latest_of_type (
    session_id TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (session_id, type)
) WITHOUT ROWID;
"""

# The last renewal of each session's lease: one row per session, overwritten by every renewal.
LEASE_RENEWAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS lease_renewals (
    session_id TEXT    NOT NULL PRIMARY KEY,
    number     INTEGER NOT NULL,
    renewed_at TEXT    NOT NULL
) WITHOUT ROWID;
"""

# Where a watch of every session waits to be woken (no session has the empty id).
ANY_SESSION = ""
# How often a caught-up watch re-reads, to see appends made by other processes or instances.
DEFAULT_POLL_INTERVAL = 0.05
# How long a writer waits for another process's write lock before giving up (StoreUnavailable).
DEFAULT_BUSY_TIMEOUT_MS = 30_000
WATCH_PAGE = 500
# The events a read takes on the caller's thread; the rest of a longer read goes to a reader thread.
INLINE_READ_EVENTS = 64
# The most queued writes one transaction takes in (see GroupCommitWriter).
MAX_GROUP_WRITES = 64

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
T = TypeVar("T")

EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])
# The tables a session's rows live in, all deleted together.
SESSION_TABLES = ("events", "sessions", "idempotency", "leases", "latest_of_type", "claims", "lease_renewals")


def _parse_events(stored: list[bytes]) -> list[Event]:
    if not stored:
        return []
    # One validate_json over a JSON array is markedly cheaper than one call per row.
    return EVENT_LIST_ADAPTER.validate_json(b"[" + b",".join(stored) + b"]")


def _as_bytes(value: bytes | str) -> bytes:
    # Stored as a BLOB; a row rewritten by hand may come back as TEXT.
    return value if isinstance(value, bytes) else value.encode()


class SqliteEventStore:
    """`EventStore` on a local SQLite file. Safe for many writers in one process and across processes.

    `synchronous="FULL"` (the default) fsyncs the WAL at every commit, so an acknowledged append
    survives a power loss; "NORMAL" survives a process crash only, and is faster.

    `record_key`: the key of the record's hash chain; by default the one BELAY_RECORD_KEY_FILE
    names, if any (`belay.stores.integrity`). b"" for none, whatever the environment says.
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
    ) -> None:
        self.path = Path(path)
        self.chain = Chain(record_key if record_key is not None else record_key_for())
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.poll_interval = poll_interval
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._waiters_lock = threading.Lock()
        self._closed = False
        self._create_schema()
        self._writer = GroupCommitWriter(self._open_connection, self._wake_watchers, synchronous)
        self._readers = ThreadPoolExecutor(max_workers=read_threads, thread_name_prefix="belay-sqlite-read")

    # ---------------------------------------------------------------------------------------------
    # connections and threads

    def _open_connection(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: the module issues no implicit BEGIN; transactions are explicit.
            # check_same_thread=False only so close() can close every thread's connection.
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
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
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"{self.path}: cannot switch to WAL mode (got {mode})")
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                conn.execute("ROLLBACK")
                raise StoreError(
                    f"{self.path} was written by an earlier Belay (schema {version}), before the record "
                    f"had a hash chain, and cannot be read by this one (schema {SCHEMA_VERSION}): move "
                    "it aside and start a new home"
                )
            for statement in (SCHEMA + LEASE_RENEWAL_SCHEMA).split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot create the schema in {self.path}: {exc}") from exc
        finally:
            conn.close()

    async def _run(self, executor: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")

        def guarded() -> T:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                raise StoreUnavailable(f"{self.path}: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(executor, guarded)

    async def _write(
        self, work: Callable[[sqlite3.Connection], T], *, wakes: str | None = None, durable: bool = True
    ) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        result: T = await asyncio.wrap_future(self._writer.submit(work, wakes, durable))
        return result

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
        return await self._write(
            lambda conn: _append_within(
                conn, chain, session_id, drafts, idempotency_key, digest, lease, claim
            ),
            wakes=session_id,
            durable=durable,
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
            events = _checked_events(self._connection(), self.chain, session_id, from_seq, to_seq, first_part)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        if len(events) < first_part or (limit is not None and limit == first_part):
            return events
        rest = None if limit is None else limit - first_part
        return events + await self._read(
            lambda conn: _checked_events(conn, self.chain, session_id, events[-1].seq + 1, to_seq, rest)
        )

    async def tail(self, session_id: str, count: int) -> list[Event]:
        if count <= 0:
            return []

        def query(conn: sqlite3.Connection) -> list[Event]:
            with _read_transaction(conn):
                head = _head(conn, session_id)
                if head is not None:
                    last = head.last_seq
                else:  # no head: any event there is fails the check
                    row = conn.execute("SELECT max(seq) FROM events WHERE session_id = ?", (session_id,))
                    last = row.fetchone()[0] or 0
                return _checked_events(conn, self.chain, session_id, max(1, last - count + 1))

        return await self._read(query)

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        def query(conn: sqlite3.Connection) -> Event | None:
            with _read_transaction(conn):
                row = conn.execute(
                    "SELECT seq FROM latest_of_type WHERE session_id = ? AND type = ?",
                    (session_id, event_type),
                ).fetchone()
                if row is None:
                    return None
                events = _checked_events(conn, self.chain, session_id, row[0], row[0])
            if not events or events[0].type != event_type:
                raise RecordCorrupt(
                    session_id, row[0], f"the index of the latest {event_type} event is wrong"
                )
            return events[0]

        return await self._read(query)

    async def last_seq(self, session_id: str) -> int:
        def query(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
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
            self._add_waiter(session_id, woken)
            try:
                page, count = await self._read(
                    functools.partial(_watch_page, chain=self.chain, session_id=session_id, from_seq=next_seq)
                )
                if deletions is None:
                    deletions = count
                elif count != deletions:
                    raise SessionDeleted(f"session {session_id!r} was deleted at seq {next_seq - 1}")
                if not page:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(woken), timeout=self.poll_interval)
                    continue
            finally:
                self._remove_waiter(session_id, woken)
            for event in page:
                yield event
                next_seq = event.seq + 1

    async def watch_sessions(self) -> AsyncIterator[str | None]:
        """Woken by this instance's writes, and polling `PRAGMA data_version` on a connection of
        its own for other processes' (one statement per poll, however many sessions there are);
        only when that moved are the heads and deletion counts read and compared with the last."""
        loop = asyncio.get_running_loop()
        conn = await self._run(self._readers, self._open_connection)
        try:
            version, marks = await self._run(self._readers, lambda: _session_marks(conn))
            yield None
            while True:
                woken: asyncio.Future[None] = loop.create_future()
                self._add_waiter(ANY_SESSION, woken)
                try:
                    now = await self._run(self._readers, lambda: _data_version(conn))
                    if now == version:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(woken), timeout=self.poll_interval)
                        continue
                finally:
                    self._remove_waiter(ANY_SESSION, woken)
                version, latest = await self._run(self._readers, lambda: _session_marks(conn))
                moved = [s for s in marks.keys() | latest.keys() if marks.get(s) != latest.get(s)]
                marks = latest
                for session_id in sorted(moved):
                    yield session_id
        finally:
            conn.close()

    def _add_waiter(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        with self._waiters_lock:
            self._waiters.setdefault(session_id, set()).add(waiter)

    def _remove_waiter(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        """Called on the waiter's own loop."""
        self._forget_waiter(session_id, waiter)
        if not waiter.done():
            waiter.cancel()

    def _forget_waiter(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        with self._waiters_lock:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[session_id]

    def _wake_watchers(self, session_id: str) -> None:
        with self._waiters_lock:
            waiters = [*self._waiters.get(session_id, ()), *self._waiters.get(ANY_SESSION, ())]
        for waiter in waiters:
            # A watcher may live on another event loop (another thread): wake it on its own loop.
            try:
                waiter.get_loop().call_soon_threadsafe(_resolve, waiter)
            except RuntimeError:
                # Its loop is closed (an abandoned watch); the append itself has succeeded.
                self._forget_waiter(session_id, waiter)
                self._forget_waiter(ANY_SESSION, waiter)

    # ---------------------------------------------------------------------------------------------
    # deletion

    async def delete_session(self, session_id: str) -> None:
        await self._write(lambda conn: _delete_within(conn, session_id), wakes=session_id)

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

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._writer.stop()
        self._readers.shutdown(wait=True)
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


def _data_version(conn: sqlite3.Connection) -> int:
    """Moves when another connection (this process's writer, another process) commits."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _session_marks(conn: sqlite3.Connection) -> tuple[int, dict[str, tuple[int, int]]]:
    """The data version, and each session's last seq and deletion count, from one snapshot."""
    with _read_transaction(conn):
        version = _data_version(conn)
        heads = conn.execute("SELECT session_id, last_seq FROM sessions")
        marks = {str(session_id): (int(seq), 0) for session_id, seq in heads}
        for session_id, count in conn.execute("SELECT session_id, count FROM deletions"):
            marks[str(session_id)] = (marks.get(str(session_id), (0, 0))[0], int(count))
    return version, marks


def _watch_page(
    conn: sqlite3.Connection, chain: Chain, session_id: str, from_seq: int
) -> tuple[list[Event], int]:
    """A page of events and the session's deletion count, from one read transaction (one snapshot)."""
    with _read_transaction(conn):
        row = conn.execute("SELECT count FROM deletions WHERE session_id = ?", (session_id,)).fetchone()
        events = _checked_events(conn, chain, session_id, from_seq, limit=WATCH_PAGE)
    return events, int(row[0]) if row is not None else 0


@contextlib.contextmanager
def _read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One snapshot for every statement inside; within an open transaction (the writer's), that one."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _head(conn: sqlite3.Connection, session_id: str) -> Head | None:
    row = conn.execute(
        "SELECT last_seq, chain, seal FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else Head(int(row[0]), _as_bytes(row[1]), _as_bytes(row[2]))


def _checked_events(
    conn: sqlite3.Connection,
    chain: Chain,
    session_id: str,
    from_seq: int,
    to_seq: int | None = None,
    limit: int | None = None,
) -> list[Event]:
    """The session's events with from_seq <= seq (<= to_seq), in seq order, at most `limit`, read
    in one snapshot with the event before them and the head, and checked against the chain."""
    first = max(from_seq, 1)
    if (to_seq is not None and to_seq < first) or limit == 0:
        return []
    sql = "SELECT seq, event_json FROM events WHERE session_id = ? AND seq >= ?"
    params: tuple[object, ...] = (session_id, first)
    if to_seq is not None:
        sql += " AND seq <= ?"
        params += (to_seq,)
    sql += " ORDER BY seq LIMIT ?"
    params += (limit if limit is not None else -1,)  # SQLite: a negative LIMIT means no limit
    with _read_transaction(conn):
        head = _head(conn, session_id)
        previous = None
        if first > 1:
            row = conn.execute(
                "SELECT event_json FROM events WHERE session_id = ? AND seq = ?", (session_id, first - 1)
            ).fetchone()
            previous = None if row is None else _as_bytes(row[0])
        rows = conn.execute(sql, params).fetchall()
    check = RecordCheck(chain, session_id, first, previous, head)
    stored = []
    for seq, value in rows:
        value = _as_bytes(value)
        check.event(seq, value)
        stored.append(value)
    if limit is None or len(rows) < limit:
        check.ran_to(to_seq)
    return _parse_events(stored)


def _delete_within(conn: sqlite3.Connection, session_id: str) -> None:
    """Every row of one session, inside the writer's open transaction (see GroupCommitWriter)."""
    for table in SESSION_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
    conn.execute(
        "INSERT INTO deletions (session_id, count) VALUES (?, 1) "
        "ON CONFLICT (session_id) DO UPDATE SET count = count + 1",
        (session_id,),
    )


def _append_within(
    conn: sqlite3.Connection,
    chain: Chain,
    session_id: str,
    drafts: list[EventDraft],
    idempotency_key: str | None,
    digest: str | None,
    lease: int | None,
    claim: str | None,
) -> list[Event]:
    """One append, inside the writer's open transaction (see GroupCommitWriter)."""
    if idempotency_key is not None:
        row = conn.execute(
            "SELECT digest, first_seq, last_seq FROM idempotency WHERE session_id = ? AND key = ?",
            (session_id, idempotency_key),
        ).fetchone()
        if row is not None:
            stored_digest, first_seq, last_seq = row
            if stored_digest != digest:
                raise IdempotencyConflict(
                    f"idempotency key {idempotency_key!r} of session {session_id!r} was used "
                    f"for a different batch (seq {first_seq}..{last_seq})"
                )
            # A replay writes nothing, so it needs no fencing: the original append was fenced.
            return _checked_events(conn, chain, session_id, first_seq, last_seq)
    if lease is not None:
        row = conn.execute("SELECT number FROM leases WHERE session_id = ?", (session_id,)).fetchone()
        current = row[0] if row is not None else 0
        if lease != current:
            raise StaleLease(
                f"append to session {session_id!r} under lease {lease}; the current lease is {current}"
            )
    if claim is not None:
        row = conn.execute(
            "SELECT seq FROM claims WHERE session_id = ? AND claim = ?", (session_id, claim)
        ).fetchone()
        if row is not None:
            raise ClaimTaken(session_id, claim, int(row[0]))
    row = conn.execute("SELECT last_seq, chain FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    base, link = (row[0], _as_bytes(row[1])) if row is not None else (0, GENESIS)
    created_at = now_utc()
    envelope = EnvelopeJson(session_id, created_at, idempotency_key)
    created_text = created_at.isoformat()
    events = []
    rows = []
    for seq, draft in enumerate(drafts, start=base + 1):
        stored, link = chain.stored(link, envelope.fields(draft, seq))
        events.append(
            build_event(
                draft,
                seq=seq,
                session_id=session_id,
                created_at=created_at,
                idempotency_key=idempotency_key,
                chain=link.decode(),
            )
        )
        rows.append((session_id, seq, draft.type, created_text, idempotency_key, stored))
    conn.executemany(
        "INSERT INTO events (session_id, seq, type, created_at, idempotency_key, event_json) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    last = events[-1].seq
    conn.execute(
        "INSERT INTO sessions (session_id, last_seq, chain, seal) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE "
        "SET last_seq = excluded.last_seq, chain = excluded.chain, seal = excluded.seal",
        (session_id, last, link, chain.seal(last, link)),
    )
    newest_by_type = {event.type: event.seq for event in events}
    conn.executemany(
        "INSERT INTO latest_of_type (session_id, type, seq) VALUES (?, ?, ?) "
        "ON CONFLICT (session_id, type) DO UPDATE SET seq = excluded.seq",
        [(session_id, event_type, seq) for event_type, seq in newest_by_type.items()],
    )
    if idempotency_key is not None:
        conn.execute(
            "INSERT INTO idempotency (session_id, key, digest, first_seq, last_seq) VALUES (?, ?, ?, ?, ?)",
            (session_id, idempotency_key, digest, base + 1, last),
        )
    if claim is not None:
        conn.execute(
            "INSERT INTO claims (session_id, claim, seq) VALUES (?, ?, ?)", (session_id, claim, base + 1)
        )
    return events


@dataclass
class _WriteJob:
    work: Callable[[sqlite3.Connection], Any]
    result: Future[Any]
    wakes: str | None  # the session whose watchers an applied job wakes
    durable: bool  # must survive a machine crash once acknowledged


class GroupCommitWriter:
    """The one thread that writes for a store instance, committing queued writes together.

    Why: with synchronous=FULL every commit costs an fsync, which dwarfs the work of an append.
    Writes that queue up while a commit is in flight are applied in one `BEGIN IMMEDIATE`
    transaction, each inside its own SAVEPOINT: a write that is refused (StaleLease,
    IdempotencyConflict, a bad draft) is rolled back alone and the others commit; a database
    failure (busy beyond the timeout, I/O) rolls back the whole group and every write in it fails
    with StoreUnavailable, having written nothing. Results are released only after the COMMIT.

    A caller may be cancelled while its write waits (its future is then cancelled too). The
    thread claims each future before running its write (`set_running_or_notify_cancel`): a write
    whose future was cancelled first is skipped, and one already claimed can no longer be
    cancelled, so its result is always deliverable. Setting a result on a cancelled future raises,
    and would end this thread and leave every later write waiting forever.
    """

    def __init__(
        self,
        open_connection: Callable[[], sqlite3.Connection],
        wake: Callable[[str], None],
        synchronous: Synchronous = "FULL",
        max_group: int = MAX_GROUP_WRITES,
    ) -> None:
        self._open_connection = open_connection
        self._wake = wake
        self._max_group = max_group
        # The level durable writes commit with (the connection's own, set when it is opened), and
        # the one a group of only non-durable writes commits with: NORMAL skips the fsync in WAL.
        self._durable_level: Synchronous = synchronous
        self._relaxed_level: Synchronous = "NORMAL" if synchronous in ("FULL", "EXTRA") else synchronous
        self._level: Synchronous = synchronous
        self._queue: queue.SimpleQueue[_WriteJob | None] = queue.SimpleQueue()
        self._conn: sqlite3.Connection | None = None
        self.transactions = 0  # committed groups, for tests and benchmarks
        # A daemon thread, so a store that is never closed cannot keep the process alive; a write
        # cut short at exit is rolled back by SQLite like any crash.
        self._thread = threading.Thread(target=self._run, name="belay-sqlite-write", daemon=True)
        self._thread.start()

    def submit(
        self, work: Callable[[sqlite3.Connection], Any], wakes: str | None, durable: bool = True
    ) -> Future[Any]:
        job = _WriteJob(work=work, result=Future(), wakes=wakes, durable=durable)
        self._queue.put(job)
        return job.result

    def queued(self) -> int:
        return self._queue.qsize()

    def stop(self) -> None:
        """Finish every write submitted so far, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            group = [first]
            while len(group) < self._max_group:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                group.append(job)
            self._commit(group)
        if self._conn is not None:
            self._conn.close()

    def _roll_back(self) -> None:
        if self._conn is None or not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is in an unknown state: drop it; the next group opens a fresh one.
            self._conn.close()
            self._conn = None

    def _commit(self, queued: list[_WriteJob]) -> None:
        group = [job for job in queued if job.result.set_running_or_notify_cancel()]
        if not group:
            return
        outcomes: list[tuple[bool, Any]] = []
        try:
            if self._conn is None:
                self._conn = self._open_connection()
                self._level = self._durable_level
            conn = self._conn
            level = self._durable_level if any(job.durable for job in group) else self._relaxed_level
            if level != self._level:
                conn.execute(f"PRAGMA synchronous = {level}")
                self._level = level
            conn.execute("BEGIN IMMEDIATE")
            for job in group:
                conn.execute("SAVEPOINT write_job")
                try:
                    value = job.work(conn)
                except sqlite3.Error:
                    raise  # the transaction itself may be gone: fail the whole group
                except Exception as refusal:
                    conn.execute("ROLLBACK TO write_job")
                    conn.execute("RELEASE write_job")
                    outcomes.append((False, refusal))
                else:
                    conn.execute("RELEASE write_job")
                    outcomes.append((True, value))
            conn.execute("COMMIT")
            self.transactions += 1
        except BaseException as failure:
            self._roll_back()
            for job in group:
                if isinstance(failure, sqlite3.Error | StoreUnavailable):
                    error: BaseException = StoreUnavailable(f"nothing written: {failure}")
                    error.__cause__ = failure
                else:
                    error = failure
                job.result.set_exception(error)
            if not isinstance(failure, Exception):
                raise
            return
        for job, (applied, value) in zip(group, outcomes, strict=True):
            if applied:
                job.result.set_result(value)
                if job.wakes is not None:
                    # Watchers also poll; a failed wake-up must never stop this thread.
                    with contextlib.suppress(Exception):
                        self._wake(job.wakes)
            else:
                job.result.set_exception(value)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
