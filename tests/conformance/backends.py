"""The registry of backends the conformance suites run against.

Each entry is a factory `async (request, tmp_path) -> EventBackend | ArtifactBackend` that returns a
fresh, isolated store plus what the backend-agnostic tests need to reach it from outside:

- `spec`: plain JSON that `belay.stores.open_event_store` / `open_artifact_store` turns into
  another handle on the same store, from this process or from a child process.
- `session_prefix` (events): every session id a test uses starts with it, so tests sharing one
  server (etcd) never see each other's sessions.
- `raw` (events): reaches under the protocol to the stored events and the head of a session, as
  anyone with write access to the store could, to change the record behind the store's back.
- `archived_events` (events, `etcd-archived` only): how many of a session's events were archived
  to segments, so the tests that need a record archived mid-way can check that it was.
- `corrupt`, `count_blobs`, `read_location` (artifacts): hooks that reach under the protocol to
  damage a stored blob, count stored copies, and fetch what `location()` points at.

See conftest.py for how to add a backend.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import quote

import pytest

from belay.journal.events import Event, EventDraft
from belay.stores import open_artifact_store, open_event_store
from belay.stores.base import ArtifactStore, EventStore
from belay.stores.filesystem import FilesystemArtifactStore


class RawRecord(Protocol):
    """A session's stored events (seq -> stored bytes) and head (last seq, chain, seal), read and
    written without the store."""

    async def events(self, session_id: str) -> dict[int, bytes]: ...

    async def put_event(self, session_id: str, seq: int, stored: bytes) -> None: ...

    async def delete_event(self, session_id: str, seq: int) -> None: ...

    async def head(self, session_id: str) -> tuple[int, bytes, bytes]: ...

    async def put_head(self, session_id: str, last_seq: int, chain: bytes, seal: bytes) -> None: ...


@dataclass
class EventBackend:
    name: str
    store: EventStore
    spec: dict[str, Any]
    session_prefix: str
    raw: RawRecord
    cleanup: Callable[[], Awaitable[None]] | None = None
    # The most events one atomic batch may hold, where the backend has a limit (etcd: one transaction).
    max_batch_events: int | None = None
    # How many of a session's events are archived out of the backend's own storage (etcd with
    # segments), for tests that check the archive happened; None where the backend archives nothing.
    archived_events: Callable[[str], Awaitable[int]] | None = None
    _extra: list[EventStore] = field(default_factory=list)

    def session(self, label: str = "s") -> str:
        return f"{self.session_prefix}{label}"

    def open_another(self, **spec_changes: Any) -> EventStore:
        """A second, independent handle on the same store (its own connections), opened from the
        spec with `spec_changes` (say another `record_key_file`)."""
        store = open_event_store({**self.spec, **spec_changes})
        self._extra.append(store)
        return store

    async def close(self) -> None:
        for store in [self.store, *self._extra]:
            await store.close()
        if self.cleanup is not None:
            await self.cleanup()


@dataclass
class ArtifactBackend:
    name: str
    store: ArtifactStore
    spec: dict[str, Any]
    corrupt: Callable[[str], None]  # damage the stored bytes of one blob, keeping its address
    count_blobs: Callable[[], int]  # how many blobs are physically stored
    read_location: Callable[[str], bytes]  # fetch what location() returned
    cleanup: Callable[[], None] | None = None


EventStoreFactory = Callable[[pytest.FixtureRequest, Path], Awaitable[EventBackend]]
ArtifactStoreFactory = Callable[[pytest.FixtureRequest, Path], Awaitable[ArtifactBackend]]


@dataclass(frozen=True)
class Registered:
    factory: Any  # EventStoreFactory or ArtifactStoreFactory
    marks: tuple[pytest.MarkDecorator, ...] = ()


# --------------------------------------------------------------------------------------------------
# SQLite


class RawSqliteRecord:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, sql: str, *params: object) -> list[Any]:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    async def events(self, session_id: str) -> dict[int, bytes]:
        rows = self._run("SELECT seq, event_json FROM events WHERE session_id = ?", session_id)
        return {seq: bytes(value) for seq, value in rows}

    async def put_event(self, session_id: str, seq: int, stored: bytes) -> None:
        event_type = json.loads(stored)["type"]
        self._run(
            "INSERT INTO events (session_id, seq, type, created_at, event_json) VALUES (?, ?, ?, '', ?) "
            "ON CONFLICT (session_id, seq) DO UPDATE SET event_json = excluded.event_json",
            session_id,
            seq,
            event_type,
            stored,
        )

    async def delete_event(self, session_id: str, seq: int) -> None:
        self._run("DELETE FROM events WHERE session_id = ? AND seq = ?", session_id, seq)

    async def head(self, session_id: str) -> tuple[int, bytes, bytes]:
        [(last_seq, chain, seal)] = self._run(
            "SELECT last_seq, chain, seal FROM sessions WHERE session_id = ?", session_id
        )
        return last_seq, bytes(chain), bytes(seal)

    async def put_head(self, session_id: str, last_seq: int, chain: bytes, seal: bytes) -> None:
        self._run(
            "UPDATE sessions SET last_seq = ?, chain = ?, seal = ? WHERE session_id = ?",
            last_seq,
            chain,
            seal,
            session_id,
        )


async def make_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> EventBackend:
    spec = {"backend": "sqlite", "path": str(tmp_path / "events.db")}
    return EventBackend(
        name="sqlite",
        store=open_event_store(spec),
        spec=spec,
        session_prefix=f"t{uuid.uuid4().hex[:8]}-",
        raw=RawSqliteRecord(tmp_path / "events.db"),
    )


# --------------------------------------------------------------------------------------------------
# Local directory


def corrupt_filesystem_blob(store: FilesystemArtifactStore, sha256: str) -> None:
    path = store.blob_path(sha256)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    data = bytearray(path.read_bytes())
    if data:
        data[len(data) // 2] ^= 0xFF
    else:
        data = bytearray(b"x")
    path.write_bytes(bytes(data))


async def make_filesystem(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactBackend:
    spec = {"backend": "filesystem", "root": str(tmp_path / "artifacts")}
    store = open_artifact_store(spec)
    assert isinstance(store, FilesystemArtifactStore)
    return ArtifactBackend(
        name="filesystem",
        store=store,
        spec=spec,
        corrupt=lambda sha256: corrupt_filesystem_blob(store, sha256),
        count_blobs=lambda: sum(1 for p in (store.root / "blobs").rglob("*") if p.is_file()),
        read_location=lambda location: Path(location).read_bytes(),
    )


# --------------------------------------------------------------------------------------------------
# etcd: one shared member; each test writes under its own key prefix, deleted afterwards.


class RawEtcdRecord:
    def __init__(self, endpoint: str, prefix: str) -> None:
        self.port = int(endpoint.rsplit(":", 1)[1])
        self.prefix = prefix

    def _root(self, session_id: str) -> bytes:
        return f"{self.prefix}/sessions/{quote(session_id, safe='')}/".encode()

    async def events(self, session_id: str) -> dict[int, bytes]:
        import aetcd

        events = self._root(session_id) + b"events/"
        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            return {int(kv.key[-20:]): kv.value for kv in await client.get_prefix(events)}

    async def put_event(self, session_id: str, seq: int, stored: bytes) -> None:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            await client.put(self._root(session_id) + b"events/%020d" % seq, stored)

    async def delete_event(self, session_id: str, seq: int) -> None:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            await client.delete(self._root(session_id) + b"events/%020d" % seq)

    async def head(self, session_id: str) -> tuple[int, bytes, bytes]:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            value = (await client.get(self._root(session_id) + b"head")).value
        head = json.loads(value)
        return head["last_seq"], head["chain"].encode(), head["seal"].encode()

    async def put_head(self, session_id: str, last_seq: int, chain: bytes, seal: bytes) -> None:
        import aetcd

        value = json.dumps({"last_seq": last_seq, "chain": chain.decode(), "seal": seal.decode()})
        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            await client.put(self._root(session_id) + b"head", value.encode())


async def make_etcd(request: pytest.FixtureRequest, tmp_path: Path) -> EventBackend:
    from belay.stores.etcd import MAX_BATCH_EVENTS

    endpoint = request.getfixturevalue("etcd_endpoint")
    prefix = f"/conformance-{uuid.uuid4().hex[:12]}"
    spec = {"backend": "etcd", "endpoints": [endpoint], "prefix": prefix}

    async def delete_prefix() -> None:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=int(endpoint.rsplit(":", 1)[1])) as client:
            await client.delete_prefix(prefix.encode() + b"/")

    return EventBackend(
        name="etcd",
        store=open_event_store(spec),
        spec=spec,
        session_prefix=f"t{uuid.uuid4().hex[:8]}-",
        raw=RawEtcdRecord(endpoint, prefix),
        cleanup=delete_prefix,
        max_batch_events=MAX_BATCH_EVENTS,
    )


# --------------------------------------------------------------------------------------------------
# S3: one bucket on the shared server; each test stores under its own key prefix, deleted afterwards.

CONFORMANCE_BUCKET = "belay-conformance"


def s3_spec(server: Any, bucket: str, prefix: str) -> dict[str, Any]:
    """The spec of an S3 artifact store in `bucket` under `prefix` on a test S3 server."""
    return {
        "backend": "s3",
        "bucket": bucket,
        "prefix": prefix,
        "endpoint_url": server.endpoint_url,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "region": server.region,
        "create_bucket": True,
    }


async def make_s3(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactBackend:
    import urllib.request

    from belay.stores.s3 import S3ArtifactStore, content_key

    server = request.getfixturevalue("s3_server")
    prefix = f"conformance-{uuid.uuid4().hex[:12]}"
    spec = s3_spec(server, CONFORMANCE_BUCKET, prefix)
    store = open_artifact_store(spec)
    assert isinstance(store, S3ArtifactStore)
    client = server.client()

    def keys_under_prefix() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=CONFORMANCE_BUCKET, Prefix=f"{prefix}/"
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def corrupt(sha256: str) -> None:
        key = content_key(store.prefix, sha256)
        data = bytearray(client.get_object(Bucket=CONFORMANCE_BUCKET, Key=key)["Body"].read())
        if data:
            data[len(data) // 2] ^= 0xFF
        else:
            data = bytearray(b"x")
        client.put_object(Bucket=CONFORMANCE_BUCKET, Key=key, Body=bytes(data))

    def read_location(location: str) -> bytes:
        with urllib.request.urlopen(location, timeout=10) as response:
            return bytes(response.read())

    def cleanup() -> None:
        for key in keys_under_prefix():
            client.delete_object(Bucket=CONFORMANCE_BUCKET, Key=key)

    return ArtifactBackend(
        name="s3",
        store=store,
        spec=spec,
        corrupt=corrupt,
        count_blobs=lambda: sum(1 for key in keys_under_prefix() if key.startswith(f"{prefix}/blobs/")),
        read_location=read_location,
        cleanup=cleanup,
    )


# --------------------------------------------------------------------------------------------------
# etcd with archived segments: the same etcd store, with an S3 bucket for segments, archiving after
# every append of the test's own handle with a tiny window (the newest 4 events stay in etcd, 3
# events a segment), so every record of more than 6 events is read partly from segments.

ARCHIVE_KEEP_EVENTS = 4
ARCHIVE_SEGMENT_EVENTS = 3


class ArchivingEtcdStore:
    """The etcd store, running its own archiver (`EtcdEventStore.archive`) after each append, as
    an operator would after a checkpoint. Everything else is the store's."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def append(self, session_id: str, drafts: Sequence[EventDraft], **options: Any) -> list[Event]:
        events: list[Event] = await self.store.append(session_id, drafts, **options)
        if events:
            await self.store.archive(session_id)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class RawArchivedEtcdRecord(RawEtcdRecord):
    """The record in etcd and in its segments: an event archived is changed by rewriting its
    segment and pointing the index at the new blob, as anyone with write access to both could."""

    def __init__(self, endpoint: str, prefix: str, artifacts: ArtifactStore) -> None:
        super().__init__(endpoint, prefix)
        self.artifacts = artifacts

    async def _segments(self, session_id: str) -> list[tuple[bytes, dict[str, Any]]]:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
            found = await client.get_prefix(self._root(session_id) + b"segments/")
        return [(kv.key, json.loads(kv.value)) for kv in found]

    async def events(self, session_id: str) -> dict[int, bytes]:
        from belay.stores.etcd import segment_lines

        found: dict[int, bytes] = {}
        for _, entry in await self._segments(session_id):
            found.update(segment_lines(self.artifacts.get(entry["sha256"])))
        found.update(await super().events(session_id))
        return found

    async def _rewrite(self, session_id: str, seq: int, stored: bytes | None) -> bool:
        import aetcd

        from belay.stores.etcd import segment_lines

        for key, entry in await self._segments(session_id):
            if entry["first"] <= seq <= entry["last"]:
                lines = segment_lines(self.artifacts.get(entry["sha256"]))
                if stored is None:
                    lines.pop(seq, None)
                else:
                    lines[seq] = stored
                data = b"".join(lines[s] + b"\n" for s in sorted(lines))
                entry = {**entry, "sha256": self.artifacts.put(data).sha256, "size": len(data)}
                async with aetcd.Client(host="127.0.0.1", port=self.port) as client:
                    await client.put(key, json.dumps(entry).encode())
                return True
        return False

    async def put_event(self, session_id: str, seq: int, stored: bytes) -> None:
        if not await self._rewrite(session_id, seq, stored):
            await super().put_event(session_id, seq, stored)

    async def delete_event(self, session_id: str, seq: int) -> None:
        if not await self._rewrite(session_id, seq, None):
            await super().delete_event(session_id, seq)


