"""Fixtures that run every conformance test once per registered backend.

To add a backend (say etcd):
1. Make `belay.stores.open_event_store({"backend": "etcd", ...})` open it: add an opener to
   `EVENT_STORE_OPENERS` in `belay/stores/factory.py`.
2. In `tests/conformance/backends.py`, write `async def make_etcd(request, tmp_path) -> EventBackend`.
   It may pull in other fixtures with `request.getfixturevalue("etcd_endpoint")`. Give it a spec
   that opens the same store from a child process (the SIGKILL test depends on it), a unique
   `session_prefix` (or a key prefix inside the spec) so tests never share data, and a `cleanup`
   if the server outlives the test.
3. Register it: `EVENT_STORE_BACKENDS["etcd"] = Registered(make_etcd, marks=(pytest.mark.testenv,))`.
   Artifact backends go to `ARTIFACT_STORE_BACKENDS` with the `corrupt`, `count_blobs` and
   `read_location` hooks.
Every test in this directory then runs against the new backend too; `pytest -k etcd` selects it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.stores.base import ArtifactStore, EventStore
from tests.conformance.backends import (
    ARTIFACT_STORE_BACKENDS,
    EVENT_STORE_BACKENDS,
    ArtifactBackend,
    EventBackend,
)


@pytest.fixture(
    params=[pytest.param(name, marks=entry.marks) for name, entry in EVENT_STORE_BACKENDS.items()]
)
async def event_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventBackend]:
    backend: EventBackend = await EVENT_STORE_BACKENDS[request.param].factory(request, tmp_path)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def event_store(event_backend: EventBackend) -> EventStore:
    return event_backend.store


@pytest.fixture(
    params=[pytest.param(name, marks=entry.marks) for name, entry in ARTIFACT_STORE_BACKENDS.items()]
)
async def artifact_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArtifactBackend]:
    backend: ArtifactBackend = await ARTIFACT_STORE_BACKENDS[request.param].factory(request, tmp_path)
    try:
        yield backend
    finally:
        if backend.cleanup is not None:
            backend.cleanup()


@pytest.fixture
def artifact_store(artifact_backend: ArtifactBackend) -> ArtifactStore:
    return artifact_backend.store
