"""The fleet of one home: every session's row (`belay.views.fleet`), from its record, the
liveness of its attempt on this machine, and the labels of the manifest it was started with.

A `LocalFleet` keeps each session's folded state between reads and folds only what was appended
since, so `belay sessions --watch` costs one read of the new events per session per pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from belay.api.agentsession import ManifestError, load_manifest
from belay.journal.events import now_utc
from belay.journal.phase import Liveness
from belay.journal.state import SessionState, fold
from belay.local.liveness import local_liveness
from belay.local.record import read_session, reading
from belay.local.runtime import LocalHome, missing_record
from belay.stores.base import EventStore, RecordCorrupt, StoreCorrupt
from belay.views.fleet.build import corrupt_row, fleet_row
from belay.views.fleet.model import FleetRow
from belay.views.fleet.selectors import selector_matches
from belay.views.status.build import session_status


def manifest_labels(home: LocalHome, session_id: str) -> dict[str, str]:
    """The labels of the manifest the session was started with ({} without one)."""
    if not home.session_exists(session_id):
        return {}
    try:
        return dict(load_manifest(home.manifest_file(session_id)).metadata.labels)
    except ManifestError:
        return {}


@dataclass
class LocalFleet:
    home: LocalHome
    selector: str = ""
    states: dict[str, SessionState] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    corrupt: dict[str, RecordCorrupt] = field(default_factory=dict)  # by session, as last read

    async def rows(self) -> list[FleetRow]:
        """Every session of the home the selector matches, now. A record that fails its
        integrity check is listed as such (`RecordCorrupt`), and so is a session the home ran
        whose record has no events (`missing_record`); the others as they stand. A damaged store
        file (StoreCorrupt) ends the listing: no row of it can be read."""
        async with reading(self.home) as store:
            recorded = await store.list_sessions()
            rows = await self.missing_rows(store, recorded)
            for session_id in recorded:
                labels = self.labels_of(session_id)
                if self.selector and not selector_matches(self.selector, labels):
                    continue
                try:
                    state, liveness = await self.read(store, session_id)
                except StoreCorrupt:
                    raise
                except RecordCorrupt as error:
                    self.corrupt[session_id] = error
                    rows.append(corrupt_row(session_id, error.seq, labels))
                    continue
                self.corrupt.pop(session_id, None)
                status = session_status(state, liveness=liveness)
                rows.append(fleet_row(session_id, status, now=liveness.now, labels=labels))
        return sorted(rows, key=lambda row: row.session)

    async def read(self, store: EventStore, session_id: str) -> tuple[SessionState, Liveness]:
        """The session as every command opens it the first time (`belay.local.record`), then
        folded on with what was appended since."""
        known = self.states.get(session_id)
        if known is None:
            opened = await read_session(store, self.home, session_id)
            state, liveness = opened.state, opened.liveness
        else:
            state = fold(await store.read(session_id, from_seq=known.last_seq + 1), known)
            liveness = await local_liveness(store, session_id, state.parent.session if state.parent else None)
        self.states[session_id] = state
        return state, liveness

    def labels_of(self, session_id: str) -> dict[str, str]:
        if session_id not in self.labels:
            self.labels[session_id] = manifest_labels(self.home, session_id)
        return self.labels[session_id]

    async def missing_rows(self, store: EventStore, recorded: list[str]) -> list[FleetRow]:
        """A RecordCorrupt row for each session of the home's directory that ran, whose record
        would be in this store (not in stores its manifest names) and is not."""
        try:
            directories = sorted(path.name for path in (self.home.root / "sessions").iterdir())
        except OSError:
            return []
        rows = []
        for session_id in sorted(set(directories) - set(recorded)):
            if self.home.for_session(session_id).events_url != self.home.events_url:
                continue
            labels = self.labels_of(session_id)
            if self.selector and not selector_matches(self.selector, labels):
                continue
            try:
                # Read as every other command reads it first: the store's own check (a record
                # behind its high-water mark) names the damage the same way for all of them.
                await store.last_seq(session_id)
                missing = missing_record(self.home, session_id)
            except RecordCorrupt as error:
                missing = error
            if missing is not None:
                self.corrupt[session_id] = missing
                rows.append(corrupt_row(session_id, missing.seq, labels))
        return rows


def without_clock(rows: list[FleetRow]) -> list[dict[str, object]]:
    """Rows as a watcher compares them: a change of age alone is not news."""
    return [row.model_dump(exclude={"last_event_age_s"}) for row in rows]


def stamp() -> str:
    return now_utc().strftime("%Y-%m-%d %H:%M:%S UTC")
