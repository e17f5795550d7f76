"""The SQL of a SQLite store: what one read or one write does to a session's rows, run on a
connection inside its transaction (the writer's, for writes; see `writer.GroupCommitWriter`).

Each event row holds its stored bytes with their link in the record's hash chain
(`belay.stores.integrity`), and the `sessions` row is the head: last seq, last link and seal,
written in the append's transaction. A read takes the head, the event before its range and the
range in one read transaction and checks them (RecordCorrupt).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from pydantic import TypeAdapter

from belay.journal.envelope import EnvelopeJson
from belay.journal.events import Event, EventDraft, build_event, now_utc
from belay.stores.base import ClaimTaken, IdempotencyConflict, StaleLease, Superseded
from belay.stores.integrity import GENESIS, Chain, Head, RecordCheck
from belay.stores.sqlite.schema import SESSION_TABLES

WATCH_PAGE = 500

EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def parse_events(stored: list[bytes]) -> list[Event]:
    if not stored:
        return []
    # One validate_json over a JSON array is markedly cheaper than one call per row.
    return EVENT_LIST_ADAPTER.validate_json(b"[" + b",".join(stored) + b"]")


def as_bytes(value: bytes | str) -> bytes:
    # Stored as a BLOB; a row rewritten by hand may come back as TEXT.
    return value if isinstance(value, bytes) else value.encode()


def data_version(conn: sqlite3.Connection) -> int:
    """Moves when another connection (this process's writer, another process) commits."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def session_marks(conn: sqlite3.Connection) -> tuple[int, dict[str, tuple[int, int]]]:
    """The data version, and each session's last seq and deletion count, from one snapshot."""
    with read_transaction(conn):
        version = data_version(conn)
        heads = conn.execute("SELECT session_id, last_seq FROM sessions")
        marks = {str(session_id): (int(seq), 0) for session_id, seq in heads}
        for session_id, count in conn.execute("SELECT session_id, count FROM deletions"):
            marks[str(session_id)] = (marks.get(str(session_id), (0, 0))[0], int(count))
    return version, marks


def watch_page(
    conn: sqlite3.Connection, chain: Chain, session_id: str, from_seq: int
) -> tuple[list[Event], int]:
    """A page of events and the session's deletion count, from one read transaction (one snapshot)."""
    with read_transaction(conn):
        row = conn.execute("SELECT count FROM deletions WHERE session_id = ?", (session_id,)).fetchone()
        events = checked_events(conn, chain, session_id, from_seq, limit=WATCH_PAGE)
    return events, int(row[0]) if row is not None else 0


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One snapshot for every statement inside; within an open transaction (the writer's), that one."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def session_head(conn: sqlite3.Connection, session_id: str) -> Head | None:
    row = conn.execute(
        "SELECT last_seq, chain, seal FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else Head(int(row[0]), as_bytes(row[1]), as_bytes(row[2]))


def checked_events(
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
    with read_transaction(conn):
        head = session_head(conn, session_id)
        previous = None
        if first > 1:
            row = conn.execute(
                "SELECT event_json FROM events WHERE session_id = ? AND seq = ?", (session_id, first - 1)
            ).fetchone()
            previous = None if row is None else as_bytes(row[0])
        rows = conn.execute(sql, params).fetchall()
    check = RecordCheck(chain, session_id, first, previous, head)
    stored = []
    for seq, value in rows:
        value = as_bytes(value)
        check.event(seq, value)
        stored.append(value)
    if limit is None or len(rows) < limit:
        check.ran_to(to_seq)
    return parse_events(stored)


def delete_within(conn: sqlite3.Connection, session_id: str) -> None:
    """Every row of one session, inside the writer's open transaction (see GroupCommitWriter)."""
    for table in SESSION_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
    conn.execute(
        "INSERT INTO deletions (session_id, count) VALUES (?, 1) "
        "ON CONFLICT (session_id) DO UPDATE SET count = count + 1",
        (session_id,),
    )


def append_within(
    conn: sqlite3.Connection,
    chain: Chain,
    session_id: str,
    drafts: list[EventDraft],
    idempotency_key: str | None,
    digest: str | None,
    lease: int | None,
    claim: str | None,
    unless_newer: tuple[str, int] | None,
) -> list[Event]:
    """One append, inside the writer's open transaction (see GroupCommitWriter): the batch its
    idempotency key was used for, a refusal, or the batch written after the session's head."""
    if idempotency_key is not None:
        replayed = _replayed(conn, chain, session_id, idempotency_key, digest)
        if replayed is not None:
            # A replay writes nothing, so it needs no fencing: the original append was fenced.
            return replayed
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
    if unless_newer is not None:
        _refuse_when_superseded(conn, session_id, *unless_newer)
    row = conn.execute("SELECT last_seq, chain FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    base, link = (row[0], as_bytes(row[1])) if row is not None else (0, GENESIS)
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
    _write_batch(conn, chain, session_id, events, rows, link, idempotency_key, digest, claim)
    return events


def _refuse_when_superseded(conn: sqlite3.Connection, session_id: str, event_type: str, seen: int) -> None:
    """Superseded unless the session's latest event of `event_type` is at `seen` (0: none)."""
    row = conn.execute(
        "SELECT seq FROM latest_of_type WHERE session_id = ? AND type = ?", (session_id, event_type)
    ).fetchone()
    latest = int(row[0]) if row is not None else 0
    if latest != seen:
        raise Superseded(session_id, event_type, seen, latest)


def _replayed(
    conn: sqlite3.Connection, chain: Chain, session_id: str, idempotency_key: str, digest: str | None
) -> list[Event] | None:
    """The events of the batch appended earlier with this idempotency key, if one was: the same
    batch (`digest`), or IdempotencyConflict."""
    row = conn.execute(
        "SELECT digest, first_seq, last_seq FROM idempotency WHERE session_id = ? AND key = ?",
        (session_id, idempotency_key),
    ).fetchone()
    if row is None:
        return None
    stored_digest, first_seq, last_seq = row
    if stored_digest != digest:
        raise IdempotencyConflict(
            f"idempotency key {idempotency_key!r} of session {session_id!r} was used "
            f"for a different batch (seq {first_seq}..{last_seq})"
        )
    return checked_events(conn, chain, session_id, first_seq, last_seq)


def _write_batch(
    conn: sqlite3.Connection,
    chain: Chain,
    session_id: str,
    events: list[Event],
    rows: list[tuple[str, int, str, str, str | None, bytes]],
    link: bytes,
    idempotency_key: str | None,
    digest: str | None,
    claim: str | None,
) -> None:
    """The batch's rows, the session's new head (its last link, sealed), the latest-of-type
    entries, and the idempotency record and the claim when the batch has them."""
    first, last = events[0].seq, events[-1].seq
    conn.executemany(
        "INSERT INTO events (session_id, seq, type, created_at, idempotency_key, event_json) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
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
            (session_id, idempotency_key, digest, first, last),
        )
    if claim is not None:
        conn.execute(
            "INSERT INTO claims (session_id, claim, seq) VALUES (?, ?, ?)", (session_id, claim, first)
        )
