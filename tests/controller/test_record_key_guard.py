"""A harness pod that holds another record key than its store's records were written with refuses
to start, in one line naming what to set, before it reads or writes the record: run as the harness
pod's process (`python -m belay.controller.harness_pod`) on a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from belay.controller import desired, names
from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.factory import open_event_store
from belay.stores.key_guard import IN_A_CLUSTER, guard_record_key
from tests.controller.sessions import REF, spec_with

WRITTEN_WITH = "w" * 40


async def written_record(path: Path) -> tuple[str, int]:
    """A store whose records were written under WRITTEN_WITH (and which keeps its fingerprint)."""
    store = open_event_store({"backend": "sqlite", "path": str(path), "record_key": WRITTEN_WITH})
    try:
        await guard_record_key(store, "the test's store", IN_A_CLUSTER)
        record = names.record_id(REF.namespace, REF.name)
        await store.append(record, [EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="x"))])
        return record, await store.last_seq(record)
    finally:
        await store.close()


def harness(
    tmp_path: Path, events: Path, record_key: str | None, **spec_changes: object
) -> subprocess.CompletedProcess[str]:
    tokens = tmp_path / "tokens"
    tokens.mkdir(exist_ok=True)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("BELAY_RECORD_KEY")}
    environment.update(
        {
            desired.ENV_SESSION: REF.name,
            desired.ENV_NAMESPACE: REF.namespace,
            desired.ENV_SESSION_SPEC: json.dumps(
                spec_with(**spec_changes).model_dump(mode="json", by_alias=True)
            ),
            desired.ENV_SANDBOX_ENDPOINTS: "{}",
            desired.ENV_SANDBOX_TOKEN_DIR: str(tokens),
            desired.ENV_EVENT_STORE: f"sqlite://{events}",
            desired.ENV_ARTIFACT_STORE: f"file://{tmp_path / 'artifacts'}",
        }
    )
    if record_key is not None:
        environment["BELAY_RECORD_KEY"] = record_key
    return subprocess.run(
        [sys.executable, "-m", "belay.controller.harness_pod"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_harness_with_another_key_or_none_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    events = tmp_path / "events.db"
    record, last_seq = await written_record(events)
    for held in ("n" * 40, None):  # a new key (a chart upgrade that made one), or none at all
        ran = harness(tmp_path, events, held)
        assert ran.returncode == 2, ran.stdout + ran.stderr
        [line] = ran.stderr.strip().splitlines()
        assert line.startswith("RecordKeyMismatch: "), line
        assert "stores.recordKey.existingSecret" in line
        assert WRITTEN_WITH not in line and "n" * 40 not in line
    store = open_event_store({"backend": "sqlite", "path": str(events), "record_key": WRITTEN_WITH})
    try:
        assert await store.last_seq(record) == last_seq  # nothing was written
        assert len(await store.read(record)) == last_seq  # and the record still reads whole
    finally:
        await store.close()


async def test_a_harness_of_a_session_on_its_own_stores_names_the_sessions_secret(tmp_path: Path) -> None:
    events = tmp_path / "events.db"
    await written_record(events)
    own = {"events": "etcd://etcd.team-a:2379", "artifacts": "s3://team-a", "secretRef": "team-stores"}
    ran = harness(tmp_path, events, "n" * 40, stores=own)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    [line] = ran.stderr.strip().splitlines()
    assert f"set BELAY_RECORD_KEY in Secret {REF.namespace}/team-stores" in line, line
    assert "stores.recordKey" not in line  # the chart's key is not this session's
