"""Reads of a record: page by page, across archived segments and etcd, through one chain check.

A read's first page is one transaction with the head, the segment index and the event before
the range, so nothing in it may lie beyond the head and a read to the end must reach it
(`belay.stores.integrity.RecordCheck`). The archived seqs come from their segments, the rest from
etcd: the chain runs on across the boundary.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from aetcd import rpc
from pydantic import TypeAdapter

from belay.journal.events import Event
from belay.stores.etcd.connection import EtcdConnection, prefix_range_op, range_op
from belay.stores.etcd.keys import SessionKeys, prefix_range_end
from belay.stores.etcd.segments import ArchivedSegments, Segment, covering, index_from
from belay.stores.integrity import Chain, Head, RecordCheck

READ_PAGE = 500

EVENT_LIST_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def parse_events(values: list[bytes]) -> list[Event]:
    # One validate_json over a JSON array is markedly cheaper than one call per event.
    return EVENT_LIST_ADAPTER.validate_json(b"[" + b",".join(values) + b"]") if values else []


def head_from(value: bytes) -> Head:
    head = json.loads(value)
    return Head(int(head["last_seq"]), head.get("chain", "").encode(), head.get("seal", "").encode())


def _take_run(kvs: Sequence[Any], check: RecordCheck, stored: list[bytes]) -> int:
    """Events of an etcd page in a row, checked and added to `stored`; the seq after the last."""
    for kv in kvs:
        seq = int(kv.key[-20:])
        check.event(seq, kv.value)
        stored.append(kv.value)
    return seq + 1


class RecordReader:
    """Reads the records of one etcd store, checked against `chain`, taking archived seqs from
    `segments`."""

    def __init__(self, connection: EtcdConnection, chain: Chain, segments: ArchivedSegments) -> None:
        self.connection = connection
        self.chain = chain
        self.segments = segments

    async def read_at(
        self, keys: SessionKeys, from_seq: int, to_seq: int | None, limit: int | None
    ) -> tuple[list[Event], int, RecordCheck]:
        stored, revision, check = await self.read_stored(keys, from_seq, to_seq, limit)
        return parse_events(stored), revision, check

    async def read_stored(
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
        check, revision, archived, kvs, more = await self._first_page(keys, first, end, page)
        at = 0  # the next of `kvs` to take
        next_seq = first
        looked_again_at = 0  # the seq the index was last read again for

        def wanted(seq: int) -> bool:
            return (to_seq is None or seq <= to_seq) and (limit is None or len(stored) < limit)

        while wanted(next_seq):
            segment = covering(archived, next_seq)
            if segment is not None:
                next_seq = await self._take_segment(keys, segment, next_seq, wanted, check, stored)
                continue
            while at < len(kvs) and int(kvs[at].key[-20:]) < next_seq:
                at += 1  # served from a segment archived after this page was read
            if at == len(kvs):
                if not more:
                    break
                check.head_is_current = False  # later pages may hold events appended since
                page = READ_PAGE if limit is None else min(READ_PAGE, limit - len(stored))
                start = keys.event(next_seq)
                ranged = await self.connection.retrying(
                    functools.partial(self.connection.range, start, end, limit=page)
                )
                revision, kvs, more, at = ranged.header.revision, ranged.kvs, ranged.more, 0
                if not kvs:
                    more = False
                    # Nothing from next_seq on: either the end, or archived since the last page.
                    if looked_again_at != next_seq:
                        looked_again_at = next_seq
                        archived = await self.segments.index(keys)
                        more = covering(archived, next_seq) is not None
                    if not more:
                        break
                continue
            if int(kvs[at].key[-20:]) > next_seq and looked_again_at != next_seq:
                # A gap: archived since the index was read, or missing (the check says so).
                looked_again_at = next_seq
                archived = await self.segments.index(keys)
                continue
            # The page's events in a row (the range's end keeps them within to_seq).
            take = len(kvs) if limit is None else min(len(kvs), at + limit - len(stored))
            next_seq = _take_run(kvs[at:take], check, stored)
            at = take
        if limit is None or len(stored) < limit:
            check.ran_to(to_seq)
        return stored, revision, check

    async def _first_page(
        self, keys: SessionKeys, first: int, end: bytes, page: int
    ) -> tuple[RecordCheck, int, list[Segment], Sequence[Any], bool]:
        """A read's first transaction: the head, the first `page` events from `first` (up to the
        key `end`), the segment index and the event before `first`. The check starts from that
        event (from its segment, when it is archived) and that head; the revision, the index,
        the page and whether more follows come with it."""
        reads = [
            range_op(keys.head),
            rpc.RequestOp(request_range=rpc.RangeRequest(key=keys.event(first), range_end=end, limit=page)),
            prefix_range_op(keys.segments_prefix),
        ]
        if first > 1:
            reads.append(range_op(keys.event(first - 1)))
        response = await self.connection.retrying(lambda: self.connection.txn([], reads))
        head_range, events_range = response.responses[0].response_range, response.responses[1].response_range
        archived = index_from(response.responses[2].response_range.kvs)
        previous = (
            response.responses[3].response_range.kvs[0].value
            if first > 1 and response.responses[3].response_range.kvs
            else None
        )
        if previous is None and first > 1 and (segment := covering(archived, first - 1)) is not None:
            previous = (await self.segments.values(keys.session_id, segment)).get(first - 1)
        check = RecordCheck(
            self.chain,
            keys.session_id,
            first,
            previous,
            head_from(head_range.kvs[0].value) if head_range.kvs else None,
        )
        return check, response.header.revision, archived, events_range.kvs, events_range.more

    async def _take_segment(
        self,
        keys: SessionKeys,
        segment: Segment,
        next_seq: int,
        wanted: Callable[[int], bool],
        check: RecordCheck,
        stored: list[bytes],
    ) -> int:
        """The archived events of `segment` from `next_seq` on, as many as are `wanted`, checked
        and added to `stored`; the seq after the segment."""
        values = await self.segments.values(keys.session_id, segment)
        for seq in sorted(seq for seq in values if next_seq <= seq <= segment.last):
            if not wanted(seq):
                break
            check.event(seq, values[seq])
            stored.append(values[seq])
        return segment.last + 1

    async def events_at(self, keys: SessionKeys, first: int, last: int) -> list[Any]:
        # Event keys are written once and never changed, so the current revision holds the same
        # bytes as any earlier one; reading at an older revision could only fail after compaction.
        response = await self.connection.range(keys.event(first), keys.event(last + 1))
        return list(response.kvs)

    async def stored_values(self, keys: SessionKeys, first: int, last: int) -> list[bytes]:
        """The stored bytes of seqs first..last, wherever they are, unchecked (for settling a
        lost answer, `belay.stores.etcd.appends`)."""
        reads = [
            rpc.RequestOp(
                request_range=rpc.RangeRequest(key=keys.event(first), range_end=keys.event(last + 1))
            ),
            prefix_range_op(keys.segments_prefix),
        ]
        response = await self.connection.txn([], reads)
        found = {int(kv.key[-20:]): kv.value for kv in response.responses[0].response_range.kvs}
        for segment in index_from(response.responses[1].response_range.kvs):
            if segment.last >= first and segment.first <= last:
                values = await self.segments.values(keys.session_id, segment)
                found.update((seq, value) for seq, value in values.items() if first <= seq <= last)
        return [found[seq] for seq in range(first, last + 1) if seq in found]

    async def incarnation(self, keys: SessionKeys) -> int:
        """The head key's create_revision: 0 while the session does not exist, and a new number
        each time a deleted session id is used again."""
        response = await self.connection.retrying(lambda: self.connection.range(keys.head))
        return int(response.kvs[0].create_revision) if response.kvs else 0