async def make_etcd_archived(request: pytest.FixtureRequest, tmp_path: Path) -> EventBackend:
    from belay.stores.etcd import MAX_BATCH_EVENTS

    endpoint = request.getfixturevalue("etcd_endpoint")
    artifacts = await make_s3(request, tmp_path)
    prefix = f"/conformance-{uuid.uuid4().hex[:12]}"
    spec = {
        "backend": "etcd",
        "endpoints": [endpoint],
        "prefix": prefix,
        "segments": artifacts.spec,
        "keep_events": ARCHIVE_KEEP_EVENTS,
        "segment_events": ARCHIVE_SEGMENT_EVENTS,
    }
    store = open_event_store(spec)

    async def archived_events(session_id: str) -> int:
        segments = await store.segments_of(session_id)  # type: ignore[attr-defined]
        return sum(segment.last - segment.first + 1 for segment in segments)

    async def cleanup() -> None:
        import aetcd

        async with aetcd.Client(host="127.0.0.1", port=int(endpoint.rsplit(":", 1)[1])) as client:
            await client.delete_prefix(prefix.encode() + b"/")
        assert artifacts.cleanup is not None
        artifacts.cleanup()

    return EventBackend(
        name="etcd-archived",
        store=cast(EventStore, ArchivingEtcdStore(store)),
        spec=spec,
        session_prefix=f"t{uuid.uuid4().hex[:8]}-",
        raw=RawArchivedEtcdRecord(endpoint, prefix, artifacts.store),
        cleanup=cleanup,
        max_batch_events=MAX_BATCH_EVENTS,
        archived_events=archived_events,
    )


EVENT_STORE_BACKENDS: dict[str, Registered] = {
    "sqlite": Registered(make_sqlite),
    "etcd": Registered(make_etcd, marks=(pytest.mark.testenv,)),
    "etcd-archived": Registered(make_etcd_archived, marks=(pytest.mark.testenv,)),
}
ARTIFACT_STORE_BACKENDS: dict[str, Registered] = {
    "filesystem": Registered(make_filesystem),
    "s3": Registered(make_s3, marks=(pytest.mark.testenv,)),
}
