"""The two storage interfaces every backend implements, and the errors they raise.

One protocol per store; the conformance suites in `tests/conformance/` run the same tests against
every backend (SQLite and etcd for events; a local directory and S3 for artifacts).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from belay.journal.events import ArtifactRef, DeclaredArtifact, Event, EventDraft, Frozen
from belay.journal.storage import ArtifactCorrupted as ArtifactCorrupted
from belay.journal.storage import ArtifactNotFound as ArtifactNotFound
from belay.journal.storage import StoreError as StoreError

# Payloads above this many bytes belong in the artifact store, referenced by hash.
MAX_PAYLOAD_BYTES = 64 * 1024
# The media type every ArtifactStore gives the manifests it stores (`put_manifest`).
MANIFEST_MEDIA_TYPE = "application/vnd.belay.manifest+json"


# What `EventStore.watch_sessions` says when its watch was cut; no session has an empty id.
WATCH_CUT = ""


class StoreUnavailable(StoreError):
    """The backend could not be reached or did not answer in time; nothing was written."""


class IdempotencyConflict(StoreError):
    """The idempotency key was used before for a different batch."""


class StaleLease(StoreError):
    """The writer's fencing lease is older than the session's current lease."""


class PayloadTooLarge(StoreError):
    """An event payload is above MAX_PAYLOAD_BYTES; store the bytes as an artifact instead."""


class SessionDeleted(StoreError):
    """The session a watch follows was deleted while it watched; its events are gone."""


class ClaimTaken(StoreError):
    """An earlier append of the session already holds the claim this append asked for.

    `seq` is the first event of the batch that took it, so the caller can say who came first."""

    def __init__(self, session_id: str, claim: str, seq: int) -> None:
        super().__init__(f"session {session_id!r}: {claim!r} was already claimed by the batch at seq {seq}")
        self.session_id = session_id
        self.claim = claim
        self.seq = seq


class Superseded(StoreError):
    """The append was decided on a record that has moved on: the session's latest event of the
    type the append named is not the one its writer saw (`EventStore.append`, `unless_newer`).

    `seen` is the seq the writer saw (0: none of that type), `latest` the seq of the latest one."""

    def __init__(self, session_id: str, event_type: str, seen: int, latest: int) -> None:
        def at(seq: int) -> str:
            return f"seq {seq}" if seq else "none"

        super().__init__(
            f"session {session_id!r}: the latest {event_type} event is {at(latest)}, not the one this "
            f"append was decided on ({at(seen)}); nothing was written"
        )
        self.session_id = session_id
        self.event_type = event_type
        self.seen = seen
        self.latest = latest


class RecordCorrupt(StoreError):
    """A session's stored events fail their integrity check: an event was changed, inserted or
    removed after it was written (or the reader holds another record key than the writer).
    `seq` is the first seq where the record stops being what was written."""

    def __init__(self, session_id: str, seq: int, problem: str) -> None:
        super().__init__(
            f"RecordCorrupt: the record of session {session_id!r} fails its integrity check at seq "
            f"{seq}: {problem}. Belay will not act on a record it cannot trust: restore the store from "
            "a backup (keep this copy to see what changed)"
        )
        self.session_id = session_id
        self.seq = seq
        self.problem = problem


class StoreCorrupt(RecordCorrupt):
    """The store's own file is damaged (pages that are not what was written, a file cut short):
    no record in it can be read whole, so none is trusted. A RecordCorrupt too, so whatever
    refuses a damaged record refuses it; `seq` is 0 (no session's events were checked)."""

    def __init__(self, where: str, problem: str, way_out: str) -> None:
        StoreError.__init__(
            self,
            f"RecordCorrupt: {where} is damaged ({problem}). Belay will not act on a record it cannot "
            f"read whole: {way_out}",
        )
        self.session_id = ""
        self.seq = 0
        self.problem = problem


class RecordKeyMismatch(StoreError):
    """The record key this process holds is not the one the store's records were written with
    (`belay.stores.key_guard`): nothing was read or written under it."""


class UnsafePath(StoreError):
    """A name would escape its root: `..`, an absolute path, or a symlink on the way."""


class Lease(Frozen):
    session_id: str
    number: int
    holder: str


class LeaseRenewal(Frozen):
    """The last proof of life of a lease's holder: one record per session, overwritten by each
    renewal, so it costs the same however long the attempt runs (no event per beat)."""

    session_id: str
    number: int  # the lease that was renewed; compare with `current_lease`
    renewed_at: datetime  # the renewer's clock, UTC


@runtime_checkable
class EventStore(Protocol):
    """An ordered, append-only log per session with dense seqs assigned at append."""

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
        """Append a batch atomically and return the stored events.

        - The same idempotency key with the same batch returns the originally stored events and
          writes nothing; with a different batch it raises IdempotencyConflict.
        - With `lease`, the append is refused (StaleLease) unless it equals the session's current
          lease; the check happens in the same transaction as the write.
        - A replay (same key, same batch) writes nothing, so it is answered even when the lease has
          moved on since the original append.
        - With `claim`, a name unique within the session (say "approval/<id>": one decision per
          approval), the append is refused (ClaimTaken) when an earlier batch of the session took
          the same claim; the check happens in the same transaction as the write. A replay is
          answered before the claim is looked at (its original batch holds it).
        - With `unless_newer` = (event type, seq), the seq of the latest event of that type its
          writer saw (0: it saw none), the append is refused (Superseded) when the session's latest
          event of that type is another one: a decision taken on a record without it is not
          written after it (a harness's next step after an executor change). Checked in the same
          transaction as the write, after the lease and the claim; a replay is answered before.
        - Each stored event carries `chain`, a hash over its stored text and the previous event's
          chain (keyed with the record key when there is one, see `belay.stores.integrity`),
          assigned in the same transaction as the write, with the session's head (its last seq,
          chain and seal).
        - A payload above MAX_PAYLOAD_BYTES raises PayloadTooLarge and nothing of the batch is written.
        - `durable=False` lets a store acknowledge the batch before it would survive a machine crash
          (power loss, a kernel panic), for what nothing outside the record acts on before the next
          durable append. A crash of the writing process loses nothing either way, and such a batch
          is never lost while a later durable one survives: a machine crash can only take off a
          tail of non-durable batches. Everything else (order, seqs, keys, leases, claims, the
          chain) is the same. A store whose every write is durable ignores it.
        """
        ...

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        """Events with from_seq <= seq <= to_seq, in order. Every event returned is checked against
        the chain from the one before it; a read that runs to the end of the record is also checked
        against the session's head, so a removed tail is noticed. A failed check raises
        RecordCorrupt naming the first seq that is not what was written."""
        ...

    async def tail(self, session_id: str, count: int) -> list[Event]:
        """The last `count` events, in order, checked like `read` to the end of the record."""
        ...

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        """The newest event of one type, from an index (cost independent of history length),
        checked against the chain."""
        ...

    async def last_seq(self, session_id: str) -> int:
        """0 for a session with no events."""
        ...

    def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        """Every event with seq >= from_seq, then new ones as they are appended, with no gap,
        each checked against the chain (RecordCorrupt otherwise).
        When the session is deleted, the watch raises SessionDeleted instead of going on into a
        new session that reuses the id."""
        ...

    def watch_sessions(self) -> AsyncIterator[str | None]:
        """The records of every session at once, for a follower of many (the operator): the id of
        a session each time events are appended to its record or the session is deleted (once or
        more per change; a follower reads the record to see what changed), with no change missed.
        None first, as soon as the watch is in place, and again whenever changes may have been
        missed (history compacted away while the watch was cut) or once it is back after a cut:
        then every session may have moved. WATCH_CUT ("", never a session's id) when a watch that
        goes on by itself was cut (its store went away, or the member it went through): until
        the None that says it is back, nothing is announced. While nothing changes it costs
        nothing per session (one watch for all of them)."""
        ...

    async def delete_session(self, session_id: str) -> None:
        """Delete the session's events, indexes, lease, claims and idempotency records in one step: a
        reader sees the whole session or nothing of it. Afterwards the id is unused: a new session
        with it starts at seq 1 with no lease, and a writer holding an old lease is refused.
        Deleting a session that does not exist does nothing."""
        ...

    async def list_sessions(self) -> list[str]: ...

    async def acquire_lease(self, session_id: str, holder: str) -> Lease:
        """Advance the session's fencing lease by one and return it; older leases become stale."""
        ...

    async def current_lease(self, session_id: str) -> Lease | None: ...

    async def renew_lease(self, session_id: str, lease: int) -> LeaseRenewal:
        """Record that the holder of `lease` is alive now, replacing the previous renewal. Refused
        (StaleLease) unless `lease` is the session's current lease, checked in the same
        transaction. `delete_session` removes the renewal with the rest of the session."""
        ...

    async def lease_renewal(self, session_id: str) -> LeaseRenewal | None:
        """The last renewal, whichever lease it renewed (None: never renewed)."""
        ...

    def key_fingerprint(self) -> str:
        """The fingerprint of the record key this handle holds: an HMAC of a fixed label under it
        (under the empty key when there is none), never the key itself."""
        ...

    async def kept_key_fingerprint(self) -> str | None:
        """The fingerprint the store keeps of the key its records are written with (None: none yet)."""
        ...

    async def keep_key_fingerprint(self) -> str:
        """Keep this handle's `key_fingerprint` as the store's, unless the store keeps one already,
        in one transaction (one small entry per store, written once); return the one kept."""
        ...

    async def close(self) -> None: ...


class ArtifactStore(Protocol):
    """Content-addressed bytes. Blocking by design: boto3 and file I/O are blocking, so callers in
    async code use `asyncio.to_thread` rather than a backend pretending to be async."""

    def put(self, source: bytes | BinaryIO, *, media_type: str = "application/octet-stream") -> ArtifactRef:
        """Store bytes (or a stream read to its end); storing the same bytes twice stores them once."""
        ...

    def open(self, sha256: str) -> Iterator[bytes]:
        """The bytes in chunks; raises ArtifactCorrupted at the end if they do not match the hash."""
        ...

    def get(self, sha256: str) -> bytes:
        """All bytes, verified against the hash."""
        ...

    def exists(self, sha256: str) -> bool: ...

    def delete(self, sha256: str) -> bool:
        """Remove one blob; True when it was stored. Blobs are shared by every session that stored
        the same bytes: the caller decides that no record refers to it any more
        (`belay.stores.retention`)."""
        ...

    def location(self, sha256: str, *, expires_in: int = 3600) -> str:
        """Where a person can fetch it: a local path, or a presigned URL."""
        ...

    def put_manifest(self, entries: Sequence[DeclaredArtifact]) -> ArtifactRef:
        """Store a declared-artifact manifest (canonical JSON) and return its ref."""
        ...

    def get_manifest(self, sha256: str) -> list[DeclaredArtifact]: ...

    def materialize(self, entries: Sequence[DeclaredArtifact], root: Path) -> list[Path]:
        """Write each declared artifact under root at its name, verifying every hash. Names that
        escape root (`..`, absolute, through a symlink) raise UnsafePath before anything is written."""
        ...
