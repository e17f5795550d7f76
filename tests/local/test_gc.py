"""`belay gc` removes only what no record names: every way an event refers to a blob keeps it (an
argument by hash, a large output, an artifact, a checkpoint's patch and declared files, what an
approval binds, a rejection, a note's and a summary's sources, a manifest's entries, a state
snapshot and its pages), whichever session of the home names it; a blob written since a live
attempt started is kept too, and a record that cannot be read keeps every blob."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Actor,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DeclaredArtifact,
    DerivedFrom,
    EffectClass,
    EventDraft,
    Note,
    NoteKind,
    Payload,
    Rejection,
    StateSnapshot,
    Summary,
    ToolRequest,
    ToolResult,
    UserInput,
)
from belay.journal.snapshots import FOLD_VERSION, load_state, write_snapshot
from belay.journal.state import fold
from belay.local.garbage import GRACE_S, MARGIN_S, collect
from belay.local.liveness import process_start, this_holder
from belay.local.runtime import LocalHome
from belay.stores.base import MANIFEST_MEDIA_TYPE, RecordCorrupt
from belay.stores.filesystem import FilesystemArtifactStore

LONG_AGO = time.time() - GRACE_S - 3600  # past the grace period of blobs no record names


def blob_path(home: LocalHome, sha256: str) -> Path:
    return home.artifacts_dir / "blobs" / sha256[:2] / sha256


def put_old(
    store: FilesystemArtifactStore, data: bytes, media_type: str = "application/octet-stream"
) -> ArtifactRef:
    """A blob as an attempt long gone stored it."""
    ref = store.put(data, media_type=media_type)
    path = store.blob_path(ref.sha256)
    os.utime(path, (LONG_AGO, LONG_AGO))
    return ref


async def append(home: LocalHome, session_id: str, payloads: list[Payload]) -> None:
    store = home.open_event_store()
    try:
        await store.append(session_id, [EventDraft(payload=p, actor=Actor(kind="harness")) for p in payloads])
    finally:
        await store.close()


def every_kind_of_reference(store: FilesystemArtifactStore) -> tuple[list[Payload], set[str]]:
    """A record that names blobs in every way there is, and the blobs it names."""
    blob = {
        name: put_old(store, f"{name} bytes\n".encode())
        for name in (
            "argument",
            "output",
            "artifact",
            "patch",
            "declared",
            "payload",
            "content",
            "rejected",
            "note-source",
            "summary-source",
            "entry",
        )
    }
    entry = DeclaredArtifact(name="out/entry.txt", sha256=blob["entry"].sha256, size=blob["entry"].size)
    manifest = store.put_manifest([entry])
    os.utime(store.blob_path(manifest.sha256), (LONG_AGO, LONG_AGO))
    declared = DeclaredArtifact(name="out/a.txt", sha256=blob["declared"].sha256, size=blob["declared"].size)
    payloads: list[Payload] = [
        UserInput(goal="keep what the record names"),
        ToolRequest(
            operation_id="w.s.1",
            tool="write_file",
            arguments={
                "path": "big.txt",
                "content": {ARTIFACT_ARGUMENT: blob["argument"].sha256, "size": 15},
            },
            effect=EffectClass.IDEMPOTENT,
        ),
        ToolResult(
            operation_id="w.s.1",
            ok=True,
            output={"stored_as_artifact": blob["output"].sha256},
            output_ref=blob["output"],
        ),
        Artifact(name="a.txt", ref=blob["artifact"]),
        Artifact(name="manifest", ref=manifest.model_copy(update={"media_type": MANIFEST_MEDIA_TYPE})),
        Checkpoint(checkpoint_id="w/s", covers_seq=3, patch=blob["patch"], declared_artifacts=(declared,)),
        ApprovalRequest(
            approval_id="approve-w.s.2",
            operation_id="w.s.2",
            tool="publish_deliverable",
            payload_sha256=blob["payload"].sha256,
            summary="publish",
            payload_ref=blob["payload"],
            content_ref=blob["content"],
        ),
        Rejection(name="a.txt", sha256=blob["rejected"].sha256, reason="wrong"),
        Note(
            note_id="n",
            kind=NoteKind.FINDING,
            text="seen",
            derived_from=DerivedFrom(artifacts=(blob["note-source"].sha256,)),
        ),
        Summary(
            covers_from_seq=1, covers_to_seq=5, text="so far", artifacts=(blob["summary-source"].sha256,)
        ),
    ]
    return payloads, {ref.sha256 for ref in blob.values()} | {manifest.sha256}


async def test_every_blob_a_record_names_is_kept_and_only_orphans_go(tmp_path: Path) -> None:
    home = LocalHome(tmp_path / "home")
    store = home.open_artifact_store()
    assert isinstance(store, FilesystemArtifactStore)
    payloads, named = every_kind_of_reference(store)
    await append(home, "first", payloads)
    # A second session names one blob of its own; a third, in the home but not in its record.
    other = put_old(store, b"the other session's\n")
    await append(home, "second", [UserInput(goal="another"), Artifact(name="b.txt", ref=other)])
    # A state snapshot large enough that its pages are blobs of their own.
    notes = [Note(note_id=f"n{i}", kind=NoteKind.FINDING, text="x" * 200) for i in range(400)]
    await append(home, "second", notes)
    events_store = home.open_event_store()
    state = fold(await events_store.read("second"))
    root, _ = write_snapshot(state, store)
    await events_store.close()
    pages = {p.name for p in (home.artifacts_dir / "blobs").glob("*/*")} - named - {other.sha256, root.sha256}
    assert len(pages) >= 2, "the snapshot's pages were inlined: the test would not see them"
    for sha256 in pages | {root.sha256}:
        os.utime(blob_path(home, sha256), (LONG_AGO, LONG_AGO))
    await append(
        home, "second", [StateSnapshot(ref=root, covers_seq=state.last_seq, fold_version=FOLD_VERSION)]
    )
    orphans = {put_old(store, f"orphan {i}\n".encode()).sha256 for i in range(3)}

    collected = await collect(home)

    assert {item.path.name for item in collected.removed} == orphans
    assert {item.kind for item in collected.removed} == {"orphan blob"}
    kept = {p.name for p in (home.artifacts_dir / "blobs").glob("*/*")}
    assert kept == named | pages | {other.sha256, root.sha256}
    assert collected.named == len(kept) and collected.notes == []
    # The snapshot still loads whole: none of its pages went.
    events_store = home.open_event_store()
    loaded = await load_state(events_store, store, "second")
    await events_store.close()
    assert loaded.snapshot_seq is not None and loaded.passed_over == []
    assert len(list(loaded.state.notes.items())) == 400


async def test_what_was_written_since_a_live_attempt_started_is_kept(tmp_path: Path) -> None:
    home = LocalHome(tmp_path / "home")
    store = home.open_artifact_store()
    await append(home, "live", [UserInput(goal="running")])
    attempt = subprocess.Popen(["sleep", "120"])  # the live attempt's process
    try:
        events = home.open_event_store()
        await events.acquire_lease("live", f"local:{attempt.pid}@{process_start(attempt.pid)}")
        await events.close()
        time.sleep(MARGIN_S + 0.5)
        # Stored since the attempt started, though before the collection did by more than its
        # margin: what an attempt writes before it records the event naming it.
        written = time.time() - MARGIN_S - 0.2
        fresh = store.put(b"stored by the attempt, its event not yet recorded\n")
        partial = home.artifacts_dir / "tmp" / "being-written.partial"
        partial.write_bytes(b"half")
        for path in (blob_path(home, fresh.sha256), partial):
            os.utime(path, (written, written))
        old = put_old(store, b"an orphan from before this attempt\n")

        collected = await collect(home)
    finally:
        attempt.kill()
        attempt.wait()

    assert [item.path.name for item in collected.removed] == [old.sha256]
    assert blob_path(home, fresh.sha256).exists() and partial.exists()
    assert collected.live_attempt and collected.notes == []


async def test_storing_bytes_that_are_there_already_makes_them_new_again(tmp_path: Path) -> None:
    """A writer about to name an old orphan stores it again: the collection must see it as new."""
    home = LocalHome(tmp_path / "home")
    store = home.open_artifact_store()
    assert isinstance(store, FilesystemArtifactStore)
    await append(home, "live", [UserInput(goal="running")])
    events = home.open_event_store()
    await events.acquire_lease("live", this_holder())
    await events.close()
    again = put_old(store, b"stored long ago, stored again now\n")
    store.put(b"stored long ago, stored again now\n")

    collected = await collect(home)

    assert collected.removed == [] and blob_path(home, again.sha256).exists()


async def test_a_record_that_cannot_be_read_refuses_the_collection(tmp_path: Path) -> None:
    home = LocalHome(tmp_path / "home")
    store = home.open_artifact_store()
    await append(home, "damaged", [UserInput(goal="a"), UserInput(goal="b")])
    orphan = put_old(store, b"would be an orphan\n")
    conn = sqlite3.connect(home.events_db, isolation_level=None)
    conn.execute("UPDATE events SET event_json = replace(event_json, '\"b\"', '\"c\"') WHERE seq = 2")
    conn.close()

    with pytest.raises(RecordCorrupt) as refused:  # as every command says it (belay.local.record)
        await collect(home)

    assert blob_path(home, orphan.sha256).exists()
    assert refused.value.session_id == "damaged" and refused.value.seq == 2


def test_the_blobs_are_named_by_their_content(tmp_path: Path) -> None:
    # The collection reads a blob's name as its address: a blob stored under another name is none.
    store = FilesystemArtifactStore(tmp_path / "artifacts")
    ref = store.put(b"x")
    assert ref.sha256 == hashlib.sha256(b"x").hexdigest() and store.blob_path(ref.sha256).is_file()
