"""Snapshots of the folded state: folding from any snapshot plus the tail equals folding the whole
record, whatever was snapshotted before it, and every view reads a loaded state as it reads a
folded one.

The codec's sizes are made tiny here (two entries a page, nothing inline, nothing loaded whole),
so that a few dozen events already make maps of several runs of several pages, tombstones,
merges and lookups of keys that share no page: what a long record does with the real sizes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map
from typer.testing import CliRunner

import belay.local.record as local_record
from belay.api.agentsession import AgentSession, parse_manifest
from belay.cli import main as cli
from belay.harness.attempt import Attempt
from belay.journal import snapshots
from belay.journal.events import Event, EventDraft, StateSnapshotEvent, ToolRequest
from belay.journal.recovery import recovery_plan
from belay.journal.snapshots import (
    SnapshotMap,
    SnapshotUnusable,
    decode_state,
    encode_state,
    load_state,
)
from belay.journal.state import EMPTY, SessionState, apply, fold
from belay.local.runtime import LocalHome
from belay.stores.filesystem import FilesystemArtifactStore
from belay.views.briefing.build import briefing
from belay.views.status.build import session_status
from tests.journal.fixtures import realistic_log
from tests.journal.strategies import logs

PROPERTY = settings(max_examples=150, deadline=None)


@contextlib.contextmanager
def tiny_pages(page: int = 2, inline: int = 0, eager: int = 0) -> Iterator[None]:
    saved = snapshots.PAGE_ENTRIES, snapshots.INLINE_BYTES, snapshots.EAGER_ENTRIES
    snapshots.PAGE_ENTRIES, snapshots.INLINE_BYTES, snapshots.EAGER_ENTRIES = page, inline, eager
    try:
        yield
    finally:
        snapshots.PAGE_ENTRIES, snapshots.INLINE_BYTES, snapshots.EAGER_ENTRIES = saved


@contextlib.contextmanager
def artifact_store() -> Iterator[FilesystemArtifactStore]:
    with tempfile.TemporaryDirectory(prefix="belay-snapshots-") as root:
        yield FilesystemArtifactStore(root)


def snapshot(state: SessionState, store: FilesystemArtifactStore) -> tuple[SessionState, SessionState]:
    """(the state rebuilt on what was written, the state read back from the stored snapshot)."""
    root, rebased = encode_state(state, lambda data: store.put(data).sha256, store.get)
    return rebased, decode_state(root, store.get)


def views(state: SessionState) -> tuple[str, str, str]:
    return (
        briefing(state).model_dump_json(),
        session_status(state).model_dump_json(),
        recovery_plan(state).model_dump_json(),
    )


@PROPERTY
@given(events=logs(), data=st.data())
def test_folding_from_any_snapshot_plus_the_tail_equals_folding_the_whole_record(
    events: list[Event], data: st.DataObject
) -> None:
    """Snapshots are taken one after another at arbitrary points, each of a state that may itself
    come from the snapshot before (so runs stack up and merge, and tombstones cover older runs);
    from each, the rest of the record folds to the state of the whole record."""
    whole = fold(events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=6)))
    with tiny_pages(), artifact_store() as store:
        state, done = EMPTY, 0
        for cut in cuts:
            state = fold(events[done:cut], state)
            rebased, loaded = snapshot(state, store)
            assert rebased == state
            assert loaded == state == fold(events[:cut])
            assert fold(events[cut:], loaded) == whole
            state = data.draw(st.sampled_from([state, rebased, loaded]), label="go on from")
            done = cut
        assert fold(events[done:], state) == whole


@PROPERTY
@given(events=logs(max_size=40), data=st.data())
def test_views_read_a_loaded_state_as_they_read_a_folded_one(
    events: list[Event], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(events)))
    with tiny_pages(), artifact_store() as store:
        _, loaded = snapshot(fold(events[:cut]), store)
        assert views(fold(events[cut:], loaded)) == views(fold(events))


def test_a_long_record_snapshotted_as_the_harness_does_loads_pages_only_when_asked() -> None:
    """The realistic log, snapshotted every few events with the real page size: the maps come back
    as SnapshotMaps that have read nothing until a lookup, and a lookup reads one page."""
    events = realistic_log()
    reads: list[str] = []
    with tiny_pages(page=4, eager=0), artifact_store() as store:
        state = EMPTY
        for start in range(0, len(events), 7):
            state = fold(events[start : start + 7], state)
            state, _ = snapshot(state, store)
        root, _ = encode_state(state, lambda data: store.put(data).sha256, store.get)

        def counted_get(sha256: str) -> bytes:
            reads.append(sha256)
            return store.get(sha256)

        loaded = decode_state(root, counted_get)
        assert reads == []
        assert isinstance(loaded.operations, SnapshotMap)
        some = next(iter(fold(events).operations))
        assert loaded.operations[some] == fold(events).operations[some]
        assert 1 <= len(reads) <= 2 * len(loaded.operations._runs)  # fingerprints and a page per run at most
        assert loaded == fold(events)


def test_walking_a_loaded_map_yields_each_entry_once_and_keeps_nothing_it_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A view that walks a map (the briefing's one pass over the results) holds a page at a time:
    the runs are merged as they stream, so a key that several runs hold comes once, with its
    newest value, and no page or value read on the way stays behind."""
    monkeypatch.setattr(snapshots, "MERGE_RATIO", 1)  # runs merge later: more layers to walk
    events = realistic_log()
    with tiny_pages(page=2), artifact_store() as store:
        state = EMPTY
        for start in range(0, len(events), 5):
            state, _ = snapshot(fold(events[start : start + 5], state), store)
        _, loaded = snapshot(state, store)
        whole = fold(events)
        layered = 0
        for name in ("operations", "results", "tasks", "approvals"):
            stored = getattr(loaded, name)
            assert isinstance(stored, SnapshotMap)
            layered += len(stored._runs) > 1
            walked = list(stored.items())
            assert len(walked) == len(dict(walked)) == len(getattr(whole, name))
            assert dict(walked) == dict(getattr(whole, name).items())
            assert all(not run._pages and not run._values for run in stored._runs)
        assert layered  # some map is spread over several runs, so the merge had keys to settle


