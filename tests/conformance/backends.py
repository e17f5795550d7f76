"""The registry of backends the conformance suites run against.

Each entry is a factory `async (request, tmp_path) -> EventBackend | ArtifactBackend` that returns a
fresh, isolated store plus what the backend-agnostic tests need to reach it from outside:

- `spec`: plain JSON that `belay.stores.open_event_store` / `open_artifact_store` turns into
  another handle on the same store, from this process or from a child process.
- `session_prefix` (events): every session id a test uses starts with it, so tests sharing one
  server (etcd) never see each other's sessions.
- `corrupt`, `count_blobs`, `read_location` (artifacts): hooks that reach under the protocol to
  damage a stored blob, count stored copies, and fetch what `location()` points at.

See conftest.py for how to add a backend.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from belay.stores import open_artifact_store, open_event_store
from belay.stores.base import ArtifactStore, EventStore
from belay.stores.filesystem import FilesystemArtifactStore


@dataclass
class EventBackend:
    name: str
    store: EventStore
    spec: dict[str, Any]
    session_prefix: str
    cleanup: Callable[[], Awaitable[None]] | None = None
    # The most events one atomic batch may hold, where the backend has a limit (etcd: one transaction).
    max_batch_events: int | None = None
    _extra: list[EventStore] = field(default_factory=list)

    def session(self, label: str = "s") -> str:
        return f"{self.session_prefix}{label}"

    def open_another(self) -> EventStore:
        """A second, independent handle on the same store (its own connections)."""
        store = open_event_store(self.spec)
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


async def make_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> EventBackend:
    spec = {"backend": "sqlite", "path": str(tmp_path / "events.db")}
    return EventBackend(
        name="sqlite",
        store=open_event_store(spec),
        spec=spec,
        session_prefix=f"t{uuid.uuid4().hex[:8]}-",
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
        cleanup=delete_prefix,
        max_batch_events=MAX_BATCH_EVENTS,
    )


# --------------------------------------------------------------------------------------------------
# S3: one bucket on the shared server; each test stores under its own key prefix, deleted afterwards.

CONFORMANCE_BUCKET = "belay-conformance"


async def make_s3(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactBackend:
    import urllib.request

    from belay.stores.s3 import S3ArtifactStore, content_key

    server = request.getfixturevalue("s3_server")
    prefix = f"conformance-{uuid.uuid4().hex[:12]}"
    spec = {
        "backend": "s3",
        "bucket": CONFORMANCE_BUCKET,
        "prefix": prefix,
        "endpoint_url": server.endpoint_url,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "region": server.region,
        "create_bucket": True,
    }
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


EVENT_STORE_BACKENDS: dict[str, Registered] = {
    "sqlite": Registered(make_sqlite),
    "etcd": Registered(make_etcd, marks=(pytest.mark.testenv,)),
}
ARTIFACT_STORE_BACKENDS: dict[str, Registered] = {
    "filesystem": Registered(make_filesystem),
    "s3": Registered(make_s3, marks=(pytest.mark.testenv,)),
}
