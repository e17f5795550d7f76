"""The one way every `belay` command opens a session's record, so that every command reads damage
the same way: one `error:` line, the same for `brief`, `events`, `sessions`, `report`, `gc`,
`resume` and the decisions alike.

What the commands need of a record lives in several places of the store, and each command used to
read only its own: `events` the events, `brief` the index of the latest snapshot, `sessions` the
heads, a decision the claims. A damaged page in one of them was then RecordCorrupt for some
commands and nothing for the others (and `sessions` told the person to resume a session `resume`
refused). So every command opens the record through `reading` and `read_session`:

- the store's own file, when the record is the home's SQLite file (`check_store_file`): every
  table but the events (the sessions' heads, claims, idempotency keys, leases and their renewals,
  the index of each session's latest event of a type, deletions) checked page by page by SQLite
  (`PRAGMA quick_check(table)`). Those tables are small (a row per session, decision or batch), so
  this costs the same at any history length; the events are checked against the hash chain as
  they are read.
- the session (`read_session`): its state as readers need it (the latest usable snapshot, found
  through that index, plus the events after it, checked up to the head), the liveness of its
  attempt (its lease and last renewal), and whether the home ran a session whose record holds no
  event (`missing_record`).

Whatever the store raises (RecordCorrupt, StoreCorrupt, any kind of it a store adds) flows out
unchanged: this module words nothing of its own, so the line a command ends with is the store's.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass

from belay.journal.phase import Liveness
from belay.journal.snapshots import load_state
from belay.journal.state import SessionState
from belay.local.liveness import local_liveness
from belay.local.runtime import LocalHome, check_record_present
from belay.stores.base import EventStore
from belay.stores.sqlite.opening import damaged, read_source, store_failure


@dataclass(frozen=True)
class OpenedRecord:
    state: SessionState
    liveness: Liveness


def check_store_file(home: LocalHome) -> None:
    """StoreCorrupt (as the store words it) when a page of the home's SQLite record outside its
    events is damaged. Nothing to check for a record in another store, or none yet."""
    if home.events_url:
        return
    source = read_source(home.events_db)  # raises what the store would on opening it
    if source.uri is None:
        return
    try:
        with contextlib.closing(source.connect(timeout=5.0)) as conn:
            problem = _first_problem(conn)
    except sqlite3.Error as error:
        raise store_failure(home.events_db, error, "cannot read") from error
    if problem is not None:
        raise damaged(home.events_db, sqlite3.DatabaseError(problem))


def _first_problem(conn: sqlite3.Connection) -> str | None:
    """What SQLite finds first in the pages of every table but the events, or None."""
    tables = [
        str(name)
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if name != "events"
    ]
    for table in tables:
        quoted = table.replace('"', '""')
        found = [str(row[0]) for row in conn.execute(f'PRAGMA quick_check("{quoted}")')]
        if found != ["ok"]:
            return f"table {table}: {found[0]}"
    return None


@contextlib.asynccontextmanager
async def reading(home: LocalHome) -> AsyncIterator[EventStore]:
    """The home's record opened read-only, its store file checked first (before the store is open:
    closing a descriptor of a SQLite file drops the locks this process holds on it)."""
    check_store_file(home)
    store = home.open_event_store(read_only=True)
    try:
        yield store
    finally:
        await store.close()


async def read_session(store: EventStore, home: LocalHome, session_id: str) -> OpenedRecord:
    """The session's state (latest usable snapshot plus the events after it) and the liveness of
    its attempt, read from `store`; RecordCorrupt when the home ran it and its record holds no
    event. An unknown session is an empty state (`state.last_seq` 0)."""
    state = (await load_state(store, home.open_artifact_store(), session_id)).state
    liveness = await local_liveness(store, session_id, state.parent.session if state.parent else None)
    check_record_present(home, session_id, state.last_seq)
    return OpenedRecord(state, liveness)


async def open_session(home: LocalHome, session_id: str) -> OpenedRecord:
    """`read_session` of the session in its home's record: what every command calls first."""
    async with reading(home) as store:
        return await read_session(store, home, session_id)
