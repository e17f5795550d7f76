"""The event store on etcd v3, for clusters.

Key layout (every key under `prefix`, default `/belay`; a session id is percent-encoded into one
path segment):

    <prefix>/sessions/<id>/head               {"last_seq": n, "chain": link, "seal": ...}; its
                                              mod_revision guards seq assignment
    <prefix>/sessions/<id>/events/<seq:020d>  the event, as its JSON envelope with its chain link
    <prefix>/sessions/<id>/idem/<key>         {"digest": ..., "first_seq": a, "last_seq": b}
    <prefix>/sessions/<id>/claims/<claim>     {"seq": n}: the first event of the batch that took it
    <prefix>/sessions/<id>/lease              {"number": n, "holder": ...}
    <prefix>/sessions/<id>/renewal            {"number": n, "renewed_at": ...}: the last lease renewal
    <prefix>/sessions/<id>/latest/<type>      {"seq": n}: the newest event of that type
    <prefix>/sessions/<id>/segments/<first:020d>  {"first", "last", "sha256", "size"}: an archived
                                              segment, its events' stored bytes in the artifact store
    <prefix>/index/<id>                       empty; one per session, for list_sessions
    <prefix>/segment-trash/<id>/<sha256>      empty; a deleted session's segment not yet deleted

Archiving (`archive`) moves the closed part of a record (all but the newest `keep_events`) out of
etcd into segments, oldest first, so etcd holds a bounded part of every record; reads take the
archived seqs from the segments and the rest from etcd, through one chain check (docs/stores.md,
"Archived segments").

An append writes the events, the new head, the latest-of-type entries, the idempotency record and
the claim in ONE transaction whose compares are: head unchanged since the state the seqs were
based on (mod_revision), with a lease the lease unchanged since its number was checked
(mod_revision), with a key the idempotency key unused, with a claim the claim unused. Each
event's link in the record's hash chain follows the head's (`belay.stores.integrity`); a read
takes the head and the event before its range in the same transaction as its first page, and
checks them. The state is the one this store last wrote for the
session, or a guess of "new session"; when a compare fails (another writer got there first), the
transaction's failure branch returns the current state and the append tries again on it
(optimistic concurrency, one round trip per try). etcd transactions are strict serializable, so
the fencing lease is a number compared in the same transaction as the write, never an etcd lock.
Appends of several sessions that come while another append's transaction is in flight go out
together as one transaction, each still whole or not at all (`_send_queued`).

Deleting a session is one transaction of two range deletes (`<prefix>/sessions/<id>/` and the index
key), so no reader ever sees part of a session; its segments' blobs are deleted after it. A watch
is cut by the DELETE of an event key (an archive or a deletion) and tells a deletion, when it
re-reads, from the head key's create_revision (gone, or a recreated head has a new one).

The client is aetcd's generated gRPC stubs on our own `grpc.aio` channel: one channel can list
several endpoints (round-robin, skipping members that are down), and every call carries its own
deadline so an unreachable cluster becomes a prompt StoreUnavailable.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import grpc
import grpc.aio
from aetcd import rpc
from pydantic import TypeAdapter

from belay.journal.events import (
    EnvelopeJson,
    Event,
    EventDraft,
    batch_digest,
    build_event,
    canonical_json,
    now_utc,
)
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    ArtifactCorrupted,
    ArtifactNotFound,
    ArtifactStore,
    ClaimTaken,
    EventStore,
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
from belay.stores.etcd import wire
from belay.stores.integrity import FIELDS_START, GENESIS, Chain, Head, RecordCheck, record_key_for

T = TypeVar("T")
log = logging.getLogger("belay.stores.etcd")

# etcd refuses requests above --max-request-bytes (1.5 MiB by default) and transactions with more
# than --max-txn-ops operations (128 by default). A batch is one transaction, so it must fit both.
MAX_BATCH_BYTES = 1024 * 1024
MAX_BATCH_EVENTS = 100
MAX_TXN_OPERATIONS = 128

KNOWN_HEADS = 4096
READ_PAGE = 500

# Archiving (`EtcdEventStore.archive`): what stays in etcd, at least, and the size of a segment.
# The newest 2,000 events cover every read a running session makes of its tail (the context's
# window, a compaction's span, the fold after the latest state snapshot).
ARCHIVE_KEEP_EVENTS = 2000
SEGMENT_EVENTS = 1000
SEGMENT_MEDIA_TYPE = "application/vnd.belay.segment+jsonl"
SEGMENT_CACHE = 8

EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])

# Errors after which the request may or may not have reached the cluster: retried, never trusted.
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)


def _host_and_port(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"etcd endpoint needs a host and a port: {endpoint!r}")
    return parts.hostname, parts.port


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def grpc_target(endpoints: Sequence[str]) -> str:
    """`http://host:2379` style endpoints as one gRPC target, balanced round-robin:
    - one DNS name stays a DNS target, so a headless Service's every member is used and followed;
    - otherwise every address is listed; DNS names among several endpoints are resolved once, here.
    """
    hosts = [_host_and_port(endpoint) for endpoint in endpoints]
    if not hosts:
        raise ValueError("at least one etcd endpoint is needed")
    if len(hosts) == 1 and _ip(hosts[0][0]) is None:
        return f"dns:///{hosts[0][0]}:{hosts[0][1]}"
    addresses: list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]] = []
    for host, port in hosts:
        literal = _ip(host)
        if literal is not None:
            addresses.append((literal, port))
            continue
        for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            addresses.append((ipaddress.ip_address(sockaddr[0]), port))
    # One gRPC target holds one address family; IPv4 wins when both are present.
    v4 = [f"{ip}:{port}" for ip, port in dict.fromkeys(addresses) if ip.version == 4]
    if v4:
        return "ipv4:" + ",".join(v4)
    return "ipv6:" + ",".join(f"[{ip}]:{port}" for ip, port in dict.fromkeys(addresses))


def prefix_range_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (etcd's range_end convention)."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def check_batch_size(drafts: Sequence[EventDraft], encoded: Sequence[bytes]) -> None:
    """Refuse, before anything is sent, a batch etcd could not hold in one transaction.
    `encoded` are the events' stored bytes."""
    if len(drafts) > MAX_BATCH_EVENTS:
        raise PayloadTooLarge(
            f"a batch of {len(drafts)} events is above the {MAX_BATCH_EVENTS}-event limit of one "
            "etcd transaction: append it in smaller batches"
        )
    for index, draft in enumerate(drafts):
        if draft.payload_size > MAX_PAYLOAD_BYTES:
            raise PayloadTooLarge(
                f"event {index} ({draft.type}) has a {draft.payload_size}-byte payload, above the "
                f"{MAX_PAYLOAD_BYTES}-byte limit: store the bytes as an artifact and reference its sha256"
            )
    total = sum(map(len, encoded))
    if total > MAX_BATCH_BYTES:
        raise PayloadTooLarge(
            f"a batch of {total} bytes is above the {MAX_BATCH_BYTES}-byte limit of one etcd "
            "transaction: store large payloads as artifacts or append in smaller batches"
        )