def test_a_snapshot_map_behaves_like_the_map_it_stands_for() -> None:
    with tiny_pages(), artifact_store() as store:
        put = lambda data: store.put(data).sha256  # noqa: E731
        base = Map({f"k{i}": i for i in range(9)})
        codec = snapshots._codec(SessionState).maps["open_operations"]
        runs = snapshots._write_map(base, codec, put, store.get)
        stored = SnapshotMap(tuple(runs), count=len(base))
        assert stored == base and len(stored) == 9 and stored["k3"] == 3 and "k9" not in stored
        changed = stored.set("k9", 9).delete("k0").set("k1", 10)
        expected = base.set("k9", 9).delete("k0").set("k1", 10)
        assert changed == expected and dict(changed.items()) == dict(expected.items())
        assert stored == base  # unchanged by what was built on it
        with pytest.raises(KeyError):
            changed.delete("k0")
        with pytest.raises(KeyError):
            _ = changed["k0"]
        assert changed.get("k0", "gone") == "gone"
        rewritten = SnapshotMap(
            tuple(snapshots._write_map(changed, codec, put, store.get)), count=len(changed)
        )
        assert rewritten == expected


def test_a_snapshot_of_another_fold_or_format_is_refused() -> None:
    with artifact_store() as store:
        root, _ = encode_state(fold(realistic_log()), lambda data: store.put(data).sha256, store.get)
        document = json.loads(root)
        for change in ({"fold_version": "0" * 64}, {"codec": 0}, {"format": "other"}):
            with pytest.raises(SnapshotUnusable):
                decode_state(json.dumps({**document, **change}).encode(), store.get)
        fields = dict(document["fields"])
        fields.pop("last_seq")
        with pytest.raises(SnapshotUnusable, match="fields"):
            decode_state(json.dumps({**document, "fields": fields}).encode(), store.get)
        with pytest.raises(SnapshotUnusable):
            decode_state(b"{not json", store.get)


