"""One append, one etcd transaction.

An append writes the events, the new head, the latest-of-type entries, the idempotency record and
the claim in ONE transaction whose compares are: head unchanged since the state the seqs were
based on (mod_revision), with a lease the lease unchanged since its number was checked
(mod_revision), with a key the idempotency key unused, with a claim the claim unused, with
`unless_newer` the latest-of-type entry of its type still naming the seq its writer saw (its
value; no entry when it saw none). Each event's link in the record's hash chain follows the
head's (`belay.stores.integrity`). The state is the one this store last wrote for the session,
or a guess of "new session"; when a compare fails (another writer got there first), the
transaction's failure branch returns the current state and the append tries again on it
(optimistic concurrency, one round trip per try). etcd transactions are strict serializable, so
the fencing lease is a number compared in the same transaction as the write, never an etcd lock.
While another append's transaction is in flight, the transaction waits to go out with others
(`belay.stores.etcd.batching`).

A transaction whose answer was lost may or may not have been applied: the append keeps the exact
bytes it sent and settles them on the next state it reads (`Appends.settle`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import grpc
import grpc.aio

from belay.journal.envelope import EnvelopeJson
from belay.journal.events import (
    Event,
    EventDraft,
    batch_digest,
    build_event,
    canonical_json,
    now_utc,
)
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    ClaimTaken,
    IdempotencyConflict,
    StaleLease,
    StoreUnavailable,
    Superseded,
)
from belay.stores.etcd import wire
from belay.stores.etcd.batching import SharedTransactions
from belay.stores.etcd.connection import (
    TRANSIENT_CODES,
    EtcdConnection,
    describe,
    never_sent,
    permanent,
    range_op,
)
from belay.stores.etcd.keys import SessionKeys, index_key
from belay.stores.etcd.limits import MAX_BATCH_EVENTS, check_batch_size
from belay.stores.etcd.reads import RecordReader
from belay.stores.integrity import GENESIS, Chain

KNOWN_HEADS = 4096


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
    latest_seq: int = 0  # with `unless_newer`, the seq of the latest event of its type (0: none)
    # False for a state remembered from this store's own last append: good enough to try a write
    # on (the transaction's compares catch a stale one), never to refuse an append on.
    authoritative: bool = True


@dataclass
class UnsettledAttempt:
    """A transaction whose answer was lost: it may have been applied or not."""

    events: list[Event]
    values: list[bytes]


def state_keys(
    keys: SessionKeys, idempotency_key: str | None, claim: str | None, guarded: str | None = None
) -> tuple[bytes, ...]:
    """What an append decides on: head, lease, then the idempotency record, the claim and the
    latest-of-type entry of the `guarded` type (`unless_newer`) when the append has them."""
    state: tuple[bytes, ...] = (keys.head, keys.lease)
    if idempotency_key is not None:
        state += (keys.idem(idempotency_key),)
    if claim is not None:
        state += (keys.claim(claim),)
    if guarded is not None:
        state += (keys.latest(guarded),)
    return state


def queued_state_count(idempotency_key: str | None, claim: str | None, guarded: str | None = None) -> int:
    """How many failure-branch reads an append's transaction carries (`state_keys`)."""
    return 2 + (idempotency_key is not None) + (claim is not None) + (guarded is not None)


