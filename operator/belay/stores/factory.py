"""Open a store from configuration: a spec dict or a URL.

The harness, the CLI, the operator and the conformance suites all open stores here, so a store
named in a config file, an environment variable or a child process's argv means the same thing
everywhere. A spec is plain JSON (`{"backend": "sqlite", "path": "/var/lib/belay/events.db"}`),
so it can be handed to another process. Every event store also takes `record_key_file`, the
file holding the key of its hash chain (default: the file BELAY_RECORD_KEY_FILE names, if any;
see `belay.stores.integrity`).

URLs map to specs:
    sqlite:///abs/path/events.db   -> {"backend": "sqlite", "path": "/abs/path/events.db"}
    sqlite://relative/events.db    -> {"backend": "sqlite", "path": "relative/events.db"}
    file:///abs/dir                -> {"backend": "filesystem", "root": "/abs/dir"}
    any other scheme (etcd://, s3://) -> {"backend": <scheme>, "url": <the url>}, parsed by that
                                         backend's opener.

Adding a backend: write `open_<name>(spec) -> store` and add it to EVENT_STORE_OPENERS or
ARTIFACT_STORE_OPENERS as "module:function" (imported lazily, so an optional client library is only
needed by whoever uses that backend). Openers are synchronous; a backend that needs a network
connection opens it on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from belay.stores.base import ArtifactStore, EventStore

StoreSpec = Mapping[str, Any]

EVENT_STORE_OPENERS: dict[str, str] = {
    "sqlite": "belay.stores.factory:open_sqlite_event_store",
    "etcd": "belay.stores.etcd:open_etcd_event_store",
}
ARTIFACT_STORE_OPENERS: dict[str, str] = {
    "filesystem": "belay.stores.factory:open_filesystem_artifact_store",
    "s3": "belay.stores.s3:open_s3_artifact_store",
}
# URL scheme -> backend name, where they differ.
SCHEME_BACKENDS: dict[str, str] = {"file": "filesystem"}


def parse_store_url(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    if not parts.scheme:
        raise ValueError(f"not a store URL (no scheme): {url!r}")
    backend = SCHEME_BACKENDS.get(parts.scheme, parts.scheme)
    # sqlite:///abs -> netloc "" and path "/abs"; sqlite://rel/x.db -> netloc "rel", path "/x.db".
    local_path = unquote(parts.netloc + parts.path)
    if backend == "sqlite":
        return {"backend": "sqlite", "path": local_path}
    if backend == "filesystem":
        return {"backend": "filesystem", "root": local_path}
    return {"backend": backend, "url": url}


def normalize_spec(spec: StoreSpec | str) -> dict[str, Any]:
    if isinstance(spec, str):
        return parse_store_url(spec)
    if "backend" not in spec:
        raise ValueError(f"a store spec needs a 'backend' key: {dict(spec)!r}")
    return dict(spec)


def _opener(table: dict[str, str], backend: str, kind: str) -> Callable[[dict[str, Any]], Any]:
    target = table.get(backend)
    if target is None:
        known = ", ".join(sorted(table))
        raise ValueError(f"unknown {kind} backend {backend!r} (known: {known})")
    module_name, _, function_name = target.partition(":")
    return cast(Callable[[dict[str, Any]], Any], getattr(importlib.import_module(module_name), function_name))


def open_event_store(spec: StoreSpec | str) -> EventStore:
    normalized = normalize_spec(spec)
    return cast(EventStore, _opener(EVENT_STORE_OPENERS, normalized["backend"], "event store")(normalized))


def open_artifact_store(spec: StoreSpec | str) -> ArtifactStore:
    normalized = normalize_spec(spec)
    return cast(
        ArtifactStore, _opener(ARTIFACT_STORE_OPENERS, normalized["backend"], "artifact store")(normalized)
    )


# --------------------------------------------------------------------------------------------------
# Openers for the embedded backends. Optional spec keys are passed through as keyword arguments.


def open_sqlite_event_store(spec: dict[str, Any]) -> EventStore:
    from belay.stores.integrity import record_key_for
    from belay.stores.sqlite import SqliteEventStore

    options = {k: v for k, v in spec.items() if k in ("synchronous", "busy_timeout_ms", "poll_interval")}
    return SqliteEventStore(spec["path"], record_key=record_key_for(spec) or b"", **options)


def open_filesystem_artifact_store(spec: dict[str, Any]) -> ArtifactStore:
    from belay.stores.filesystem import FilesystemArtifactStore

    return FilesystemArtifactStore(spec["root"])
