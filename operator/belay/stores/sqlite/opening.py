"""How a SQLite store opens its file for reading only, and what a SQLite error means for the
person who sees it.

A store opened `read_only` (the commands that only read the record) never writes, so it works
where a writer cannot (a full disk, a directory it may not write) and cannot change the record:

- the file is opened with `mode=ro`;
- a file that does not exist, or holds no tables yet (`user_version` 0: emptied, or just created
  by a starting run), is read as an empty record, from an in-memory database with the same
  tables: no file is created;
- every reader of a WAL file needs its index (`-shm`), which SQLite must create or grow, and on
  a full disk cannot. When the WAL holds nothing (no `-wal`, or an empty one: every commit is in
  the main file, as after any clean exit), the file is opened `immutable`: SQLite reads the main
  file alone, with no index and no lock. A WAL that still holds commits cannot be read without
  its index; then the error says to free space.

Errors: a file whose pages are not what SQLite wrote (SQLITE_CORRUPT, SQLITE_NOTADB, a file
shorter than its header says) is `StoreCorrupt`, naming the file and the way out; a full disk
says so; anything else is `StoreUnavailable`.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from belay.stores.base import StoreCorrupt, StoreError, StoreUnavailable
from belay.stores.sqlite.schema import SCHEMA_VERSION, create_tables, earlier_schema

# The primary result codes of a file SQLite cannot make its WAL index or lock files for (or
# write at all): the reasons a read-only open falls back to `immutable`.
NO_INDEX_CODES = frozenset(
    {sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY}
)
CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Below this much free space, an I/O error of SQLite's is taken for the disk being full.
NEARLY_FULL_BYTES = 1 << 20


def error_code(error: sqlite3.Error) -> int:
    """SQLite's extended result code of the error (0 when the module did not say)."""
    return int(getattr(error, "sqlite_errorcode", 0) or 0)


def damaged(path: Path, error: sqlite3.Error) -> StoreCorrupt:
    return StoreCorrupt(
        str(path),
        f"SQLite: {error}",
        f"restore it from a backup (keep this copy: `sqlite3 {path} .recover` may save what it still "
        "holds), or move it aside and start a new home",
    )


def disk_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path.parent).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def store_failure(path: Path, error: sqlite3.Error, doing: str) -> StoreError:
    """What a SQLite error of the file at `path` means, as the store raises it; `doing` says what
    failed ("cannot open", "nothing written")."""
    code = error_code(error)
    if code & 0xFF in CORRUPT_CODES or code == sqlite3.SQLITE_IOERR_SHORT_READ:
        return damaged(path, error)
    if code & 0xFF == sqlite3.SQLITE_FULL or (code & 0xFF in NO_INDEX_CODES and disk_full(path)):
        return StoreUnavailable(
            f"{doing} {path}: {error}: the disk holding it is full; free some space there and try again"
        )
    return StoreUnavailable(f"{doing} {path}: {error}")


@dataclass(frozen=True)
class ReadSource:
    """Where a read-only store's connections read: a URI of the file, or (None) an empty record."""

    path: Path
    uri: str | None

    def connect(self, timeout: float) -> sqlite3.Connection:
        # isolation_level=None: no implicit BEGIN; check_same_thread=False only so the store can
        # close every thread's connection.
        if self.uri is None:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            create_tables(conn)
            return conn
        return sqlite3.connect(
            self.uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout
        )


def _wal_empty(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size == 0
    except FileNotFoundError:
        return True


def _schema_version(uri: str) -> int:
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def read_source(path: Path) -> ReadSource:
    """How to read the file at `path` without writing (see the module docstring)."""
    if not path.exists():
        return ReadSource(path, None)
    uri = f"file:{quote(str(path.absolute()))}?mode=ro"
    try:
        version = _schema_version(uri)
    except sqlite3.Error as error:
        if error_code(error) & 0xFF not in NO_INDEX_CODES or not _wal_empty(path):
            raise store_failure(path, error, "cannot read") from error
        uri += "&immutable=1"
        try:
            version = _schema_version(uri)
        except sqlite3.Error:
            raise store_failure(path, error, "cannot read") from error
    if version == 0:
        return ReadSource(path, None)
    if version != SCHEMA_VERSION:
        raise earlier_schema(path, version)
    return ReadSource(path, uri)