def _modules_of_the_fold() -> list[str]:
    """Every module the fold is made of, read from the disk: the events, their dispatch, and each
    file of the state package."""
    operator_root = Path(snapshots.__file__).parents[2]
    names = ["belay.journal.events", "belay.journal.dispatch"]
    for path in sorted((operator_root / "belay" / "journal" / "state").rglob("*.py")):
        parts = path.relative_to(operator_root).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("changed", _modules_of_the_fold())
def test_a_change_to_any_module_of_the_fold_makes_older_snapshots_unusable(
    changed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshots.fold_version()
    getsource = inspect.getsource

    def edited(module: Any) -> str:
        return getsource(module) + ("\n# edited\n" if module.__name__ == changed else "")

    monkeypatch.setattr(inspect, "getsource", edited)
    assert snapshots.fold_version() != before


def test_a_damaged_page_is_refused_when_it_is_read(tmp_path: Path) -> None:
    store = FilesystemArtifactStore(tmp_path)
    with tiny_pages(page=2):
        root, _ = encode_state(fold(realistic_log()), lambda data: store.put(data).sha256, store.get)
    loaded = decode_state(root, store.get)
    for blob in (tmp_path / "blobs").glob("*/*"):
        if blob.name != hashlib.sha256(root).hexdigest():
            blob.chmod(0o644)
            blob.write_bytes(b"damaged")
    with pytest.raises(SnapshotUnusable, match="cannot be read"):
        list(loaded.operations.items())


def test_a_state_from_a_snapshot_goes_on_folding_like_any_other() -> None:
    events = realistic_log()
    with tiny_pages(), artifact_store() as store:
        _, loaded = snapshot(fold(events[:20]), store)
        one_by_one = loaded
        for event in events[20:]:
            one_by_one = apply(one_by_one, event)
        assert one_by_one == fold(events)
        assert views(one_by_one) == views(fold(events))


# --------------------------------------------------------------------------------------------------
# Snapshots in use: written by the harness attempt, read by the next attempt and by `belay`


SNAPSHOTTED = "snapshotted"


def manifest() -> AgentSession:
    return parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": SNAPSHOTTED},
            "spec": {
                "request": {"goal": "g"},
                "executor": {"type": "scripted", "plan": "plan.yaml"},
                "subagents": [{"name": "researcher"}],
            },
        }
    )