@dataclass(frozen=True)
class SessionKeys:
    """Every key of one session."""

    session_id: str
    root: bytes
    head: bytes
    lease: bytes
    events_prefix: bytes

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def of(prefix: str, session_id: str) -> SessionKeys:
        # Cached: a hit is one lookup, with no Python call, on the append's path.
        if not session_id:
            raise ValueError("session id must not be empty")
        root = f"{prefix}/sessions/{quote(session_id, safe='')}/".encode()
        return SessionKeys(session_id, root, root + b"head", root + b"lease", root + b"events/")

    def event(self, seq: int) -> bytes:
        # Twenty digits: key order is seq order for every seq a 64-bit counter can hold.
        return b"%s%020d" % (self.events_prefix, seq)

    @property
    def renewal(self) -> bytes:
        return self.root + b"renewal"

    def idem(self, key: str) -> bytes:
        return self.root + b"idem/" + quote(key, safe="").encode()

    def claim(self, claim: str) -> bytes:
        return self.root + b"claims/" + quote(claim, safe="").encode()

    def latest(self, event_type: str) -> bytes:
        return self.root + b"latest/" + event_type.encode()

    @property
    def segments_prefix(self) -> bytes:
        return self.root + b"segments/"

    def segment(self, first_seq: int) -> bytes:
        return b"%s%020d" % (self.segments_prefix, first_seq)


@dataclass(slots=True)
class Snapshot:
    """What an append decides on, all read at one revision."""

    head_mod_revision: int = 0
    last_seq: int = 0
    chain: bytes = GENESIS  # the last event's link
    lease_mod_revision: int = 0
    lease_number: int = 0  # a session that never had a lease is at lease 0
    idem_record: dict[str, Any] | None = None
    claim_seq: int | None = None  # where the append's claim was taken, if it was
    # False for a state remembered from this store's own last append: good enough to try a write
    # on (the transaction's compares catch a stale one), never to refuse an append on.
    authoritative: bool = True


@dataclass(slots=True)
class QueuedAppend:
    """An append's transaction waiting to go out with others (see `EtcdEventStore._send_queued`).
    `operations`: how many compares, success puts and failure reads it adds to a transaction.
    `outcome`: the transaction's response, where this append's failure reads start in it, and
    whether the transaction held other appends too."""

    session_id: str
    request: bytes
    operations: tuple[int, int, int]
    outcome: asyncio.Future[tuple[Any, int, bool]]


def queued_state_count(idempotency_key: str | None, claim: str | None) -> int:
    """How many failure-branch reads an append's transaction carries (`_state_keys`)."""
    return 2 + (idempotency_key is not None) + (claim is not None)


def _operation_counts(
    snapshot: Snapshot,
    values: list[bytes],
    drafts: list[EventDraft],
    fenced: bool,
    idempotency_key: str | None,
    claim: str | None,
) -> tuple[int, int, int]:
    """The compares, success puts and failure reads of `_append_request` for these arguments."""
    keyed = idempotency_key is not None
    claimed = claim is not None
    compares = 1 + fenced + keyed + claimed
    puts = len(values) + 1 + len({draft.type for draft in drafts}) + keyed + claimed
    puts += snapshot.head_mod_revision == 0  # the session index entry
    return compares, puts, queued_state_count(idempotency_key, claim)


@dataclass
class UnsettledAttempt:
    """A transaction whose answer was lost: it may have been applied or not."""

    events: list[Event]
    values: list[bytes]


def _put(key: bytes, value: bytes) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))


def _range(key: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def _mod_revision_is(key: bytes, revision: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision)


def _parse_events(values: list[bytes]) -> list[Event]:
    # One validate_json over a JSON array is markedly cheaper than one call per event.
    return EVENT_LIST_ADAPTER.validate_json(b"[" + b",".join(values) + b"]") if values else []


def _head_from(value: bytes) -> Head:
    head = json.loads(value)
    return Head(int(head["last_seq"]), head.get("chain", "").encode(), head.get("seal", "").encode())


def _range_prefix(prefix: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix)))


@dataclass(frozen=True, slots=True)
class Segment:
    """One archived range of a session's record: the stored events `first`..`last`, one per line,
    as the blob `sha256` in the artifact store. Its index entry is `<root>segments/<first:020d>`."""

    first: int
    last: int
    sha256: str
    size: int

    def entry(self) -> bytes:
        return canonical_json(
            {"first": self.first, "last": self.last, "sha256": self.sha256, "size": self.size}
        )


def _segment_index(kvs: Sequence[Any]) -> list[Segment]:
    """The index entries, in seq order (their keys sort by first seq)."""
    segments = []
    for kv in kvs:
        entry = json.loads(kv.value)
        segments.append(Segment(int(entry["first"]), int(entry["last"]), entry["sha256"], int(entry["size"])))
    return segments


def _covering(segments: Sequence[Segment], seq: int) -> Segment | None:
    """The segment that holds `seq`, if it is archived. Segments cover 1..n with no gap, so the
    last one says whether `seq` is archived at all."""
    if not segments or seq > segments[-1].last:
        return None
    for segment in segments:
        if segment.first <= seq <= segment.last:
            return segment
    return None


_SEQ_FIELD = b'"seq":'


def segment_lines(data: bytes) -> dict[int, bytes]:
    """A segment's stored events by the seq each names (its first field after the chain link).
    A line that names none is kept under seq 0, where the chain check reports it."""
    lines: dict[int, bytes] = {}
    for line in data.split(b"\n"):
        if not line:
            continue
        start = FIELDS_START + len(_SEQ_FIELD)
        stop = line.find(b",", start)
        digits = line[start:stop] if line[FIELDS_START:start] == _SEQ_FIELD and stop > start else b""
        lines[int(digits) if digits.isdigit() else 0] = line
    return lines


