"""Archiving an etcd record to segments (`EtcdEventStore.archive`), against a real etcd member and
a real S3 server: what it leaves in etcd, that an archiver killed at any point between its steps
loses nothing and duplicates nothing (and a rerun finishes the job), and that deleting the session
deletes its segments. How the archived record reads is the conformance suite's
(`tests/conformance/test_archived_record.py`, the `etcd-archived` backend)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aetcd
import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind
from belay.stores import open_event_store
from belay.stores.base import StoreError
from belay.stores.etcd import EtcdEventStore
from belay.stores.s3 import S3ArtifactStore
from tests.conformance.backends import s3_spec
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

ARCHIVER_SCRIPT = Path(__file__).with_name("archiver_process.py")
BUCKET = "belay-segments"
KEEP = 10
PER_SEGMENT = 8
EVENTS = 60  # archives seqs 1..48 in 6 segments, keeps 49..60 in etcd
SEGMENTS = (EVENTS - KEEP) // PER_SEGMENT


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


@dataclass
class Archive:
    spec: dict[str, Any]
    store: EtcdEventStore
    blobs: S3ArtifactStore
    port: int

    async def etcd_keys(self, session_id: str) -> dict[str, bytes]:
        root = f"{self.spec['prefix']}/sessions/{quote(session_id, safe='')}/".encode()
        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            return {kv.key[len(root) :].decode(): kv.value for kv in await client.get_prefix(root)}

    def stored_blobs(self) -> list[str]:
        pages = self.blobs.client.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{self.blobs.prefix}blobs/"
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@pytest.fixture
async def archive(etcd_endpoint: str, s3_server: S3Server) -> AsyncIterator[Archive]:
    segments = s3_spec(s3_server, BUCKET, f"segments-{uuid.uuid4().hex[:12]}")
    spec = {
        "backend": "etcd",
        "endpoints": [etcd_endpoint],
        "prefix": f"/segments-{uuid.uuid4().hex[:12]}",
        "segments": segments,
        "keep_events": KEEP,
        "segment_events": PER_SEGMENT,
    }
    store = open_event_store(spec)
    assert isinstance(store, EtcdEventStore) and isinstance(store.segments, S3ArtifactStore)
    handle = Archive(spec, store, store.segments, int(etcd_endpoint.rsplit(":", 1)[1]))
    try:
        yield handle
    finally:
        await store.close()
        async with aetcd.Client(host="127.0.0.1", port=handle.port) as client:
            await client.delete_prefix(spec["prefix"].encode() + b"/")
        for key in handle.stored_blobs():
            handle.blobs.client.delete_object(Bucket=BUCKET, Key=key)


async def written(store: EtcdEventStore, session_id: str) -> list[Event]:
    events: list[Event] = []
    for batch in range(EVENTS // 5):
        events += await store.append(
            session_id, [note(f"{batch}-{i}") for i in range(5)], idempotency_key=f"b{batch}"
        )
    return events


async def assert_whole_and_archived_once(
    archive: Archive, session_id: str, events: list[Event], unindexed: int = 0
) -> int:
    """The record reads back as written; segments cover 1..n with no gap or overlap; etcd holds
    exactly the events after n; the artifact store holds one blob per segment, and `unindexed`
    more (stored by an archiver that died before indexing them). Returns n."""
    assert await archive.store.read(session_id) == events
    assert await open_event_store(archive.spec).read(session_id) == events
    segments = await archive.store.segments_of(session_id)
    covered = 0
    for segment in segments:
        assert (segment.first, segment.last) == (covered + 1, covered + PER_SEGMENT)
        covered = segment.last
    keys = await archive.etcd_keys(session_id)
    in_etcd = sorted(int(key[len("events/") :]) for key in keys if key.startswith("events/"))
    assert in_etcd == list(range(covered + 1, EVENTS + 1))
    stored = {key.rsplit("/", 1)[-1] for key in archive.stored_blobs()}
    assert {s.sha256 for s in segments} <= stored
    assert len(stored) == len(segments) + unindexed == len({s.sha256 for s in segments}) + unindexed
    return covered


async def test_archiving_leaves_the_newest_events_in_etcd_and_the_rest_in_verified_segments(
    archive: Archive,
) -> None:
    session = "team/long"
    events = await written(archive.store, session)
    before = await archive.etcd_keys(session)
    made = await archive.store.archive(session)
    assert len(made) == SEGMENTS
    assert await assert_whole_and_archived_once(archive, session, events) == SEGMENTS * PER_SEGMENT
    # A segment is the stored events, byte for byte as etcd held them, one a line.
    first = made[0]
    data = archive.blobs.get(first.sha256)
    assert data == b"".join(before[f"events/{seq:020d}"] + b"\n" for seq in range(1, PER_SEGMENT + 1))
    assert len(data) == first.size
    keys = await archive.etcd_keys(session)
    assert json.loads(keys[f"segments/{1:020d}"]) == {
        "first": 1,
        "last": PER_SEGMENT,
        "sha256": first.sha256,
        "size": first.size,
    }
    # Nothing more is closed until a whole segment more lies outside the newest KEEP.
    assert await archive.store.archive(session) == []
    more = await archive.store.append(session, [note(f"more-{i}") for i in range(PER_SEGMENT)])
    assert [(s.first, s.last) for s in await archive.store.archive(session)] == [(49, 56)]
    assert await archive.store.read(session) == events + more


@pytest.mark.parametrize("point", ["stored", "verified", "indexed"])
async def test_an_archiver_killed_between_its_steps_loses_and_duplicates_nothing(
    archive: Archive, point: str
) -> None:
    """Killed after the upload (before the index and the delete, one transaction), after the
    read-back check, or right after the transaction, at its third segment: the record reads whole,
    every event is in exactly one place, and a rerun finishes with one blob per segment."""
    session = f"killed-at-{point}"
    events = await written(archive.store, session)
    killed = subprocess.run(
        [sys.executable, str(ARCHIVER_SCRIPT), json.dumps(archive.spec), session, point, "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    indexed_before_kill = 3 if point == "indexed" else 2
    unindexed = 0 if point == "indexed" else 1  # the third segment's blob, stored, not indexed
    covered = await assert_whole_and_archived_once(archive, session, events, unindexed)
    assert covered == indexed_before_kill * PER_SEGMENT
    left_behind = {key.rsplit("/", 1)[-1] for key in archive.stored_blobs()}
    rerun = await archive.store.archive(session)
    # The rerun stores the same bytes under the same hash: the blob left behind is the one it
    # indexes, not a second copy.
    assert left_behind <= {s.sha256 for s in await archive.store.segments_of(session)}
    assert [(s.first, s.last) for s in rerun] == [
        (n * PER_SEGMENT + 1, (n + 1) * PER_SEGMENT) for n in range(indexed_before_kill, SEGMENTS)
    ]
    assert await assert_whole_and_archived_once(archive, session, events) == SEGMENTS * PER_SEGMENT


async def test_deleting_the_session_deletes_its_segments(archive: Archive) -> None:
    session = "doomed"
    kept = "kept"
    await written(archive.store, session)
    kept_events = await written(archive.store, kept)
    await archive.store.archive(session)
    await archive.store.archive(kept)
    kept_blobs = {s.sha256 for s in await archive.store.segments_of(kept)}
    assert len(archive.stored_blobs()) == 2 * SEGMENTS
    await archive.store.delete_session(session)
    assert await archive.etcd_keys(session) == {}
    assert {key.rsplit("/", 1)[-1] for key in archive.stored_blobs()} == kept_blobs
    assert await archive.store.read(kept) == kept_events
    # Nothing is left to finish: no segment marked for deletion stays behind.
    async with aetcd.Client(host="127.0.0.1", port=archive.port) as client:
        assert list(await client.get_prefix(f"{archive.spec['prefix']}/segment-trash/".encode())) == []


async def test_a_deletion_cut_short_before_the_blobs_finishes_when_run_again(
    archive: Archive, s3_server: S3Server
) -> None:
    """The artifact store down while a session is deleted: the record is gone from etcd at once,
    its segments' hashes stay marked for deletion, and deleting again (the retention finalizer
    runs until it succeeds) deletes the blobs."""
    session = "cut-short"
    await written(archive.store, session)
    await archive.store.archive(session)
    segments = {s.sha256 for s in await archive.store.segments_of(session)}
    s3_server.stop()
    try:
        with pytest.raises(StoreError):
            await archive.store.delete_session(session)
    finally:
        s3_server.start()
    assert await archive.etcd_keys(session) == {}
    assert await archive.store.read(session) == []
    assert {key.rsplit("/", 1)[-1] for key in archive.stored_blobs()} == segments
    await archive.store.delete_session(session)
    assert archive.stored_blobs() == []
    async with aetcd.Client(host="127.0.0.1", port=archive.port) as client:
        assert list(await client.get_prefix(f"{archive.spec['prefix']}/segment-trash/".encode())) == []


async def test_a_store_opened_without_the_segment_store_says_what_is_missing(archive: Archive) -> None:
    session = "needs-segments"
    await written(archive.store, session)
    await archive.store.archive(session)
    bare = open_event_store({key: value for key, value in archive.spec.items() if key != "segments"})
    try:
        with pytest.raises(StoreError, match="opened without the artifact store"):
            await bare.read(session)
        # The events still in etcd read as before.
        assert [e.seq for e in await bare.tail(session, KEEP)] == list(range(EVENTS - KEEP + 1, EVENTS + 1))
        with pytest.raises(StoreError, match="without the artifact store"):
            await bare.delete_session(session)
        assert await bare.last_seq(session) == EVENTS
        assert isinstance(bare, EtcdEventStore)
        with pytest.raises(StoreError, match="cannot archive the record of session 'needs-segments'"):
            await bare.archive(session)
    finally:
        await bare.close()


async def test_retention_deletes_the_record_with_its_segments_and_keeps_the_other_sessions(
    archive: Archive,
) -> None:
    """`spec.retention: {record: Delete, artifacts: Delete}` on an archived record: the artifact
    scan reads every record across its segments, and the record's deletion takes its segments."""
    from belay.api.agentsession import RetentionPolicy
    from belay.controller.retention import apply_retention

    await written(archive.store, "deleted")
    kept_events = await written(archive.store, "kept")
    await archive.store.archive("deleted")
    await archive.store.archive("kept")
    kept_blobs = {s.sha256 for s in await archive.store.segments_of("kept")}
    notes = await apply_retention(
        "deleted", RetentionPolicy(record="Delete", artifacts="Delete"), archive.store, archive.blobs
    )
    assert [note.reason for note in notes] == ["ArtifactsDeleted", "RecordDeleted"]
    assert f"({EVENTS} events)" in notes[1].message
    assert {key.rsplit("/", 1)[-1] for key in archive.stored_blobs()} == kept_blobs
    assert await archive.store.read("deleted") == []
    assert await archive.store.read("kept") == kept_events
