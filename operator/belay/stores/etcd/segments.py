"""Archived segments: the older part of a record, out of etcd, in the artifact store.

A segment is the stored bytes of consecutive events, one a line, exactly as etcd held them
(chain links included), kept as a blob in the artifact store and indexed in etcd under
`<root>segments/<first seq>`. The segments of a session cover seqs 1 to n with no gap; etcd keeps
the events after n. `belay.stores.etcd.archiving` makes them; `belay.stores.etcd.reads` reads
through them (docs/stores.md, "Archived segments").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from belay.journal.events import canonical_json
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, ArtifactStore, RecordCorrupt, StoreError
from belay.stores.etcd.connection import EtcdConnection
from belay.stores.etcd.keys import SessionKeys, prefix_range_end
from belay.stores.integrity import FIELDS_START

# Archiving (`EtcdEventStore.archive`): what stays in etcd, at least, and the size of a segment.
# The newest 2,000 events cover every read a running session makes of its tail (the context's
# window, a compaction's span, the fold after the latest state snapshot).
ARCHIVE_KEEP_EVENTS = 2000
SEGMENT_EVENTS = 1000
SEGMENT_MEDIA_TYPE = "application/vnd.belay.segment+jsonl"
SEGMENT_CACHE = 8


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


def index_from(kvs: Sequence[Any]) -> list[Segment]:
    """The index entries, in seq order (their keys sort by first seq)."""
    segments = []
    for kv in kvs:
        entry = json.loads(kv.value)
        segments.append(Segment(int(entry["first"]), int(entry["last"]), entry["sha256"], int(entry["size"])))
    return segments


def covering(segments: Sequence[Segment], seq: int) -> Segment | None:
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


class ArchivedSegments:
    """The segments of the records of one etcd store: their index in etcd, their blobs in
    `store` (None: the store was opened without one), and the last few read, parsed (a segment
    never changes: its index names its hash)."""

    def __init__(self, connection: EtcdConnection, store: ArtifactStore | None) -> None:
        self.connection = connection
        self.store = store
        self._cache: dict[str, dict[int, bytes]] = {}

    async def index(self, keys: SessionKeys) -> list[Segment]:
        prefix = keys.segments_prefix
        response = await self.connection.retrying(
            lambda: self.connection.range(prefix, prefix_range_end(prefix))
        )
        return index_from(response.kvs)

    def store_for(self, session_id: str, segment: Segment) -> ArtifactStore:
        if self.store is None:
            raise StoreError(
                f"the record of session {session_id!r} has archived segments (seqs {segment.first} "
                f"to {segment.last} are in segment {segment.sha256}), and this etcd store was opened "
                "without the artifact store that holds them: give its spec `segments` (an artifact "
                "store spec or URL)"
            )
        return self.store

    async def values(self, session_id: str, segment: Segment) -> dict[int, bytes]:
        """The segment's stored events by seq. Its bytes are checked against its hash by the
        artifact store; what they say is checked against the chain by the reader."""
        cached = self._cache.pop(segment.sha256, None)
        if cached is None:
            store = self.store_for(session_id, segment)
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
        self.keep(segment.sha256, cached)
        return cached

    def keep(self, sha256: str, lines: dict[int, bytes]) -> None:
        """Keep a parsed segment, newest last, the oldest dropped beyond SEGMENT_CACHE."""
        self._cache[sha256] = lines
        while len(self._cache) > SEGMENT_CACHE:
            self._cache.pop(next(iter(self._cache)))

    def forget(self, sha256: str) -> None:
        """Drop a deleted segment from the cache."""
        self._cache.pop(sha256, None)