class EtcdEventStore:
    """`EventStore` on etcd v3. See the module docstring for the key layout.

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
    ) -> None:
        if keep_events < 1 or segment_events < 1:
            raise ValueError("keep_events and segment_events must be at least 1")
        self.segments = segments
        self.keep_events = keep_events
        self.segment_events = segment_events
        # Recently read segments, parsed (a segment never changes: its index names its hash).
        self._segment_cache: dict[str, dict[int, bytes]] = {}
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self.prefix = prefix.rstrip("/")
        self.request_timeout = request_timeout
        self.operation_timeout = operation_timeout
        self.chain = Chain(record_key if record_key is not None else record_key_for())
        for endpoint in self.endpoints:
            _host_and_port(endpoint)  # refuse a malformed endpoint now, not on first use
        if not self.endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._watch: Any = None
        self._encoded_txn: Any = None
        # The head this store last wrote, per session (insertion-ordered, oldest evicted first).
        self._known_heads: dict[str, Snapshot] = {}
        # Appends share transactions while one is in flight (see `_send_queued`): how many append
        # transactions are in flight or about to be sent, and the appends waiting for the next.
        self._in_flight = 0
        self._queued: list[QueuedAppend] = []
        self._senders: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------------------------------------
    # Connection and retries

    def _stubs(self) -> tuple[Any, Any]:
        # The channel binds to the running event loop, so it is made on first use, not in __init__.
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                grpc_target(self.endpoints),
                options=[
                    ("grpc.lb_policy_name", "round_robin"),
                    ("grpc.keepalive_time_ms", 5000),
                    ("grpc.keepalive_timeout_ms", 2000),
                    ("grpc.keepalive_permit_without_calls", 1),
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000),
                    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ],
            )
            self._kv = rpc.KVStub(self._channel)
            self._watch = rpc.WatchStub(self._channel)
            # KV.Txn for a request that is already wire bytes (no serializer: bytes go as they are).
            self._encoded_txn = self._channel.unary_unary(
                "/etcdserverpb.KV/Txn",
                request_serializer=None,
                response_deserializer=rpc.TxnResponse.FromString,
            )
        return self._kv, self._watch

    def _unavailable(self, last_error: BaseException | None) -> StoreUnavailable:
        detail = f": {_describe(last_error)}" if last_error else ""
        return StoreUnavailable(
            f"etcd at {', '.join(self.endpoints)} did not answer within {self.operation_timeout:g}s"
            f"{detail}; nothing was written by the failed call"
        )

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent call (a read), retrying transient failures until the operation deadline."""
        deadline = time.monotonic() + self.operation_timeout
        delay = 0.05
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise _permanent(error) from error
                last_error = error
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
        raise self._unavailable(last_error)

    # ----------------------------------------------------------------------------------------------
    # Raw etcd operations, each one RPC with its own deadline

    async def _range(self, key: bytes, range_end: bytes = b"", **options: Any) -> Any:
        kv, _ = self._stubs()
        request = rpc.RangeRequest(key=key, range_end=range_end, **options)
        return await kv.Range(request, timeout=self.request_timeout)

    async def _txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> Any:
        kv, _ = self._stubs()
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure or [])
        return await kv.Txn(request, timeout=self.request_timeout)

    async def _get_json(self, key: bytes) -> tuple[dict[str, Any] | None, int]:
        response = await self._retrying(lambda: self._range(key))
        if not response.kvs:
            return None, 0
        return json.loads(response.kvs[0].value), response.kvs[0].mod_revision

    # ----------------------------------------------------------------------------------------------
    # Append

    @staticmethod
    def _state_keys(keys: SessionKeys, idempotency_key: str | None, claim: str | None) -> tuple[bytes, ...]:
        """What an append decides on: head, lease, then the idempotency record and the claim when
        the append has them."""
        state: tuple[bytes, ...] = (keys.head, keys.lease)
        if idempotency_key is not None:
            state += (keys.idem(idempotency_key),)
        if claim is not None:
            state += (keys.claim(claim),)
        return state

    @staticmethod
    def _snapshot_from(responses: Sequence[Any], idempotency_key: str | None, claim: str | None) -> Snapshot:
        """The state read from `_state_keys` (the transaction's responses to those reads), whether
        they ran as a transaction's success branch (a plain read) or its failure branch (a write
        whose compares failed)."""
        ranges = [op.response_range for op in responses]
        snapshot = Snapshot()
        if ranges[0].kvs:
            head = json.loads(ranges[0].kvs[0].value)
            snapshot.head_mod_revision = ranges[0].kvs[0].mod_revision
            snapshot.last_seq = head["last_seq"]
            snapshot.chain = head.get("chain", "").encode()
        if ranges[1].kvs:
            snapshot.lease_mod_revision = ranges[1].kvs[0].mod_revision
            snapshot.lease_number = json.loads(ranges[1].kvs[0].value)["number"]
        if idempotency_key is not None and ranges[2].kvs:
            snapshot.idem_record = json.loads(ranges[2].kvs[0].value)
        if claim is not None and ranges[-1].kvs:
            snapshot.claim_seq = json.loads(ranges[-1].kvs[0].value)["seq"]
        return snapshot

    async def _snapshot(self, keys: SessionKeys, idempotency_key: str | None, claim: str | None) -> Snapshot:
        reads = [_range(key) for key in self._state_keys(keys, idempotency_key, claim)]
        return self._snapshot_from((await self._txn([], reads)).responses, idempotency_key, claim)

    def _remembered(self, session_id: str) -> Snapshot:
        # Never seen: guess a new session. If it is not, the write's compares fail and its
        # failure branch returns the real state, still in one round trip.
        return self._known_heads.get(session_id) or Snapshot(authoritative=False)

    def _remember(
        self, session_id: str, snapshot: Snapshot, written_at: int, last_seq: int, chain: bytes
    ) -> None:
        self._known_heads.pop(session_id, None)
        self._known_heads[session_id] = Snapshot(
            head_mod_revision=written_at,
            last_seq=last_seq,
            chain=chain,
            lease_mod_revision=snapshot.lease_mod_revision,
            lease_number=snapshot.lease_number,
            authoritative=False,
        )
        while len(self._known_heads) > KNOWN_HEADS:
            self._known_heads.pop(next(iter(self._known_heads)))

    async def _events_at(self, keys: SessionKeys, first: int, last: int) -> list[Any]:
        # Event keys are written once and never changed, so the current revision holds the same
        # bytes as any earlier one; reading at an older revision could only fail after compaction.
        response = await self._range(keys.event(first), keys.event(last + 1))
        return list(response.kvs)

    async def _settle(
        self, keys: SessionKeys, snapshot: Snapshot, unsettled: list[UnsettledAttempt]
    ) -> list[Event] | None:
        """Decide lost-answer attempts the snapshot can decide. Each compared on a head revision
        that the snapshot has moved past, so it either landed (its exact bytes are at its seqs)
        or never will."""
        for attempt in list(unsettled):
            first, last = attempt.events[0].seq, attempt.events[-1].seq
            if snapshot.last_seq < last:
                continue
            stored = [kv.value for kv in await self._events_at(keys, first, last)]
            if len(stored) < len(attempt.values):  # archived since: the segments hold the rest
                stored = await self._stored_values(keys, first, last)
            if stored == attempt.values:
                return attempt.events
            unsettled.remove(attempt)
        return None

    async def append(
        self,
        session_id: str,
        drafts: Sequence[EventDraft],
        *,
        idempotency_key: str | None = None,
        lease: int | None = None,
        claim: str | None = None,
        durable: bool = True,  # every etcd write is in a majority's fsynced log before it is acknowledged
    ) -> list[Event]:
        drafts = list(drafts)
        if not drafts:
            return []
        if len(drafts) > MAX_BATCH_EVENTS:
            check_batch_size(drafts, [])
        keys = SessionKeys.of(self.prefix, session_id)
        digest = batch_digest(drafts) if idempotency_key is not None else ""
        # One timestamp per call: a retry that reuses seqs writes byte-identical events, so two
        # attempts racing for the same head revision cannot leave different records.
        created_at = now_utc()
        envelope = EnvelopeJson(session_id, created_at, idempotency_key)
        stored = self.chain.stored
        unsettled: list[UnsettledAttempt] = []
        checked = False
        alone = False
        deadline = time.monotonic() + self.operation_timeout
        delay = 0.02
        last_error: BaseException | None = None
        # Usually one round trip: a write against the state this store last saw. Its compares
        # guard it; when they fail, the failure branch carries the fresh state for the next try.
        snapshot: Snapshot | None = self._remembered(session_id)
        while time.monotonic() < deadline:
            queued: QueuedAppend | None = None
            try:
                if snapshot is None:
                    snapshot = await self._snapshot(keys, idempotency_key, claim)
                if snapshot.authoritative:
                    settled = await self._settle(keys, snapshot, unsettled)
                    if settled is not None:
                        return settled
                    if snapshot.idem_record is not None:
                        return await self._replay(keys, snapshot, idempotency_key, digest)
                if lease is not None and snapshot.lease_number != lease:
                    if not snapshot.authoritative:
                        snapshot = None
                        continue
                    raise StaleLease(
                        f"session {session_id!r}: lease {lease} is not the current lease "
                        f"{snapshot.lease_number}; a newer harness attempt owns the session"
                    )
                if snapshot.claim_seq is not None and claim is not None:
                    raise ClaimTaken(session_id, claim, snapshot.claim_seq)
                first_seq = snapshot.last_seq + 1
                link = snapshot.chain
                values = []
                links = []
                for seq, draft in enumerate(drafts, start=first_seq):
                    value, link = stored(link, envelope.fields(draft, seq))
                    values.append(value)
                    links.append(link)
                if not checked:
                    # Checked once, before any request is sent. One stored event within the payload
                    # limit is within every limit.
                    if len(values) > 1 or len(values[0]) > MAX_PAYLOAD_BYTES:
                        check_batch_size(drafts, values)
                    checked = True
                request = self._append_request(
                    keys,
                    snapshot,
                    drafts,
                    first_seq,
                    values,
                    link,
                    idempotency_key,
                    digest,
                    lease is not None,
                    claim,
                )
                if self._encoded_txn is None:
                    self._stubs()
                events = []
                if self._in_flight == 0 or alone:
                    # Nothing in flight (always so for a single writer): send it now, alone.
                    self._in_flight += 1
                    waiting: Any = self._encoded_txn(request, timeout=self.request_timeout)
                else:
                    # Another append's transaction is in flight: go out after it, with every
                    # append queued meanwhile, in one transaction.
                    counts = _operation_counts(
                        snapshot, values, drafts, lease is not None, idempotency_key, claim
                    )
                    queued = QueuedAppend(
                        session_id, request, counts, asyncio.get_running_loop().create_future()
                    )
                    self._queued.append(queued)
                    waiting = queued.outcome
                try:
                    if queued is None:
                        # Let the call's task send the request: building the events to return
                        # then overlaps the round trip.
                        await asyncio.sleep(0)
                    for seq, draft in enumerate(drafts, start=first_seq):
                        events.append(
                            build_event(
                                draft,
                                seq=seq,
                                session_id=session_id,
                                created_at=created_at,
                                idempotency_key=idempotency_key,
                                chain=links[seq - first_seq].decode(),
                            )
                        )
                    answer = await waiting
                except grpc.aio.AioRpcError as error:
                    if error.code() in TRANSIENT_CODES and not _never_sent(error):
                        unsettled.append(UnsettledAttempt(events, values))
                    raise
                except BaseException:
                    # Cancelled before the answer (or anything else): cancel the RPC too, as
                    # awaiting it would have; an append still queued is dropped, and one that
                    # went out with others is written with them or not at all.
                    waiting.cancel()
                    raise
                finally:
                    if queued is None:
                        if self._queued:
                            self._transaction_done()
                        else:  # the single writer's case, inline
                            self._in_flight -= 1
                response, failure_from, shared = (answer, 0, False) if queued is None else answer
                if response.succeeded:
                    self._remember(session_id, snapshot, response.header.revision, events[-1].seq, link)
                    return events
                # Another writer got there first (or the remembered state was stale): go again
                # at once on the state the failure branch read. After a shared transaction failed,
                # the retry goes alone, so one contended session cannot keep failing the others.
                failure_to = failure_from + queued_state_count(idempotency_key, claim)
                snapshot = self._snapshot_from(
                    response.responses[failure_from:failure_to], idempotency_key, claim
                )
                alone = shared
                continue
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    if queued is not None and not alone:
                        # Refused with others (say a cluster with lower limits than etcd's
                        # defaults): nothing was written; try it alone before blaming this batch.
                        alone = True
                        continue
                    raise _permanent(error) from error
                last_error = error
                # After a lost answer nothing remembered can be trusted: read the state afresh.
                snapshot = None
                self._known_heads.pop(session_id, None)
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
        if unsettled:
            raise StoreUnavailable(
                f"etcd at {', '.join(self.endpoints)} did not confirm the append within "
                f"{self.operation_timeout:g}s ({_describe(last_error)}); the batch is either fully "
                "written or not at all: retry with the same idempotency key to find out"
            )
        raise self._unavailable(last_error)

    # ----------------------------------------------------------------------------------------------
    # Appends sharing a transaction

    def _transaction_done(self, shared: bool = False) -> None:
        """An append transaction came back. Appends queued meanwhile go out together, one loop
        turn later: the writers this answer wakes run first, and those that append again at once
        (a writer per session in one process) join the same transaction. After a shared
        transaction that turn is taken even with nothing queued yet: its writers are the ones
        about to append."""
        if self._queued or shared:
            asyncio.get_running_loop().call_soon(self._send_queued)
        else:
            self._in_flight -= 1

    def _send_queued(self) -> None:
        """Send the queued appends as one transaction (its slot in `_in_flight` is already
        counted). Why: with several writers in one process, the event loop's work per RPC, not
        etcd, bounds the appends per second; one transaction for several appends pays it once.

        Concatenated `TxnRequest` encodings are one `TxnRequest` whose compares, puts and reads
        are those of each in turn (protobuf appends repeated fields), so each append's wire bytes
        go in as they are. The transaction succeeds only if every append's compares hold; when
        one fails, its failure branch reads every append's state and each takes its own slice.
        At most one append per session goes in (etcd refuses a transaction that puts one key
        twice), and the whole stays within etcd's limits on operations and request size."""
        group: list[QueuedAppend] = []
        waiting: list[QueuedAppend] = []
        sessions: set[str] = set()
        compares = puts = reads = size = 0
        for queued in self._queued:
            if queued.outcome.done():  # cancelled while it waited
                continue
            more_compares, more_puts, more_reads = queued.operations
            fits = not group or (
                max(compares + more_compares, puts + more_puts, reads + more_reads) <= MAX_TXN_OPERATIONS
                and size + len(queued.request) <= MAX_BATCH_BYTES
            )
            if queued.session_id in sessions or not fits:
                waiting.append(queued)
                continue
            group.append(queued)
            sessions.add(queued.session_id)
            compares, puts, reads = compares + more_compares, puts + more_puts, reads + more_reads
            size += len(queued.request)
        self._queued = waiting
        if not group:
            self._in_flight -= 1
            return
        task = asyncio.get_running_loop().create_task(self._answer_queued(group))
        self._senders.add(task)  # a task nobody holds may be collected before it is done
        task.add_done_callback(self._senders.discard)

    async def _answer_queued(self, group: list[QueuedAppend]) -> None:
        try:
            request = b"".join(queued.request for queued in group)
            response = await self._encoded_txn(request, timeout=self.request_timeout)
        except Exception as error:  # each append decides what the failure means for it
            for queued in group:
                if not queued.outcome.done():
                    queued.outcome.set_exception(error)
        except BaseException:
            for queued in group:
                queued.outcome.cancel()
            raise
        else:
            failure_from = 0
            for queued in group:
                if not queued.outcome.done():
                    queued.outcome.set_result((response, failure_from, len(group) > 1))
                failure_from += queued.operations[2]
        finally:
            self._transaction_done(len(group) > 1)

    def _append_request(
        self,
        keys: SessionKeys,
        snapshot: Snapshot,
        drafts: list[EventDraft],
        first_seq: int,
        values: list[bytes],
        last_link: bytes,
        idempotency_key: str | None,
        digest: str,
        fenced: bool,
        claim: str | None,
    ) -> bytes:
        """The append's one transaction, as wire bytes (see `wire` for why). Its parts go
        into one list in field order (compares, puts, then the failure branch's reads); plain
        loops rather than comprehensions, which are each a function call in Python 3.11."""
        last_seq = first_seq + len(values) - 1
        idem_key = keys.idem(idempotency_key) if idempotency_key is not None else None
        claim_key = keys.claim(claim) if claim is not None else None
        parts = [wire.mod_revision_is(keys.head, snapshot.head_mod_revision)]
        if fenced:
            parts.append(wire.mod_revision_is(keys.lease, snapshot.lease_mod_revision))
        if idem_key is not None:
            parts.append(wire.mod_revision_is(idem_key, 0))
        if claim_key is not None:
            parts.append(wire.mod_revision_is(claim_key, 0))
        for seq, value in enumerate(values, start=first_seq):
            parts.append(wire.put(keys.event(seq), value))
        seal = self.chain.seal(last_seq, last_link)
        parts.append(
            wire.put(keys.head, b'{"last_seq":%d,"chain":"%s","seal":"%s"}' % (last_seq, last_link, seal))
        )
        newest_of_type: dict[str, int] = {}
        for seq, draft in enumerate(drafts, start=first_seq):
            newest_of_type[draft.type] = seq
        for event_type, seq in newest_of_type.items():
            parts.append(wire.put(keys.latest(event_type), b'{"seq":%d}' % seq))
        if idem_key is not None:
            record = {"digest": digest, "first_seq": first_seq, "last_seq": last_seq}
            parts.append(wire.put(idem_key, canonical_json(record)))
        if claim_key is not None:
            parts.append(wire.put(claim_key, b'{"seq":%d}' % first_seq))
        if snapshot.head_mod_revision == 0:
            parts.append(wire.put(self._index_key(keys.session_id), b""))
        # When a compare fails, the same round trip brings back the state to retry on (the same
        # reads as `_state_keys`, in the same order).
        state_keys = (
            (keys.head, keys.lease)
            if idem_key is None and claim_key is None
            else self._state_keys(keys, idempotency_key, claim)
        )
        parts.append(wire.failure_ranges(state_keys))
        return b"".join(parts)

    async def _replay(
        self, keys: SessionKeys, snapshot: Snapshot, idempotency_key: str | None, digest: str
    ) -> list[Event]:
        record = snapshot.idem_record
        assert record is not None
        if record["digest"] != digest:
            raise IdempotencyConflict(
                f"idempotency key {idempotency_key!r} was used for a different batch "
                f"(seqs {record['first_seq']}..{record['last_seq']})"
            )
        events, _, _ = await self._read_at(keys, record["first_seq"], record["last_seq"], None)
        return events

    # ----------------------------------------------------------------------------------------------
    # Reads

    async def _read_at(
        self, keys: SessionKeys, from_seq: int, to_seq: int | None, limit: int | None
    ) -> tuple[list[Event], int, RecordCheck]:
        stored, revision, check = await self._read_stored(keys, from_seq, to_seq, limit)
        return _parse_events(stored), revision, check

    async def _read_stored(
        self, keys: SessionKeys, from_seq: int, to_seq: int | None, limit: int | None
    ) -> tuple[list[bytes], int, RecordCheck]:
        """The stored events in [from_seq, to_seq], page by page, checked against the chain; the
        revision of the last etcd page: every event written up to that revision is in the result
        or beyond to_seq/limit; and the check, to go on with events that follow. The first page is
        one transaction with the head, the segment index and the event before from_seq, so nothing
        in it may lie beyond the head and a read to the end must reach it. Later pages are not
        pinned to one revision (events never change, so they need not be, and a pinned revision
        could be compacted away mid-read); seqs are dense, so a later page can only find more
        events, or find that the ones it looked for were archived meanwhile (the index is read
        again then).

        The archived seqs (1 up to the last segment's end, see `archive`) come from their
        segments, the rest from etcd, through one check: the chain runs on across the boundary."""
        first = max(from_seq, 1)
        stored: list[bytes] = []
        end = keys.event(to_seq + 1) if to_seq is not None else prefix_range_end(keys.events_prefix)
        page = READ_PAGE if limit is None else min(READ_PAGE, limit)
        reads = [
            _range(keys.head),
            rpc.RequestOp(request_range=rpc.RangeRequest(key=keys.event(first), range_end=end, limit=page)),
            _range_prefix(keys.segments_prefix),
        ]
        if first > 1:
            reads.append(_range(keys.event(first - 1)))
        response = await self._retrying(lambda: self._txn([], reads))
        head_range, events_range = response.responses[0].response_range, response.responses[1].response_range
        archived = _segment_index(response.responses[2].response_range.kvs)
        previous = (
            response.responses[3].response_range.kvs[0].value
            if first > 1 and response.responses[3].response_range.kvs
            else None
        )
        if previous is None and first > 1 and (covering := _covering(archived, first - 1)) is not None:
            previous = (await self._segment_values(keys.session_id, covering)).get(first - 1)
        check = RecordCheck(
            self.chain,
            keys.session_id,
            first,
            previous,
            _head_from(head_range.kvs[0].value) if head_range.kvs else None,
        )
        revision = response.header.revision
        kvs, more = events_range.kvs, events_range.more
        at = 0  # the next of `kvs` to take
        next_seq = first
        looked_again_at = 0  # the seq the index was last read again for

        def wanted(seq: int) -> bool:
            return (to_seq is None or seq <= to_seq) and (limit is None or len(stored) < limit)

        while wanted(next_seq):
            segment = _covering(archived, next_seq)
            if segment is not None:
                values = await self._segment_values(keys.session_id, segment)
                for seq in sorted(seq for seq in values if next_seq <= seq <= segment.last):
                    if not wanted(seq):
                        break
                    check.event(seq, values[seq])
                    stored.append(values[seq])
                next_seq = segment.last + 1
                continue
            while at < len(kvs) and int(kvs[at].key[-20:]) < next_seq:
                at += 1  # served from a segment archived after this page was read
            if at == len(kvs):
                if not more:
                    break
                check.head_is_current = False  # later pages may hold events appended since
                page = READ_PAGE if limit is None else min(READ_PAGE, limit - len(stored))
                start = keys.event(next_seq)
                ranged = await self._retrying(functools.partial(self._range, start, end, limit=page))
                revision, kvs, more, at = ranged.header.revision, ranged.kvs, ranged.more, 0
                if not kvs:
                    more = False
                    # Nothing from next_seq on: either the end, or archived since the last page.
                    if looked_again_at != next_seq:
                        looked_again_at = next_seq
                        archived = await self._segment_index(keys)
                        more = _covering(archived, next_seq) is not None
                    if not more:
                        break
                continue
            if int(kvs[at].key[-20:]) > next_seq and looked_again_at != next_seq:
                # A gap: archived since the index was read, or missing (the check says so).
                looked_again_at = next_seq
                archived = await self._segment_index(keys)
                continue
            # The page's events in a row (the range's end keeps them within to_seq).
            take = len(kvs) if limit is None else min(len(kvs), at + limit - len(stored))
            for kv in kvs[at:take]:
                seq = int(kv.key[-20:])
                check.event(seq, kv.value)
                stored.append(kv.value)
            next_seq = seq + 1
            at = take
        if limit is None or len(stored) < limit:
            check.ran_to(to_seq)
        return stored, revision, check

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        if (to_seq is not None and to_seq < from_seq) or limit == 0:
            return []
        events, _, _ = await self._read_at(SessionKeys.of(self.prefix, session_id), from_seq, to_seq, limit)
        return events

    async def last_seq(self, session_id: str) -> int:
        head, _ = await self._get_json(SessionKeys.of(self.prefix, session_id).head)
        return 0 if head is None else int(head["last_seq"])

    async def tail(self, session_id: str, count: int) -> list[Event]:
        if count <= 0:
            return []
        keys = SessionKeys.of(self.prefix, session_id)
        response = await self._retrying(lambda: self._range(keys.head))
        if not response.kvs:
            return []
        last = json.loads(response.kvs[0].value)["last_seq"]
        events, _, _ = await self._read_at(keys, max(1, last - count + 1), None, None)
        return events

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        keys = SessionKeys.of(self.prefix, session_id)
        response = await self._retrying(lambda: self._range(keys.latest(event_type)))
        if not response.kvs:
            return None
        seq = json.loads(response.kvs[0].value)["seq"]
        events, _, _ = await self._read_at(keys, seq, seq, None)
        if not events or events[0].type != event_type:
            raise RecordCorrupt(session_id, seq, f"the index of the latest {event_type} event is wrong")
        return events[0]

    def _index_key(self, session_id: str) -> bytes:
        return f"{self.prefix}/index/{quote(session_id, safe='')}".encode()

    async def list_sessions(self) -> list[str]:
        start = f"{self.prefix}/index/".encode()
        response = await self._retrying(lambda: self._range(start, prefix_range_end(start), keys_only=True))
        return sorted(unquote(kv.key[len(start) :].decode()) for kv in response.kvs)

    # ----------------------------------------------------------------------------------------------
    # Archived segments

    async def _segment_index(self, keys: SessionKeys) -> list[Segment]:
        prefix = keys.segments_prefix
        response = await self._retrying(lambda: self._range(prefix, prefix_range_end(prefix)))
        return _segment_index(response.kvs)

    def _segment_store(self, session_id: str, segment: Segment) -> ArtifactStore:
        if self.segments is None:
            raise StoreError(
                f"the record of session {session_id!r} has archived segments (seqs {segment.first} "
                f"to {segment.last} are in segment {segment.sha256}), and this etcd store was opened "
                "without the artifact store that holds them: give its spec `segments` (an artifact "
                "store spec or URL)"
            )
        return self.segments

    async def _segment_values(self, session_id: str, segment: Segment) -> dict[int, bytes]:
        """The segment's stored events by seq. Its bytes are checked against its hash by the
        artifact store; what they say is checked against the chain by the reader."""
        cached = self._segment_cache.pop(segment.sha256, None)
        if cached is None:
            store = self._segment_store(session_id, segment)
            try:
                data = await asyncio.to_thread(store.get, segment.sha256)
            except (ArtifactNotFound, ArtifactCorrupted) as error:
                raise RecordCorrupt(
                    session_id,
                    segment.first,
                    f"the archived segment of seqs {segment.first} to {segment.last} "
                    f"({segment.sha256}) cannot be read from the artifact store: {error}",
                ) from None
            cached = segment_lines(data)
        self._cache_segment(segment.sha256, cached)
        return cached

    def _cache_segment(self, sha256: str, lines: dict[int, bytes]) -> None:
        """Keep a parsed segment, newest last, the oldest dropped beyond SEGMENT_CACHE."""
        self._segment_cache[sha256] = lines
        while len(self._segment_cache) > SEGMENT_CACHE:
            self._segment_cache.pop(next(iter(self._segment_cache)))

    async def _stored_values(self, keys: SessionKeys, first: int, last: int) -> list[bytes]:
        """The stored bytes of seqs first..last, wherever they are, unchecked (for `_settle`)."""
        reads = [
            rpc.RequestOp(
                request_range=rpc.RangeRequest(key=keys.event(first), range_end=keys.event(last + 1))
            ),
            _range_prefix(keys.segments_prefix),
        ]
        response = await self._txn([], reads)
        found = {int(kv.key[-20:]): kv.value for kv in response.responses[0].response_range.kvs}
        for segment in _segment_index(response.responses[1].response_range.kvs):
            if segment.last >= first and segment.first <= last:
                values = await self._segment_values(keys.session_id, segment)
                found.update((seq, value) for seq, value in values.items() if first <= seq <= last)
        return [found[seq] for seq in range(first, last + 1) if seq in found]

    async def segments_of(self, session_id: str) -> list[Segment]:
        """The session's archived segments, in seq order."""
        return await self._segment_index(SessionKeys.of(self.prefix, session_id))

    async def archive(self, session_id: str, *, fault: Callable[[str], None] | None = None) -> list[Segment]:
        """Move the session's closed events from etcd to segments in the artifact store, and
        return the segments made.

        Closed: every event but the newest `keep_events`, taken from the oldest in whole segments
        of `segment_events`. Events never change once written, so "closed" only says how much
        stays in etcd for the reads a running session makes. Each segment, in seq order:
        1. read from etcd through the chain check (a damaged record is never archived);
        2. stored in the artifact store (content-addressed: the same events make the same blob, so
           a rerun after a crash stores nothing twice) and read back, its hash checked;
        3. one transaction writes its index entry and deletes its events from etcd, on condition
           that the session is the one read (not deleted, not recreated) and that the segment is
           not indexed yet (another archiver may have been first).
        A crash anywhere leaves the record whole: before step 3 the events are still in etcd (and
        at most an unindexed blob in the artifact store, which the rerun reuses); after it, in the
        segment. `fault` is called with "stored", "verified" and "indexed" after each step, for
        tests that stop the archiver there."""
        store = self.segments
        if store is None:
            raise StoreError(
                f"cannot archive the record of session {session_id!r}: this etcd store was opened "
                "without an artifact store for segments (give its spec `segments`)"
            )
        keys = SessionKeys.of(self.prefix, session_id)
        made: list[Segment] = []
        while True:
            reads = [_range(keys.head), _range_prefix(keys.segments_prefix)]
            response = await self._retrying(functools.partial(self._txn, [], reads))
            head_kvs = response.responses[0].response_range.kvs
            if not head_kvs:
                return made
            incarnation = head_kvs[0].create_revision
            last_seq = int(json.loads(head_kvs[0].value)["last_seq"])
            index = _segment_index(response.responses[1].response_range.kvs)
            first = index[-1].last + 1 if index else 1
            last = first + self.segment_events - 1
            if last > last_seq - self.keep_events:
                return made
            stored, _, _ = await self._read_stored(keys, first, last, None)
            data = b"\n".join(stored) + b"\n"
            ref = await asyncio.to_thread(store.put, data, media_type=SEGMENT_MEDIA_TYPE)
            if fault is not None:
                fault("stored")
            if await asyncio.to_thread(store.get, ref.sha256) != data:
                raise StoreError(
                    f"the segment of session {session_id!r} (seqs {first} to {last}) read back from "
                    "the artifact store differs from what was stored; nothing was removed from etcd"
                )
            if fault is not None:
                fault("verified")
            segment = Segment(first, last, ref.sha256, len(data))
            compares = [
                rpc.Compare(
                    key=keys.head,
                    target=rpc.Compare.CREATE,
                    result=rpc.Compare.EQUAL,
                    create_revision=incarnation,
                ),
                rpc.Compare(
                    key=keys.segment(first),
                    target=rpc.Compare.CREATE,
                    result=rpc.Compare.EQUAL,
                    create_revision=0,
                ),
            ]
            writes = [
                _put(keys.segment(first), segment.entry()),
                rpc.RequestOp(
                    request_delete_range=rpc.DeleteRangeRequest(
                        key=keys.event(first), range_end=keys.event(last + 1)
                    )
                ),
            ]
            # A lost answer is retried: the compare on the index entry makes the retry a no-op
            # when the first try landed.
            committed = await self._retrying(functools.partial(self._txn, compares, writes))
            if committed.succeeded:
                made.append(segment)
                self._cache_segment(segment.sha256, segment_lines(data))  # the next one reads its end
                if fault is not None:
                    fault("indexed")
            elif await self._incarnation(keys) != incarnation:
                # Deleted while it was archived: the blob holds only that session's events.
                await asyncio.to_thread(store.delete, ref.sha256)
                return made

    # ----------------------------------------------------------------------------------------------
    # Deletion

    def _trash_prefix(self, session_id: str) -> bytes:
        return f"{self.prefix}/segment-trash/{quote(session_id, safe='')}/".encode()

    async def delete_session(self, session_id: str) -> None:
        """One transaction deletes the session from etcd; its segments' blobs go after it. Their
        hashes are first written under `<prefix>/segment-trash/<id>/`, outside the session, so a
        deletion cut short before the blobs are gone finishes them when it is run again."""
        keys = SessionKeys.of(self.prefix, session_id)
        index = self._index_key(session_id)
        trash = self._trash_prefix(session_id)
        archived = await self._segment_index(keys)
        if archived:
            self._segment_store(session_id, archived[0])  # refused before anything is deleted
            for start in range(0, len(archived), MAX_TXN_OPERATIONS):
                marks = [
                    _put(trash + s.sha256.encode(), b"") for s in archived[start : start + MAX_TXN_OPERATIONS]
                ]
                await self._retrying(functools.partial(self._txn, [], marks))
        deletes = [
            # Read in the same transaction, before the deletes: segments indexed since the read
            # above (an archiver racing the deletion) are deleted too.
            _range_prefix(keys.segments_prefix),
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(
                    key=keys.root, range_end=prefix_range_end(keys.root)
                )
            ),
            rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=index)),
        ]
        # Deleting what is already gone deletes nothing, so a retry after a lost answer is safe.
        response = await self._retrying(lambda: self._txn([], deletes))
        self._known_heads.pop(session_id, None)
        hashes = {s.sha256 for s in _segment_index(response.responses[0].response_range.kvs)}
        trashed = await self._retrying(lambda: self._range(trash, prefix_range_end(trash), keys_only=True))
        hashes.update(kv.key[len(trash) :].decode() for kv in trashed.kvs)
        if not hashes:
            return
        if self.segments is None:
            raise StoreError(
                f"session {session_id!r} was deleted from etcd, and the blobs of its {len(hashes)} "
                "archived segments are left: this etcd store was opened without the artifact store "
                "that holds them (its spec's `segments`); delete the session again with it"
            )
        for sha256 in sorted(hashes):
            await asyncio.to_thread(self.segments.delete, sha256)
            self._segment_cache.pop(sha256, None)
        await self._retrying(
            lambda: self._txn(
                [],
                [
                    rpc.RequestOp(
                        request_delete_range=rpc.DeleteRangeRequest(
                            key=trash, range_end=prefix_range_end(trash)
                        )
                    )
                ],
            )
        )

    async def _incarnation(self, keys: SessionKeys) -> int:
        """The head key's create_revision: 0 while the session does not exist, and a new number
        each time a deleted session id is used again."""
        response = await self._retrying(lambda: self._range(keys.head))
        return int(response.kvs[0].create_revision) if response.kvs else 0

    # ----------------------------------------------------------------------------------------------
    # Fencing lease

    async def acquire_lease(self, session_id: str, holder: str) -> Lease:
        keys = SessionKeys.of(self.prefix, session_id)
        deadline = time.monotonic() + self.operation_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                response = await self._range(keys.lease)
                current, mod_revision = (
                    (json.loads(response.kvs[0].value), response.kvs[0].mod_revision)
                    if response.kvs
                    else (None, 0)
                )
                number = (current["number"] if current else 0) + 1
                # A lost answer followed by a retry may advance the number twice; that only makes
                # one more number stale, which is what a new holder wants anyway.
                written = await self._txn(
                    [_mod_revision_is(keys.lease, mod_revision)],
                    [_put(keys.lease, canonical_json({"number": number, "holder": holder}))],
                )
                if written.succeeded:
                    self._known_heads.pop(session_id, None)
                    return Lease(session_id=session_id, number=number, holder=holder)
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise _permanent(error) from error
                last_error = error
                await asyncio.sleep(0.05)
        raise self._unavailable(last_error)

    async def current_lease(self, session_id: str) -> Lease | None:
        record, _ = await self._get_json(SessionKeys.of(self.prefix, session_id).lease)
        if record is None:
            return None
        return Lease(session_id=session_id, number=record["number"], holder=record["holder"])

    async def renew_lease(self, session_id: str, lease: int) -> LeaseRenewal:
        keys = SessionKeys.of(self.prefix, session_id)
        deadline = time.monotonic() + self.operation_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                response = await self._range(keys.lease)
                current, mod_revision = (
                    (json.loads(response.kvs[0].value), response.kvs[0].mod_revision)
                    if response.kvs
                    else (None, 0)
                )
                if current is None or current["number"] != lease:
                    held = current["number"] if current else 0
                    raise StaleLease(
                        f"renewal of lease {lease} of session {session_id!r}; the current lease is {held}"
                    )
                renewal = LeaseRenewal(session_id=session_id, number=lease, renewed_at=now_utc())
                record = {"number": lease, "renewed_at": renewal.renewed_at.isoformat()}
                # Written only while the lease is the one just read: a renewal never lands after
                # a newer attempt took the session.
                written = await self._txn(
                    [_mod_revision_is(keys.lease, mod_revision)], [_put(keys.renewal, canonical_json(record))]
                )
                if written.succeeded:
                    return renewal
                continue  # the lease moved since it was read: read it again
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise _permanent(error) from error
                last_error = error
                await asyncio.sleep(0.05)
        raise self._unavailable(last_error)

    async def lease_renewal(self, session_id: str) -> LeaseRenewal | None:
        record, _ = await self._get_json(SessionKeys.of(self.prefix, session_id).renewal)
        if record is None:
            return None
        return LeaseRenewal(
            session_id=session_id,
            number=record["number"],
            renewed_at=datetime.fromisoformat(record["renewed_at"]),
        )

    # ----------------------------------------------------------------------------------------------
    # Followers

    async def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        """Catch up by reading, then follow an etcd watch from the revision of that read. A cut or
        compacted watch, or a seq that does not follow the last one, falls back to re-reading
        from the last seq delivered, so no event is ever skipped or repeated."""
        keys = SessionKeys.of(self.prefix, session_id)
        next_seq = max(from_seq, 1)
        incarnation = 0  # the session's, once seen
        delivered = False
        while True:
            try:
                events, revision, check = await self._read_at(keys, next_seq, None, None)
                # Read after the events: a head recreated (or gone) since the session was first
                # seen means the session was deleted, and these events may belong to its successor.
                current = await self._incarnation(keys)
                if (incarnation and current != incarnation) or (delivered and not current):
                    raise SessionDeleted(f"session {session_id!r} was deleted at seq {next_seq - 1}")
                incarnation = incarnation or current
                for event in events:
                    yield event
                    next_seq = event.seq + 1
                    delivered = True
                check.head_is_current = False  # what the watch brings was appended since
                async for seq, value in self._follow(keys, revision + 1):
                    if seq < next_seq:
                        continue
                    if seq > next_seq:
                        break
                    check.event(seq, value)
                    yield _parse_events([value])[0]
                    next_seq += 1
                    delivered = True
            except (grpc.aio.AioRpcError, StoreUnavailable, _WatchCut):
                await asyncio.sleep(0.1)

    async def _follow(self, keys: SessionKeys, start_revision: int) -> AsyncIterator[tuple[int, bytes]]:
        """(seq, stored bytes) of each event put from `start_revision` on."""
        _, watch_stub = self._stubs()
        # `hasleader` makes a member that lost its leader cancel the watch instead of going quiet.
        call = watch_stub.Watch(metadata=(("hasleader", "true"),))
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=keys.events_prefix,
                        range_end=prefix_range_end(keys.events_prefix),
                        start_revision=start_revision,
                    )
                )
            )
            async for response in call:
                if response.canceled or response.compact_revision:
                    raise _WatchCut(response.cancel_reason or f"compacted at {response.compact_revision}")
                for change in response.events:
                    if change.type == rpc.Event.PUT:
                        yield int(change.kv.key[-20:]), change.kv.value
                    else:
                        # Archived (`archive`) or the whole session deleted: the re-read after the
                        # cut tells which, from the head's incarnation.
                        raise _WatchCut("events were deleted")
            raise _WatchCut("watch stream ended")
        finally:
            call.cancel()

    async def watch_sessions(self) -> AsyncIterator[str | None]:
        """One etcd watch on every session's keys (one gRPC stream, however many sessions; a watch
        per session would be a stream each). A cut watch is opened again from the revision after
        the last one it delivered; when that revision was compacted away, it starts from now and
        says that changes may have been missed (None)."""
        root = f"{self.prefix}/sessions/".encode()
        next_revision = 0  # 0: from the current revision, announced with None
        while True:
            _, watch_stub = self._stubs()
            call = watch_stub.Watch(metadata=(("hasleader", "true"),))
            try:
                await call.write(
                    rpc.WatchRequest(
                        create_request=rpc.WatchCreateRequest(
                            key=root, range_end=prefix_range_end(root), start_revision=next_revision
                        )
                    )
                )
                async for response in call:
                    if response.compact_revision:
                        next_revision = 0
                        break
                    if response.canceled:
                        raise _WatchCut(response.cancel_reason or "watch canceled")
                    if response.created:
                        if next_revision == 0:
                            next_revision = response.header.revision + 1
                            yield None
                        continue
                    moved: dict[str, None] = {}
                    for change in response.events:
                        next_revision = max(next_revision, change.kv.mod_revision + 1)
                        session_id, _, rest = change.kv.key[len(root) :].partition(b"/")
                        # An append puts its events; a deletion deletes every key of the session.
                        if change.type != rpc.Event.PUT or rest.startswith(b"events/"):
                            moved[unquote(session_id.decode())] = None
                    for session_id in moved:
                        yield session_id
            except (grpc.aio.AioRpcError, _WatchCut):
                await asyncio.sleep(0.1)
            finally:
                call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class _WatchCut(Exception):
    pass


