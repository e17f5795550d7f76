"""`EtcdEventStore`: the event store on etcd v3, put together from the package's parts.

Its key layout is in `keys`; the channel, deadlines and retries in `connection`; an append's one
transaction in `appends`, and appends of several sessions sharing one in `batching`; reads across
archived segments and etcd in `reads`, the segments themselves in `segments`, and moving a record's
closed part into them in `archiving`; the fencing lease in `leases`; followers in `watches`; and
deleting a session in `deletion`. docs/stores.md says why each is shaped the way it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from belay.journal.events import Event, EventDraft
from belay.stores.base import ArtifactStore, EventStore, Lease, LeaseRenewal, RecordCorrupt, StoreError
from belay.stores.etcd import deletion
from belay.stores.etcd.appends import Appends, KnownHeads
from belay.stores.etcd.archiving import Archiver
from belay.stores.etcd.connection import EtcdConnection, absent_compare, put_op, range_op
from belay.stores.etcd.credentials import EtcdCredentials
from belay.stores.etcd.keys import SessionKeys, index_key, index_prefix, prefix_range_end, record_key_fact
from belay.stores.etcd.leases import Leases
from belay.stores.etcd.reads import RecordReader
from belay.stores.etcd.segments import ARCHIVE_KEEP_EVENTS, SEGMENT_EVENTS, ArchivedSegments, Segment
from belay.stores.etcd.watches import Watches
from belay.stores.factory import open_artifact_store
from belay.stores.integrity import Chain, record_key_for

log = logging.getLogger("belay.stores.etcd")


class EtcdEventStore:
    """`EventStore` on etcd v3. See `belay.stores.etcd.keys` for the key layout.

    `record_key`: the key of the record's hash chain; by default the one BELAY_RECORD_KEY_FILE
    names, if any (`belay.stores.integrity`). b"" for none, whatever the environment says.

    `segments`: the artifact store that holds archived ranges of records (`archive`); needed to
    archive, and to read a record that has segments. `keep_events` and `segment_events`: what
    `archive` leaves in etcd (at least the newest `keep_events`) and how many events make a segment.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        prefix: str = "/belay",
        request_timeout: float = 2.0,
        operation_timeout: float = 15.0,
        record_key: bytes | None = None,
        segments: ArtifactStore | None = None,
        keep_events: int = ARCHIVE_KEEP_EVENTS,
        segment_events: int = SEGMENT_EVENTS,
        credentials: EtcdCredentials | None = None,
    ) -> None:
        if keep_events < 1 or segment_events < 1:
            raise ValueError("keep_events and segment_events must be at least 1")
        self.segments = segments
        self.keep_events = keep_events
        self.segment_events = segment_events
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self.prefix = prefix.rstrip("/")
        self.request_timeout = request_timeout
        self.operation_timeout = operation_timeout
        self.chain = Chain(record_key if record_key is not None else record_key_for())
        self._connection = EtcdConnection(self.endpoints, request_timeout, operation_timeout, credentials)
        self._segments = ArchivedSegments(self._connection, segments)
        self._reader = RecordReader(self._connection, self.chain, self._segments)
        # The head this store last wrote, per session: what its next append is tried on.
        self._heads = KnownHeads()
        self._appends = Appends(self._connection, self.chain, self.prefix, self._reader, self._heads)
        self._archiver = Archiver(self._connection, self.prefix, self._reader, self._segments)
        self._leases = Leases(self._connection, self.prefix, self._heads)
        self._watches = Watches(self._connection, self.prefix, self._reader)

    def _stubs(self) -> tuple[Any, Any]:
        """The KV and Watch stubs on the store's channel, for raw calls beside the store's own."""
        return self._connection.stubs()

    def _index_key(self, session_id: str) -> bytes:
        return index_key(self.prefix, session_id)

    async def append(
        self,
        session_id: str,
        drafts: Sequence[EventDraft],
        *,
        idempotency_key: str | None = None,
        lease: int | None = None,
        claim: str | None = None,
        unless_newer: tuple[str, int] | None = None,
        durable: bool = True,  # every etcd write is in a majority's fsynced log before it is acknowledged
    ) -> list[Event]:
        return await self._appends.append(
            session_id,
            drafts,
            idempotency_key=idempotency_key,
            lease=lease,
            claim=claim,
            unless_newer=unless_newer,
        )

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        if (to_seq is not None and to_seq < from_seq) or limit == 0:
            return []
        events, _, _ = await self._reader.read_at(
            SessionKeys.of(self.prefix, session_id), from_seq, to_seq, limit
        )
        return events

    async def last_seq(self, session_id: str) -> int:
        head, _ = await self._connection.get_json(SessionKeys.of(self.prefix, session_id).head)
        return 0 if head is None else int(head["last_seq"])

    async def tail(self, session_id: str, count: int) -> list[Event]:
        if count <= 0:
            return []
        keys = SessionKeys.of(self.prefix, session_id)
        response = await self._connection.retrying(lambda: self._connection.range(keys.head))
        if not response.kvs:
            return []
        last = json.loads(response.kvs[0].value)["last_seq"]
        events, _, _ = await self._reader.read_at(keys, max(1, last - count + 1), None, None)
        return events

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        keys = SessionKeys.of(self.prefix, session_id)
        response = await self._connection.retrying(lambda: self._connection.range(keys.latest(event_type)))
        if not response.kvs:
            return None
        seq = json.loads(response.kvs[0].value)["seq"]
        events, _, _ = await self._reader.read_at(keys, seq, seq, None)
        if not events or events[0].type != event_type:
            raise RecordCorrupt(session_id, seq, f"the index of the latest {event_type} event is wrong")
        return events[0]

    async def list_sessions(self) -> list[str]:
        start = index_prefix(self.prefix)
        response = await self._connection.retrying(
            lambda: self._connection.range(start, prefix_range_end(start), keys_only=True)
        )
        return sorted(unquote(kv.key[len(start) :].decode()) for kv in response.kvs)

    async def segments_of(self, session_id: str) -> list[Segment]:
        """The session's archived segments, in seq order."""
        return await self._segments.index(SessionKeys.of(self.prefix, session_id))

    async def archive(self, session_id: str, *, fault: Callable[[str], None] | None = None) -> list[Segment]:
        """Move the session's closed events (all but the newest `keep_events`, in whole segments
        of `segment_events`) from etcd to segments in the artifact store, and return the segments
        made (`belay.stores.etcd.archiving.Archiver.archive`). `fault` is called with "stored",
        "verified" and "indexed" after each step, for tests that stop the archiver there."""
        return await self._archiver.archive(session_id, self.keep_events, self.segment_events, fault)

    async def delete_session(self, session_id: str) -> None:
        await deletion.delete_session(self._connection, self.prefix, self._segments, self._heads, session_id)

    async def acquire_lease(self, session_id: str, holder: str) -> Lease:
        return await self._leases.acquire(session_id, holder)

    async def current_lease(self, session_id: str) -> Lease | None:
        return await self._leases.current(session_id)

    async def renew_lease(self, session_id: str, lease: int) -> LeaseRenewal:
        return await self._leases.renew(session_id, lease)

    async def lease_renewal(self, session_id: str) -> LeaseRenewal | None:
        return await self._leases.last_renewal(session_id)

    def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        return self._watches.watch(session_id, from_seq)

    def watch_sessions(self) -> AsyncIterator[str | None]:
        return self._watches.watch_sessions()

    def key_fingerprint(self) -> str:
        return self.chain.fingerprint()

    async def kept_key_fingerprint(self) -> str | None:
        key = record_key_fact(self.prefix)
        response = await self._connection.retrying(lambda: self._connection.range(key))
        return response.kvs[0].value.decode() if response.kvs else None

    async def keep_key_fingerprint(self) -> str:
        key = record_key_fact(self.prefix)
        # Written only where absent, and read back in the same transaction either way: the one
        # kept is the first writer's, and a retried transaction answers the same.
        written = put_op(key, self.key_fingerprint().encode())
        response = await self._connection.retrying(
            lambda: self._connection.txn([absent_compare(key)], [written, range_op(key)], [range_op(key)])
        )
        return str(response.responses[-1].response_range.kvs[0].value.decode())

    async def close(self) -> None:
        await self._connection.close()


