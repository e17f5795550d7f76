"""Archiving: the closed part of a record moves out of etcd into segments, oldest first, so etcd
holds a bounded part of every record (docs/stores.md, "Archived segments")."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable

from aetcd import rpc

from belay.stores.base import ArtifactStore, StoreError
from belay.stores.etcd.connection import EtcdConnection, prefix_range_op, put_op, range_op
from belay.stores.etcd.keys import SessionKeys
from belay.stores.etcd.reads import RecordReader
from belay.stores.etcd.segments import (
    SEGMENT_MEDIA_TYPE,
    ArchivedSegments,
    Segment,
    index_from,
    segment_lines,
)


class Archiver:
    """Moves closed ranges of one etcd store's records into `segments`."""

    def __init__(
        self, connection: EtcdConnection, prefix: str, reader: RecordReader, segments: ArchivedSegments
    ) -> None:
        self.connection = connection
        self.prefix = prefix
        self.reader = reader
        self.segments = segments

    async def archive(
        self,
        session_id: str,
        keep_events: int,
        segment_events: int,
        fault: Callable[[str], None] | None = None,
    ) -> list[Segment]:
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
        store = self.segments.store
        if store is None:
            raise StoreError(
                f"cannot archive the record of session {session_id!r}: this etcd store was opened "
                "without an artifact store for segments (give its spec `segments`)"
            )
        keys = SessionKeys.of(self.prefix, session_id)
        made: list[Segment] = []
        while True:
            closed = await self._next_closed(keys, keep_events, segment_events)
            if closed is None:
                return made
            incarnation, first, last = closed
            stored, _, _ = await self.reader.read_stored(keys, first, last, None)
            data = b"\n".join(stored) + b"\n"
            segment = await self._stored_and_verified(store, session_id, first, last, data, fault)
            if await self._indexed(keys, segment, incarnation):
                made.append(segment)
                self.segments.keep(segment.sha256, segment_lines(data))  # the next one reads its end
                if fault is not None:
                    fault("indexed")
            elif await self.reader.incarnation(keys) != incarnation:
                # Deleted while it was archived: the blob holds only that session's events.
                await asyncio.to_thread(store.delete, segment.sha256)
                return made

    async def _next_closed(
        self, keys: SessionKeys, keep_events: int, segment_events: int
    ) -> tuple[int, int, int] | None:
        """The session's incarnation (its head's create_revision) and the seqs of the next
        segment to archive, read at one revision; None when no whole segment is closed, or the
        session does not exist."""
        reads = [range_op(keys.head), prefix_range_op(keys.segments_prefix)]
        response = await self.connection.retrying(functools.partial(self.connection.txn, [], reads))
        head_kvs = response.responses[0].response_range.kvs
        if not head_kvs:
            return None
        incarnation = head_kvs[0].create_revision
        last_seq = int(json.loads(head_kvs[0].value)["last_seq"])
        index = index_from(response.responses[1].response_range.kvs)
        first = index[-1].last + 1 if index else 1
        last = first + segment_events - 1
        if last > last_seq - keep_events:
            return None
        return incarnation, first, last

    async def _stored_and_verified(
        self,
        store: ArtifactStore,
        session_id: str,
        first: int,
        last: int,
        data: bytes,
        fault: Callable[[str], None] | None,
    ) -> Segment:
        """Step 2 of `archive`: the segment of seqs first..last, whose stored events are `data`,
        stored in the artifact store and read back."""
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
        return Segment(first, last, ref.sha256, len(data))

    async def _indexed(self, keys: SessionKeys, segment: Segment, incarnation: int) -> bool:
        """Step 3 of `archive`: the segment's index entry written and its events deleted from
        etcd, in one transaction, while the session is the one read and the entry is new."""
        first, last = segment.first, segment.last
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
            put_op(keys.segment(first), segment.entry()),
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(
                    key=keys.event(first), range_end=keys.event(last + 1)
                )
            ),
        ]
        # A lost answer is retried: the compare on the index entry makes the retry a no-op
        # when the first try landed.
        committed = await self.connection.retrying(functools.partial(self.connection.txn, compares, writes))
        return bool(committed.succeeded)