def snapshot_from(
    responses: Sequence[Any], idempotency_key: str | None, claim: str | None, guarded: str | None = None
) -> Snapshot:
    """The state read from `state_keys` (the transaction's responses to those reads), whether
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
    rest = iter(ranges[2:])
    if idempotency_key is not None and (idem := next(rest)).kvs:
        snapshot.idem_record = json.loads(idem.kvs[0].value)
    if claim is not None and (taken := next(rest)).kvs:
        snapshot.claim_seq = json.loads(taken.kvs[0].value)["seq"]
    if guarded is not None and (latest := next(rest)).kvs:
        snapshot.latest_seq = json.loads(latest.kvs[0].value)["seq"]
    return snapshot


def operation_counts(
    snapshot: Snapshot,
    values: list[bytes],
    drafts: list[EventDraft],
    fenced: bool,
    idempotency_key: str | None,
    claim: str | None,
    unless_newer: tuple[str, int] | None = None,
) -> tuple[int, int, int]:
    """The compares, success puts and failure reads of `append_request` for these arguments."""
    keyed = idempotency_key is not None
    claimed = claim is not None
    guarded = unless_newer[0] if unless_newer is not None else None
    compares = 1 + fenced + keyed + claimed + (guarded is not None)
    puts = len(values) + 1 + len({draft.type for draft in drafts}) + keyed + claimed
    puts += snapshot.head_mod_revision == 0  # the session index entry
    return compares, puts, queued_state_count(idempotency_key, claim, guarded)


def append_request(
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
    chain: Chain,
    prefix: str,
    unless_newer: tuple[str, int] | None = None,
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
    guarded = None
    if unless_newer is not None:
        guarded, seen = unless_newer
        latest_key = keys.latest(guarded)
        # The entry's value is written only by an append (below), always in this spelling.
        parts.append(
            wire.value_is(latest_key, b'{"seq":%d}' % seen) if seen else wire.mod_revision_is(latest_key, 0)
        )
    for seq, value in enumerate(values, start=first_seq):
        parts.append(wire.put(keys.event(seq), value))
    seal = chain.seal(last_seq, last_link)
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
        parts.append(wire.put(index_key(prefix, keys.session_id), b""))
    # When a compare fails, the same round trip brings back the state to retry on (the same
    # reads as `state_keys`, in the same order).
    failure_reads = (
        (keys.head, keys.lease)
        if idem_key is None and claim_key is None and guarded is None
        else state_keys(keys, idempotency_key, claim, guarded)
    )
    parts.append(wire.failure_ranges(failure_reads))
    return b"".join(parts)


class KnownHeads:
    """The head this store last wrote, per session (insertion-ordered, oldest evicted first)."""

    def __init__(self) -> None:
        self._heads: dict[str, Snapshot] = {}

    def remembered(self, session_id: str) -> Snapshot:
        # Never seen: guess a new session. If it is not, the write's compares fail and its
        # failure branch returns the real state, still in one round trip.
        return self._heads.get(session_id) or Snapshot(authoritative=False)

    def remember(
        self, session_id: str, snapshot: Snapshot, written_at: int, last_seq: int, chain: bytes
    ) -> None:
        self._heads.pop(session_id, None)
        self._heads[session_id] = Snapshot(
            head_mod_revision=written_at,
            last_seq=last_seq,
            chain=chain,
            lease_mod_revision=snapshot.lease_mod_revision,
            lease_number=snapshot.lease_number,
            authoritative=False,
        )
        while len(self._heads) > KNOWN_HEADS:
            self._heads.pop(next(iter(self._heads)))

    def forget(self, session_id: str) -> None:
        """Nothing remembered of the session can be trusted any more (a lost answer, a new
        lease, the session deleted)."""
        self._heads.pop(session_id, None)


@dataclass(slots=True)
class AppendCall:
    """One call of `Appends.append`: what each of its tries writes, and the tries whose answer
    was lost (`Appends.settle`)."""

    session_id: str
    keys: SessionKeys
    drafts: list[EventDraft]
    idempotency_key: str | None
    lease: int | None
    claim: str | None
    unless_newer: tuple[str, int] | None
    digest: str  # the batch's, when it has an idempotency key
    created_at: datetime
    envelope: EnvelopeJson
    unsettled: list[UnsettledAttempt] = field(default_factory=list)
    checked: bool = False  # the batch's size, checked once before any request is sent

    @staticmethod
    def of(
        prefix: str,
        session_id: str,
        drafts: list[EventDraft],
        idempotency_key: str | None,
        lease: int | None,
        claim: str | None,
        unless_newer: tuple[str, int] | None = None,
    ) -> AppendCall:
        keys = SessionKeys.of(prefix, session_id)
        digest = batch_digest(drafts) if idempotency_key is not None else ""
        # One timestamp per call: a retry that reuses seqs writes byte-identical events, so two
        # attempts racing for the same head revision cannot leave different records.
        created_at = now_utc()
        envelope = EnvelopeJson(session_id, created_at, idempotency_key)
        return AppendCall(
            session_id,
            keys,
            drafts,
            idempotency_key,
            lease,
            claim,
            unless_newer,
            digest,
            created_at,
            envelope,
        )

    def events(self, first_seq: int, links: list[bytes]) -> list[Event]:
        """The events a try at `first_seq` stores, to return once it is written."""
        events = []
        for seq, draft in enumerate(self.drafts, start=first_seq):
            events.append(
                build_event(
                    draft,
                    seq=seq,
                    session_id=self.session_id,
                    created_at=self.created_at,
                    idempotency_key=self.idempotency_key,
                    chain=links[seq - first_seq].decode(),
                )
            )
        return events


class Appends:
    """The appends of one etcd store: `prefix` its key prefix, `chain` the record's hash chain,
    `reader` for idempotent replays and lost answers, `heads` what it last wrote."""

    def __init__(
        self, connection: EtcdConnection, chain: Chain, prefix: str, reader: RecordReader, heads: KnownHeads
    ) -> None:
        self.connection = connection
        self.chain = chain
        self.prefix = prefix
        self.reader = reader
        self.heads = heads
        self.shared = SharedTransactions(connection)

    async def append(
        self,
        session_id: str,
        drafts: Sequence[EventDraft],
        *,
        idempotency_key: str | None = None,
        lease: int | None = None,
        claim: str | None = None,
        unless_newer: tuple[str, int] | None = None,
    ) -> list[Event]:
        """One transaction per try, each on the state the try before read, until one is written
        or refused, or `operation_timeout` passes."""
        drafts = list(drafts)
        if not drafts:
            return []
        if len(drafts) > MAX_BATCH_EVENTS:
            check_batch_size(drafts, [])
        call = AppendCall.of(self.prefix, session_id, drafts, idempotency_key, lease, claim, unless_newer)
        guarded = unless_newer[0] if unless_newer is not None else None
        alone = False
        deadline = time.monotonic() + self.connection.operation_timeout
        delay = 0.02
        last_error: BaseException | None = None
        # Usually one round trip: a write against the state this store last saw. Its compares
        # guard it; when they fail, the failure branch carries the fresh state for the next try.
        snapshot: Snapshot | None = self.heads.remembered(session_id)
        while time.monotonic() < deadline:
            queued = False
            try:
                await self.connection.authenticated()
                if snapshot is None:
                    snapshot = await self.snapshot(call.keys, idempotency_key, claim, guarded)
                if snapshot.authoritative and (answered := await self._answered(call, snapshot)) is not None:
                    return answered
                if not self._may_write(call, snapshot):
                    snapshot = None
                    continue
                values, links, request = self._encoded(call, snapshot)
                queued = self.shared.in_flight != 0 and not alone
                events, (response, failure_from, shared) = await self._sent(
                    call, snapshot, values, links, request, queued
                )
                if response.succeeded:
                    self.heads.remember(
                        session_id, snapshot, response.header.revision, events[-1].seq, links[-1]
                    )
                    return events
                # Another writer got there first (or the remembered state was stale): go again
                # at once on the state the failure branch read. After a shared transaction failed,
                # the retry goes alone, so one contended session cannot keep failing the others.
                failure_to = failure_from + queued_state_count(idempotency_key, claim, guarded)
                snapshot = snapshot_from(
                    response.responses[failure_from:failure_to], idempotency_key, claim, guarded
                )
                alone = shared
                continue
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    if queued and not alone:
                        # Refused with others (say a cluster with lower limits than etcd's
                        # defaults): nothing was written; try it alone before blaming this batch.
                        alone = True
                        continue
                    raise permanent(error) from error
                last_error = error
                # After a lost answer nothing remembered can be trusted: read the state afresh.
                snapshot = None
                self.heads.forget(session_id)
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
        raise self._unconfirmed(call, last_error)

    async def _answered(self, call: AppendCall, snapshot: Snapshot) -> list[Event] | None:
        """What a state read from etcd already answers: an earlier try whose answer was lost
        and that landed, or the batch its idempotency key was used for."""
        settled = await self.settle(call.keys, snapshot, call.unsettled)
        if settled is not None:
            return settled
        if snapshot.idem_record is not None:
            return await self.replay(call.keys, snapshot, call.idempotency_key, call.digest)
        return None

    def _may_write(self, call: AppendCall, snapshot: Snapshot) -> bool:
        """Refuse the append on a stale lease, a claim already taken or a newer event of its
        `unless_newer` type. False when only a remembered state says the lease moved: the real one
        is read before refusing. A remembered state does not hold the latest-of-type entry: the
        transaction's compare checks it, and its failure branch reads it."""
        if call.lease is not None and snapshot.lease_number != call.lease:
            if not snapshot.authoritative:
                return False
            raise StaleLease(
                f"session {call.session_id!r}: lease {call.lease} is not the current lease "
                f"{snapshot.lease_number}; a newer harness attempt owns the session"
            )
        if snapshot.claim_seq is not None and call.claim is not None:
            raise ClaimTaken(call.session_id, call.claim, snapshot.claim_seq)
        if call.unless_newer is not None and snapshot.authoritative:
            guarded, seen = call.unless_newer
            if snapshot.latest_seq != seen:
                raise Superseded(call.session_id, guarded, seen, snapshot.latest_seq)
        return True

    def _encoded(self, call: AppendCall, snapshot: Snapshot) -> tuple[list[bytes], list[bytes], bytes]:
        """A try on `snapshot`: the events' stored bytes, their links, and the transaction."""
        stored = self.chain.stored
        envelope = call.envelope
        first_seq = snapshot.last_seq + 1
        link = snapshot.chain
        values = []
        links = []
        for seq, draft in enumerate(call.drafts, start=first_seq):
            value, link = stored(link, envelope.fields(draft, seq))
            values.append(value)
            links.append(link)
        if not call.checked:
            # Checked once, before any request is sent. One stored event within the payload
            # limit is within every limit.
            if len(values) > 1 or len(values[0]) > MAX_PAYLOAD_BYTES:
                check_batch_size(call.drafts, values)
            call.checked = True
        request = append_request(
            call.keys,
            snapshot,
            call.drafts,
            first_seq,
            values,
            link,
            call.idempotency_key,
            call.digest,
            call.lease is not None,
            call.claim,
            self.chain,
            self.prefix,
            call.unless_newer,
        )
        return values, links, request

    async def _sent(
        self,
        call: AppendCall,
        snapshot: Snapshot,
        values: list[bytes],
        links: list[bytes],
        request: bytes,
        queued: bool,
    ) -> tuple[list[Event], tuple[Any, int, bool]]:
        """Send a try's transaction, alone or `queued` to go out with others, and build the events
        it writes while it is in flight. The events, and the answer: the transaction's response,
        where this append's failure reads start in it, whether it held other appends too."""
        shared = self.shared
        waiting: Any
        if queued:
            # Another append's transaction is in flight: go out after it, with every append
            # queued meanwhile, in one transaction.
            counts = operation_counts(
                snapshot,
                values,
                call.drafts,
                call.lease is not None,
                call.idempotency_key,
                call.claim,
                call.unless_newer,
            )
            waiting = shared.queue(call.session_id, request, counts).outcome
        else:
            # Nothing in flight (always so for a single writer): send it now, alone.
            waiting = shared.send_alone(request)
        events: list[Event] = []
        try:
            if not queued:
                # Let the call's task send the request: building the events to return then
                # overlaps the round trip.
                await asyncio.sleep(0)
            events = call.events(snapshot.last_seq + 1, links)
            answer = await waiting
        except grpc.aio.AioRpcError as error:
            if error.code() in TRANSIENT_CODES and not never_sent(error):
                call.unsettled.append(UnsettledAttempt(events, values))
            raise
        except BaseException:
            # Cancelled before the answer (or anything else): cancel the RPC too, as awaiting it
            # would have; an append still queued is dropped, and one that went out with others
            # is written with them or not at all.
            waiting.cancel()
            raise
        finally:
            if not queued:
                shared.alone_done()
        return events, (answer if queued else (answer, 0, False))

    def _unconfirmed(self, call: AppendCall, last_error: BaseException | None) -> StoreUnavailable:
        if call.unsettled:
            return StoreUnavailable(
                f"etcd at {', '.join(self.connection.endpoints)} did not confirm the append within "
                f"{self.connection.operation_timeout:g}s ({describe(last_error)}); the batch is "
                "either fully written or not at all: retry with the same idempotency key to find out"
            )
        return self.connection.unavailable(last_error)

    async def snapshot(
        self, keys: SessionKeys, idempotency_key: str | None, claim: str | None, guarded: str | None = None
    ) -> Snapshot:
        reads = [range_op(key) for key in state_keys(keys, idempotency_key, claim, guarded)]
        return snapshot_from(
            (await self.connection.txn([], reads)).responses, idempotency_key, claim, guarded
        )

    async def settle(
        self, keys: SessionKeys, snapshot: Snapshot, unsettled: list[UnsettledAttempt]
    ) -> list[Event] | None:
        """Decide lost-answer attempts the snapshot can decide. Each compared on a head revision
        that the snapshot has moved past, so it either landed (its exact bytes are at its seqs)
        or never will."""
        for attempt in list(unsettled):
            first, last = attempt.events[0].seq, attempt.events[-1].seq
            if snapshot.last_seq < last:
                continue
            stored = [kv.value for kv in await self.reader.events_at(keys, first, last)]
            if len(stored) < len(attempt.values):  # archived since: the segments hold the rest
                stored = await self.reader.stored_values(keys, first, last)
            if stored == attempt.values:
                return attempt.events
            unsettled.remove(attempt)
        return None

    async def replay(
        self, keys: SessionKeys, snapshot: Snapshot, idempotency_key: str | None, digest: str
    ) -> list[Event]:
        record = snapshot.idem_record
        assert record is not None
        if record["digest"] != digest:
            raise IdempotencyConflict(
                f"idempotency key {idempotency_key!r} was used for a different batch "
                f"(seqs {record['first_seq']}..{record['last_seq']})"
            )
        events, _, _ = await self.reader.read_at(keys, record["first_seq"], record["last_seq"], None)
        return events