async def record_as_an_attempt(home: LocalHome, monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """The realistic log appended under an attempt's lease, the attempt folding after each event as
    the harness does; snapshots are due every seven events and three after a verified checkpoint."""
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", 7)
    monkeypatch.setattr(snapshots, "SNAPSHOT_AT_CHECKPOINT", 3)
    store, artifacts = home.open_event_store(), home.open_artifact_store()
    attempt = Attempt(session=manifest(), store=store, artifacts=artifacts)
    await attempt.acquire()
    try:
        for event in realistic_log():
            draft = EventDraft(payload=event.payload, actor=event.actor, parent_seq=event.parent_seq)
            await store.append(SNAPSHOTTED, [draft], lease=attempt.lease)
            await attempt.state()
        return await store.read(SNAPSHOTTED)
    finally:
        await attempt.release()
        await store.close()


def damage(home: LocalHome, *roots: StateSnapshotEvent) -> None:
    for event in roots:
        blob = home.artifacts_dir / "blobs" / event.payload.ref.sha256[:2] / event.payload.ref.sha256
        blob.chmod(0o644)
        blob.write_bytes(b"damaged")


async def test_an_attempt_writes_snapshots_and_every_reader_starts_from_the_latest_usable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = LocalHome(tmp_path / "home")
    with tiny_pages():
        recorded = await record_as_an_attempt(home, monkeypatch)
    taken = [e for e in recorded if isinstance(e, StateSnapshotEvent)]
    assert len(taken) >= 3
    assert [e.payload.previous_seq for e in taken] == [None, *(e.seq for e in taken[:-1])]
    whole = fold(recorded)

    store = home.open_event_store()
    try:
        loaded = await load_state(store, home.open_artifact_store(), SNAPSHOTTED)
        assert (loaded.snapshot_seq, loaded.passed_over) == (taken[-1].seq, [])
        assert loaded.state == whole
        assert views(loaded.state) == views(whole)

        # A new attempt folds the same state from there, and goes on from it.
        attempt = Attempt(session=manifest(), store=store, artifacts=home.open_artifact_store())
        assert await attempt.state() == whole

        # A damaged snapshot is passed over for the one before it.
        damage(home, taken[-1])
        loaded = await load_state(store, home.open_artifact_store(), SNAPSHOTTED)
        assert loaded.snapshot_seq == taken[-2].seq and len(loaded.passed_over) == 1
        assert loaded.state == whole

        # Snapshots of another version of the fold are never used: the whole record is folded.
        monkeypatch.setattr(snapshots, "FOLD_VERSION", "another fold")
        loaded = await load_state(store, home.open_artifact_store(), SNAPSHOTTED)
        assert loaded.snapshot_seq is None and loaded.passed_over
        assert loaded.state == whole
    finally:
        await store.close()


def test_belay_brief_reads_the_snapshot_and_says_what_the_whole_record_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = LocalHome(tmp_path / "home")
    recorded = asyncio.run(record_as_an_attempt(home, monkeypatch))
    monkeypatch.setattr(cli.Context, "home", home)
    used: list[int | None] = []
    load = snapshots.load_state

    async def counted(*args: Any, **kwargs: Any) -> snapshots.LoadedState:
        loaded = await load(*args, **kwargs)
        used.append(loaded.snapshot_seq)
        return loaded

    monkeypatch.setattr(snapshots, "load_state", counted)
    # Every command opens the record through belay.local.record, which holds load_state by name.
    monkeypatch.setattr(local_record, "load_state", counted)
    runner = CliRunner()
    from_snapshot = runner.invoke(cli.app, ["--home", str(home.root), "brief", "--json", SNAPSHOTTED])
    assert from_snapshot.exit_code == 0, from_snapshot.output
    damage(home, *(e for e in recorded if isinstance(e, StateSnapshotEvent)))
    from_record = runner.invoke(cli.app, ["--home", str(home.root), "brief", "--json", SNAPSHOTTED])
    assert from_record.exit_code == 0, from_record.output
    assert used[0] is not None and used[-1] is None
    assert json.loads(from_snapshot.stdout) == json.loads(from_record.stdout)


async def test_a_new_attempt_reads_the_tail_and_single_requests_never_the_whole_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = LocalHome(tmp_path / "home")
    recorded = await record_as_an_attempt(home, monkeypatch)
    covered = max(e.payload.covers_seq for e in recorded if isinstance(e, StateSnapshotEvent))
    store = home.open_event_store()
    reads: list[tuple[int, int | None]] = []
    read = store.read

    async def counted(
        session_id: str, from_seq: int = 1, to_seq: int | None = None, **kwargs: Any
    ) -> list[Event]:
        reads.append((from_seq, to_seq))
        return await read(session_id, from_seq, to_seq, **kwargs)

    monkeypatch.setattr(store, "read", counted)
    try:
        attempt = Attempt(session=manifest(), store=store, artifacts=home.open_artifact_store())
        state = await attempt.state()
        operation = min(state.operations.values(), key=lambda op: op.request_seq)
        request = await attempt.request_of(operation.operation_id)
        assert request == next(
            e.payload
            for e in recorded
            if e.seq == operation.request_seq and isinstance(e.payload, ToolRequest)
        )
        assert operation.request_seq <= covered
        # Everything read before the snapshot's seq is a single event: the snapshot's and the request's.
        assert all(to_seq == from_seq for from_seq, to_seq in reads if from_seq <= covered)
        assert (operation.request_seq, operation.request_seq) in reads
    finally:
        await store.close()
