"""`inputs[].artifact` for `belay run`: another session's deliverable, proven by its record and
pinned by its sha256 before anything of the consuming session is written.

The source is a session of the same home (its name is a DNS label, so it names nothing else). Its
record must prove the deliverable (`belay.journal.proof.usable_deliverable`: published by a step
proven done, not empty, not the very bytes a person rejected), and its bytes must be in the
consuming session's artifact store, where the harness reads them. The pin is written into the
stored manifest (`artifact.sha256`), so the subagent's first sandbox is seeded with exactly those
bytes, and its inputs checkpoint then holds them for every later sandbox: a source amended
afterwards changes nothing here. A manifest that gives `sha256` itself is refused unless the
proven deliverable is those bytes.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from belay.api.agentsession import AgentSession, ManifestError, StoresSpec
from belay.journal.events import ArtifactRef
from belay.journal.proof import usable_deliverable
from belay.journal.snapshots import load_state
from belay.stores.base import ArtifactStore, EventStore


class Home(Protocol):
    """What of `belay.local.runtime.LocalHome` this reads."""

    @property
    def root(self) -> Path: ...

    @property
    def artifacts_location(self) -> str: ...

    def session_exists(self, session_id: str) -> bool: ...

    def for_session(self, session_id: str) -> Home: ...

    def with_stores(self, stores: StoresSpec) -> Home: ...

    def open_event_store(self, *, read_only: bool = False) -> EventStore: ...

    def open_artifact_store(self) -> ArtifactStore: ...


def pin_artifact_input(home: Home, session: AgentSession, artifact: dict[str, Any], field: str) -> None:
    """Check one manifest's `artifact` input against its source's record and pin its sha256 in
    place; ManifestError, one line naming the session and the deliverable, when it may not be
    used."""
    source, deliverable = artifact["session"], artifact["deliverable"]
    what = f"{field}: deliverable {deliverable} of session {source}"
    if source == session.session_id:
        raise ManifestError(f"{what}: a session cannot take its own deliverable as an input")
    if not home.session_exists(source):
        raise ManifestError(f"{what}: there is no session {source} in {home.root}")
    ref, why = _proven(home.for_session(source), source, deliverable)
    if ref is None:
        raise ManifestError(f"{what}: {why}")
    pinned = artifact.get("sha256")
    if pinned is not None and pinned != ref.sha256:
        raise ManifestError(f"{what}: the proven deliverable is sha256 {ref.sha256}, not the pinned {pinned}")
    own = home.with_stores(session.spec.stores)
    if not own.open_artifact_store().exists(ref.sha256):
        raise ManifestError(
            f"{what}: its bytes (sha256 {ref.sha256}) are not in this session's artifact store "
            f"{own.artifacts_location}: the two sessions use different stores"
        )
    artifact["sha256"] = ref.sha256


def _proven(home: Home, source: str, deliverable: str) -> tuple[ArtifactRef | None, str]:
    async def read() -> tuple[ArtifactRef | None, str]:
        store = home.open_event_store(read_only=True)
        try:
            state = (await load_state(store, home.open_artifact_store(), source)).state
        finally:
            await store.close()
        return usable_deliverable(state, deliverable)

    # In a thread of its own: a child session is installed from inside a running attempt's loop.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, read()).result()