def open_etcd_event_store(spec: dict[str, Any]) -> EtcdEventStore:
    """From a spec: `{"backend": "etcd", "endpoints": [...], "prefix": ...}` or
    `{"backend": "etcd", "url": "etcd://host:port,host:port/prefix"}`; timeouts,
    `record_key_file`, `credentials` (a directory holding a TLS Secret's files:
    `belay.stores.etcd.credentials`), and for archived segments `segments` (an artifact store spec
    or URL), `keep_events` and `segment_events` are optional keys. A URL takes the last four as
    its query: `etcd://etcd:2379/belay?credentials=/etc/belay/etcd&segments=s3://bucket/prefix`."""
    if "url" in spec:
        parts = urlsplit(spec["url"])
        query = dict(parse_qsl(parts.query))
        scheme = "https" if query.get("credentials") else "http"  # as errors name the endpoints
        endpoints = [f"{scheme}://{address}" for address in parts.netloc.split(",") if address]
        prefix = parts.path or "/belay"
        unknown = sorted(set(query) - {"credentials", "segments", "keep_events", "segment_events"})
        if unknown:
            raise ValueError(
                f"unknown option {', '.join(unknown)} in the etcd URL {spec['url']!r} (known: "
                "credentials, segments, keep_events, segment_events)"
            )
        spec = {**query, **spec}
    else:
        endpoints, prefix = spec["endpoints"], spec.get("prefix", "/belay")
    segments = open_artifact_store(spec["segments"]) if spec.get("segments") else None
    return EtcdEventStore(
        endpoints,
        prefix=prefix,
        request_timeout=float(spec.get("request_timeout", 2.0)),
        operation_timeout=float(spec.get("operation_timeout", 15.0)),
        record_key=record_key_for(spec) or b"",
        segments=segments,
        keep_events=int(spec.get("keep_events", ARCHIVE_KEEP_EVENTS)),
        segment_events=int(spec.get("segment_events", SEGMENT_EVENTS)),
        credentials=EtcdCredentials.from_directory(spec["credentials"]) if spec.get("credentials") else None,
    )


async def archive_closed(store: EventStore, session_id: str) -> list[Segment]:
    """What the operator calls after it sees a checkpoint in a session's record: archive the
    record's closed ranges when the store is etcd with a segment store, and do nothing otherwise
    (SQLite keeps every event in its file). A failure (the artifact store down, say) is logged
    and left for the next checkpoint: the events stay in etcd meanwhile, so nothing is lost."""
    if not isinstance(store, EtcdEventStore) or store.segments is None:
        return []
    try:
        return await store.archive(session_id)
    except StoreError as error:
        log.warning(
            "archiving the record of session %s failed, left for its next checkpoint: %s", session_id, error
        )
        return []