def _never_sent(error: grpc.aio.AioRpcError) -> bool:
    """True when gRPC failed the call before it left this process: no member could be connected
    to, so the request cannot have been applied."""
    details = (error.details() or "").lower()
    return error.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in details or "connections to all backends failing" in details
    )


def _describe(error: BaseException | None) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error)


def _permanent(error: grpc.aio.AioRpcError) -> StoreError:
    details = error.details() or ""
    if "too large" in details or "too many operations" in details:
        return PayloadTooLarge(f"etcd refused the request: {details}")
    return StoreError(f"etcd refused the request: {error.code().name}: {details}")


def open_etcd_event_store(spec: dict[str, Any]) -> EtcdEventStore:
    """From a spec: `{"backend": "etcd", "endpoints": [...], "prefix": ...}` or
    `{"backend": "etcd", "url": "etcd://host:port,host:port/prefix"}`; timeouts,
    `record_key_file`, and for archived segments `segments` (an artifact store spec or URL),
    `keep_events` and `segment_events` are optional keys. A URL takes the last three as its query:
    `etcd://etcd:2379/belay?segments=s3://bucket/prefix&keep_events=2000`."""
    if "url" in spec:
        parts = urlsplit(spec["url"])
        endpoints = [f"http://{address}" for address in parts.netloc.split(",") if address]
        prefix = parts.path or "/belay"
        query = dict(parse_qsl(parts.query))
        unknown = sorted(set(query) - {"segments", "keep_events", "segment_events"})
        if unknown:
            raise ValueError(
                f"unknown option {', '.join(unknown)} in the etcd URL {spec['url']!r} (known: "
                "segments, keep_events, segment_events)"
            )
        spec = {**query, **spec}
    else:
        endpoints, prefix = spec["endpoints"], spec.get("prefix", "/belay")
    segments = None
    if spec.get("segments"):
        from belay.stores.factory import open_artifact_store

        segments = open_artifact_store(spec["segments"])
    return EtcdEventStore(
        endpoints,
        prefix=prefix,
        request_timeout=float(spec.get("request_timeout", 2.0)),
        operation_timeout=float(spec.get("operation_timeout", 15.0)),
        record_key=record_key_for(spec) or b"",
        segments=segments,
        keep_events=int(spec.get("keep_events", ARCHIVE_KEEP_EVENTS)),
        segment_events=int(spec.get("segment_events", SEGMENT_EVENTS)),
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
