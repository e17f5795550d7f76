"""What the journal needs of the stores, and no more: the reads of a record and of blobs that its
projections make, and the errors those reads raise.

The journal is the bottom layer, below the stores: their `EventStore` and `ArtifactStore` satisfy
these protocols structurally, and they re-export the errors, which are defined here so that a
projection can tell a missing or damaged blob from any other failure.
"""

from __future__ import annotations

from typing import Protocol

from belay.journal.events import ArtifactRef, Event


class StoreError(Exception):
    """Base class for every store failure."""


class ArtifactNotFound(StoreError):
    pass


class ArtifactCorrupted(StoreError):
    """The bytes read back do not hash to the address they were stored under."""


class EventReader(Protocol):
    """The reads of a session's record the projections make (every `EventStore` of the stores has them)."""

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        """Events with from_seq <= seq <= to_seq, in order, each checked against the hash chain."""
        ...

    async def tail(self, session_id: str, count: int) -> list[Event]:
        """The last `count` events, in order."""
        ...

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        """The newest event of one type, at a cost independent of history length."""
        ...


class BlobStore(Protocol):
    """Content-addressed bytes, blocking (every `ArtifactStore` of the stores)."""

    def put(self, source: bytes, *, media_type: str = "application/octet-stream") -> ArtifactRef:
        """Store bytes; storing the same bytes twice stores them once."""
        ...

    def get(self, sha256: str) -> bytes:
        """All bytes, verified against the hash: ArtifactNotFound or ArtifactCorrupted otherwise."""
        ...
