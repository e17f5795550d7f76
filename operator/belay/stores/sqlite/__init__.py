"""The embedded event store: one SQLite file in WAL mode, `SqliteEventStore`."""

from belay.stores.sqlite.store import SqliteEventStore, Synchronous

__all__ = ["SqliteEventStore", "Synchronous"]
