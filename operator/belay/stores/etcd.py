"""The event store on etcd v3, for clusters.

Key layout (every key under `prefix`, default `/belay`; a session id is percent-encoded into one
path segment):

    <prefix>/sessions/<id>/head               {"last_seq": n}; its mod_revision guards seq assignment
    <prefix>/sessions/<id>/events/<seq:020d>  the event, as its JSON envelope
    <prefix>/sessions/<id>/idem/<key>         {"digest": ..., "first_seq": a, "last_seq": b}
    <prefix>/sessions/<id>/lease              {"number": n, "holder": ...}
    <prefix>/sessions/<id>/renewal            {"number": n, "renewed_at": ...}: the last lease renewal
    <prefix>/sessions/<id>/latest/<type>      {"seq": n}: the newest event of that type
    <prefix>/index/<id>                       empty; one per session, for list_sessions

An append writes the events, the new head, the latest-of-type entries and the idempotency record
in ONE transaction whose compares are: head unchanged since the state the seqs were based on
(mod_revision), with a lease the lease unchanged since its number was checked (mod_revision), and
with a key the idempotency key unused. The state is the one this store last wrote for the
session, or a guess of "new session"; when a compare fails (another writer got there first), the
transaction's failure branch returns the current state and the append tries again on it
(optimistic concurrency, one round trip per try). etcd transactions are strict serializable, so
the fencing lease is a number compared in the same transaction as the write, never an etcd lock.

Deleting a session is one transaction of two range deletes (`<prefix>/sessions/<id>/` and the index
key), so no reader ever sees part of a session. A watch notices a deletion from the DELETE of an
event key, or, after a cut, from the head key's create_revision (a recreated head has a new one).

The client is aetcd's generated gRPC stubs on our own `grpc.aio` channel: one channel can list
several endpoints (round-robin, skipping members that are down), and every call carries its own
deadline so an unreachable cluster becomes a prompt StoreUnavailable.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import grpc
import grpc.aio
from aetcd import rpc

from belay.journal.events import (
    EnvelopeJson,
    Event,
    EventDraft,
    batch_digest,
    build_event,
    canonical_json,
    event_from_json,
    now_utc,
)
from belay.stores import etcd_wire as wire
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    IdempotencyConflict,
    Lease,
    LeaseRenewal,
    PayloadTooLarge,
    SessionDeleted,
    StaleLease,
    StoreError,
    StoreUnavailable,
)

T = TypeVar("T")

# etcd refuses requests above --max-request-bytes (1.5 MiB by default) and transactions with more
# than --max-txn-ops operations (128 by default). A batch is one transaction, so it must fit both.
MAX_BATCH_BYTES = 1024 * 1024
MAX_BATCH_EVENTS = 100

KNOWN_HEADS = 4096
READ_PAGE = 500

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

    def latest(self, event_type: str) -> bytes:
        return self.root + b"latest/" + event_type.encode()


@dataclass(slots=True)
class Snapshot:
    """What an append decides on, all read at one revision."""

    head_mod_revision: int = 0
    last_seq: int = 0
    lease_mod_revision: int = 0
    lease_number: int = 0  # a session that never had a lease is at lease 0
    idem_record: dict[str, Any] | None = None
    # False for a state remembered from this store's own last append: good enough to try a write
    # on (the transaction's compares catch a stale one), never to refuse an append on.
    authoritative: bool = True


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


class EtcdEventStore:
    """`EventStore` on etcd v3. See the module docstring for the key layout."""

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        prefix: str = "/belay",
        request_timeout: float = 2.0,
        operation_timeout: float = 15.0,
    ) -> None:
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self.prefix = prefix.rstrip("/")
        self.request_timeout = request_timeout
        self.operation_timeout = operation_timeout
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
    def _state_reads(keys: SessionKeys, idempotency_key: str | None) -> list[Any]:
        reads = [_range(keys.head), _range(keys.lease)]
        if idempotency_key is not None:
            reads.append(_range(keys.idem(idempotency_key)))
        return reads

    @staticmethod
    def _snapshot_from(response: Any) -> Snapshot:
        """The state read by `_state_reads`, whether they ran as a transaction's success branch
        (a plain read) or its failure branch (a write whose compares failed)."""
        ranges = [op.response_range for op in response.responses]
        snapshot = Snapshot()
        if ranges[0].kvs:
            snapshot.head_mod_revision = ranges[0].kvs[0].mod_revision
            snapshot.last_seq = json.loads(ranges[0].kvs[0].value)["last_seq"]
        if ranges[1].kvs:
            snapshot.lease_mod_revision = ranges[1].kvs[0].mod_revision
            snapshot.lease_number = json.loads(ranges[1].kvs[0].value)["number"]
        if len(ranges) > 2 and ranges[2].kvs:
            snapshot.idem_record = json.loads(ranges[2].kvs[0].value)
        return snapshot

    async def _snapshot(self, keys: SessionKeys, idempotency_key: str | None) -> Snapshot:
        return self._snapshot_from(await self._txn([], self._state_reads(keys, idempotency_key)))

    def _remembered(self, session_id: str) -> Snapshot:
        # Never seen: guess a new session. If it is not, the write's compares fail and its
        # failure branch returns the real state, still in one round trip.
        return self._known_heads.get(session_id) or Snapshot(authoritative=False)

    def _remember(self, session_id: str, snapshot: Snapshot, written_at: int, last_seq: int) -> None:
        self._known_heads.pop(session_id, None)
        self._known_heads[session_id] = Snapshot(
            head_mod_revision=written_at,
            last_seq=last_seq,
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
            stored = await self._events_at(keys, first, last)
            if [kv.value for kv in stored] == attempt.values:
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
        unsettled: list[UnsettledAttempt] = []
        checked = False
        deadline = time.monotonic() + self.operation_timeout
        delay = 0.02
        last_error: BaseException | None = None
        # Usually one round trip: a write against the state this store last saw. Its compares
        # guard it; when they fail, the failure branch carries the fresh state for the next try.
        snapshot: Snapshot | None = self._remembered(session_id)
        while time.monotonic() < deadline:
            try:
                if snapshot is None:
                    snapshot = await self._snapshot(keys, idempotency_key)
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
                first_seq = snapshot.last_seq + 1
                values = [
                    envelope.around(draft, seq).encode() for seq, draft in enumerate(drafts, start=first_seq)
                ]
                if not checked:
                    # Checked once, before any request is sent. One stored event within the payload
                    # limit is within every limit.
                    if len(values) > 1 or len(values[0]) > MAX_PAYLOAD_BYTES:
                        check_batch_size(drafts, values)
                    checked = True
                request = self._append_request(
                    keys, snapshot, drafts, first_seq, values, idempotency_key, digest, lease is not None
                )
                if self._encoded_txn is None:
                    self._stubs()
                call = self._encoded_txn(request, timeout=self.request_timeout)
                try:
                    # Let the call's task send the request, then build the events to return while
                    # the transaction is in flight: that work overlaps the round trip.
                    await asyncio.sleep(0)
                    events = [
                        build_event(
                            draft,
                            seq=seq,
                            session_id=session_id,
                            created_at=created_at,
                            idempotency_key=idempotency_key,
                        )
                        for seq, draft in enumerate(drafts, start=first_seq)
                    ]
                    response = await call
                except grpc.aio.AioRpcError as error:
                    if error.code() in TRANSIENT_CODES and not _never_sent(error):
                        unsettled.append(UnsettledAttempt(events, values))
                    raise
                except BaseException:
                    # Cancelled before the answer (or anything else): cancel the RPC too, as
                    # awaiting it would have.
                    call.cancel()
                    raise
                if response.succeeded:
                    self._remember(session_id, snapshot, response.header.revision, events[-1].seq)
                    return events
                # Another writer got there first (or the remembered state was stale): go again
                # at once on the state the failure branch read.
                snapshot = self._snapshot_from(response)
                continue
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
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

    def _append_request(
        self,
        keys: SessionKeys,
        snapshot: Snapshot,
        drafts: list[EventDraft],
        first_seq: int,
        values: list[bytes],
        idempotency_key: str | None,
        digest: str,
        fenced: bool,
    ) -> bytes:
        """The append's one transaction, as wire bytes (see `etcd_wire` for why). Its parts go
        into one list in field order (compares, puts, then the failure branch's reads); plain
        loops rather than comprehensions, which are each a function call in Python 3.11."""
        last_seq = first_seq + len(values) - 1
        idem_key = keys.idem(idempotency_key) if idempotency_key is not None else None
        parts = [wire.mod_revision_is(keys.head, snapshot.head_mod_revision)]
        if fenced:
            parts.append(wire.mod_revision_is(keys.lease, snapshot.lease_mod_revision))
        if idem_key is not None:
            parts.append(wire.mod_revision_is(idem_key, 0))
        for seq, value in enumerate(values, start=first_seq):
            parts.append(wire.put(keys.event(seq), value))
        parts.append(wire.put(keys.head, b'{"last_seq":%d}' % last_seq))
        newest_of_type: dict[str, int] = {}
        for seq, draft in enumerate(drafts, start=first_seq):
            newest_of_type[draft.type] = seq
        for event_type, seq in newest_of_type.items():
            parts.append(wire.put(keys.latest(event_type), b'{"seq":%d}' % seq))
        if idem_key is not None:
            record = {"digest": digest, "first_seq": first_seq, "last_seq": last_seq}
            parts.append(wire.put(idem_key, canonical_json(record)))
        if snapshot.head_mod_revision == 0:
            parts.append(wire.put(self._index_key(keys.session_id), b""))
        # When a compare fails, the same round trip brings back the state to retry on (the same
        # reads as `_state_reads`, in the same order).
        state_keys = (keys.head, keys.lease) if idem_key is None else (keys.head, keys.lease, idem_key)
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
        stored = await self._events_at(keys, record["first_seq"], record["last_seq"])
        return [event_from_json(kv.value) for kv in stored]

    # ----------------------------------------------------------------------------------------------
    # Reads

    async def _read_at(
        self, keys: SessionKeys, from_seq: int, to_seq: int | None, limit: int | None
    ) -> tuple[list[Event], int]:
        """Events in [from_seq, to_seq], page by page, and the revision of the last page: every event
        written up to that revision is in the result or beyond to_seq/limit. Pages are not pinned
        to one revision (events never change, so they need not be, and a pinned revision could be
        compacted away mid-read); seqs are dense, so a later page can only find more events."""
        revision = 0
        events: list[Event] = []
        start = keys.event(max(from_seq, 1))
        end = keys.event(to_seq + 1) if to_seq is not None else prefix_range_end(keys.events_prefix)
        while limit is None or len(events) < limit:
            page = READ_PAGE if limit is None else min(READ_PAGE, limit - len(events))
            response = await self._retrying(functools.partial(self._range, start, end, limit=page))
            revision = response.header.revision
            events.extend(event_from_json(kv.value) for kv in response.kvs)
            if not response.more or not response.kvs:
                break
            start = response.kvs[-1].key + b"\0"
        return events, revision

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        if (to_seq is not None and to_seq < from_seq) or limit == 0:
            return []
        events, _ = await self._read_at(SessionKeys.of(self.prefix, session_id), from_seq, to_seq, limit)
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
        events, _ = await self._read_at(keys, max(1, last - count + 1), last, None)
        return events

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        keys = SessionKeys.of(self.prefix, session_id)
        response = await self._retrying(lambda: self._range(keys.latest(event_type)))
        if not response.kvs:
            return None
        seq = json.loads(response.kvs[0].value)["seq"]
        events, _ = await self._read_at(keys, seq, seq, 1)
        return events[0] if events else None

    def _index_key(self, session_id: str) -> bytes:
        return f"{self.prefix}/index/{quote(session_id, safe='')}".encode()

    async def list_sessions(self) -> list[str]:
        start = f"{self.prefix}/index/".encode()
        response = await self._retrying(lambda: self._range(start, prefix_range_end(start), keys_only=True))
        return sorted(unquote(kv.key[len(start) :].decode()) for kv in response.kvs)

    # ----------------------------------------------------------------------------------------------
    # Deletion

    async def delete_session(self, session_id: str) -> None:
        keys = SessionKeys.of(self.prefix, session_id)
        index = self._index_key(session_id)
        deletes = [
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(
                    key=keys.root, range_end=prefix_range_end(keys.root)
                )
            ),
            rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=index)),
        ]
        # Deleting what is already gone deletes nothing, so a retry after a lost answer is safe.
        await self._retrying(lambda: self._txn([], deletes))
        self._known_heads.pop(session_id, None)

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
        while True:
            try:
                events, revision = await self._read_at(keys, next_seq, None, None)
                # Read after the events: a head recreated since the session was first seen means
                # the session was deleted, and these events may belong to its successor.
                current = await self._incarnation(keys)
                if incarnation and current != incarnation:
                    raise SessionDeleted(f"session {session_id!r} was deleted at seq {next_seq - 1}")
                incarnation = incarnation or current
                for event in events:
                    yield event
                    next_seq = event.seq + 1
                async for event in self._follow(keys, revision + 1):
                    if event.seq < next_seq:
                        continue
                    if event.seq > next_seq:
                        break
                    yield event
                    next_seq += 1
            except (grpc.aio.AioRpcError, StoreUnavailable, _WatchCut):
                await asyncio.sleep(0.1)

    async def _follow(self, keys: SessionKeys, start_revision: int) -> AsyncIterator[Event]:
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
                        yield event_from_json(change.kv.value)
                    else:  # events are never deleted one by one: the whole session was
                        raise SessionDeleted(f"session {keys.root.decode()} was deleted")
            raise _WatchCut("watch stream ended")
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
    `{"backend": "etcd", "url": "etcd://host:port,host:port/prefix"}`; timeouts are optional keys."""
    if "url" in spec:
        parts = urlsplit(spec["url"])
        endpoints = [f"http://{address}" for address in parts.netloc.split(",") if address]
        prefix = parts.path or "/belay"
    else:
        endpoints, prefix = spec["endpoints"], spec.get("prefix", "/belay")
    options = {k: float(spec[k]) for k in ("request_timeout", "operation_timeout") if k in spec}
    return EtcdEventStore(endpoints, prefix=prefix, **options)
