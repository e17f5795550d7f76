"""Opening stores from a spec or a URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.stores import open_artifact_store, open_event_store, parse_store_url
from belay.stores.filesystem import FilesystemArtifactStore
from belay.stores.sqlite import SqliteEventStore


@pytest.mark.parametrize(
    ("url", "spec"),
    [
        ("sqlite:///var/lib/belay/events.db", {"backend": "sqlite", "path": "/var/lib/belay/events.db"}),
        ("sqlite://.belay/events.db", {"backend": "sqlite", "path": ".belay/events.db"}),
        ("file:///var/lib/belay/artifacts", {"backend": "filesystem", "root": "/var/lib/belay/artifacts"}),
        ("file:///with%20space", {"backend": "filesystem", "root": "/with space"}),
        ("etcd://127.0.0.1:2379", {"backend": "etcd", "url": "etcd://127.0.0.1:2379"}),
    ],
)
def test_urls_map_to_specs(url: str, spec: dict[str, str]) -> None:
    assert parse_store_url(url) == spec


def test_a_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="scheme"):
        parse_store_url("/var/lib/belay/events.db")


async def test_specs_and_urls_open_the_embedded_backends(tmp_path: Path) -> None:
    store = open_event_store({"backend": "sqlite", "path": str(tmp_path / "e.db"), "synchronous": "NORMAL"})
    assert isinstance(store, SqliteEventStore) and store.synchronous == "NORMAL"
    await store.close()
    by_url = open_event_store(f"sqlite://{tmp_path / 'e.db'}")
    assert isinstance(by_url, SqliteEventStore) and by_url.path == tmp_path / "e.db"
    await by_url.close()
    artifacts = open_artifact_store(f"file://{tmp_path / 'artifacts'}")
    assert isinstance(artifacts, FilesystemArtifactStore) and artifacts.root == tmp_path / "artifacts"


def test_unknown_backends_are_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="unknown event store backend 'nosuch'"):
        open_event_store({"backend": "nosuch"})
    with pytest.raises(ValueError, match="backend"):
        open_artifact_store({"root": "/tmp/x"})


def test_an_etcd_url_names_its_segment_store_in_its_query(tmp_path: Path) -> None:
    from belay.stores.etcd import ARCHIVE_KEEP_EVENTS, EtcdEventStore

    url = f"etcd://127.0.0.1:2379,127.0.0.1:2380/team?segments=file://{tmp_path}/segments&segment_events=500"
    store = open_event_store(url)
    assert isinstance(store, EtcdEventStore)
    assert store.prefix == "/team" and len(store.endpoints) == 2
    assert (
        isinstance(store.segments, FilesystemArtifactStore) and store.segments.root == tmp_path / "segments"
    )
    assert (store.keep_events, store.segment_events) == (ARCHIVE_KEEP_EVENTS, 500)
    plain = open_event_store("etcd://127.0.0.1:2379/team")
    assert isinstance(plain, EtcdEventStore) and plain.segments is None
    with pytest.raises(ValueError, match="unknown option keep in the etcd URL"):
        open_event_store("etcd://127.0.0.1:2379/team?keep=10")
