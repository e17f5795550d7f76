"""The SQLite store's tables, and their creation in a new file (or the check of an existing one)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from belay.stores.base import StoreError, StoreUnavailable

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

# Facts about the whole store, one row each, written once: `record_key` is the fingerprint of the
# key its records are written with (`belay.stores.key_guard`). Added after schema 2 was out, so a
# file of schema 2 gets it on its next writable opening and a reader finds it missing meanwhile.
STORE_FACTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS store_facts (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""

# The tables a session's rows live in, all deleted together.
SESSION_TABLES = ("events", "sessions", "idempotency", "leases", "latest_of_type", "claims", "lease_renewals")


def create_tables(conn: sqlite3.Connection) -> None:
    """Every table a store reads, where they do not exist yet."""
    for statement in (SCHEMA + LEASE_RENEWAL_SCHEMA + STORE_FACTS_SCHEMA).split(";"):
        if statement.strip():
            conn.execute(statement)


def earlier_schema(path: Path, version: int) -> StoreError:
    return StoreError(
        f"{path} was written by an earlier Belay (schema {version}), before the record "
        f"had a hash chain, and cannot be read by this one (schema {SCHEMA_VERSION}): move "
        "it aside and start a new home"
    )


def create_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Switch the file at `path` to WAL mode and create the tables it lacks, refusing a file of
    an earlier schema. Raises sqlite3.Error as it comes (the store says what it means)."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreUnavailable(f"{path}: cannot switch to WAL mode (got {mode})")
    conn.execute("BEGIN IMMEDIATE")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, SCHEMA_VERSION):
        conn.execute("ROLLBACK")
        raise earlier_schema(path, version)
    create_tables(conn)
    if version != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute("COMMIT")
