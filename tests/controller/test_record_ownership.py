"""Whose record it is, on the real SQLite store: a record's id names its namespace, a record is
bound to the uid the operator wrote it for, and a record under its bare name (before records were
keyed by namespace) is moved to its session's key once, only when it is the session's or the spec
adopts it. The cluster's side: tests/controller/test_record_ownership_cluster.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from belay.api.agentsession import AgentSession
from belay.controller.desired import harness_pod
from belay.controller.harness_pod import session_from_environment
from belay.controller.names import record_id
from belay.controller.ownership import (
    adoption_write,
    belongs_to,
    move_legacy_record,
    owner_after,
)
from belay.controller.record import request_write
from belay.controller.settings import OperatorSettings
from belay.journal.events import Actor, EventDraft, Lifecycle, LifecycleKind, Note, NoteKind, UserInput
from belay.journal.state import EMPTY
from belay.stores.base import EventStore
from belay.stores.sqlite import SqliteEventStore
from tests.controller.sessions import EXAMPLE_MANIFEST, REF, spec_with

NAME = "parser-fix"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    opened = SqliteEventStore(tmp_path / "events.db")
    try:
        yield opened
    finally:
        await opened.close()


async def operator_record(store: EventStore, key: str, uid: str) -> None:
    """A record as the operator starts it for the AgentSession `uid`: its request, then an attempt."""
    request = request_write(uid, 1, spec_with(), EMPTY)
    assert request is not None
    await store.append(key, list(request.drafts), idempotency_key=request.idempotency_key)
    await store.append(key, [EventDraft(payload=Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1))])


def test_sessions_of_one_name_in_two_namespaces_have_two_records_and_neither_is_a_bare_name() -> None:
    ids = {record_id("team-a", NAME), record_id("team-b", NAME), record_id("team-a", "b-" + NAME)}
    assert len(ids) == 3
    assert NAME not in ids
    # A '-' in either part cannot make two sessions' ids meet.
    assert record_id("a-b", "c") != record_id("a", "b-c")


async def test_a_record_belongs_to_the_uid_the_operator_recorded_its_request_for(store: EventStore) -> None:
    key = record_id("team-a", NAME)
    await operator_record(store, key, "uid-1")
    owner = owner_after(await store.read(key))
    assert owner == "uid-1"
    assert belongs_to(owner, "uid-1", await store.last_seq(key))
    assert not belongs_to(owner, "uid-2", await store.last_seq(key))
    # An empty record is the session's to start; one bound to nobody was written by someone else.
    assert belongs_to(None, "uid-2", 0)
    assert not belongs_to(None, "uid-2", 1)


async def test_belay_runs_request_binds_nothing_and_an_adoption_binds_the_record_anew(
    store: EventStore,
) -> None:
    key = record_id("team-a", NAME)
    person = Actor(kind="user", name="someone")
    await store.append(
        key, [EventDraft(payload=UserInput(goal="g"), actor=person)], idempotency_key=f"request/{NAME}"
    )
    assert owner_after(await store.read(key)) is None
    await operator_record(store, record_id("team-b", NAME), "uid-1")
    adopted = adoption_write("uid-2", key, "uid-1")
    await store.append(key, list(adopted.drafts), idempotency_key=adopted.idempotency_key)
    events = await store.read(key)
    assert owner_after(events) == "uid-2"
    assert owner_after(events[:1], "uid-1") == "uid-1"  # a write that binds nothing keeps the owner


async def test_a_bare_name_record_of_the_session_is_moved_once_with_its_history_and_its_lease(
    store: EventStore,
) -> None:
    await operator_record(store, NAME, "uid-1")
    for _ in range(3):
        await store.acquire_lease(NAME, "pod:old-harness")
    before = await store.read(NAME)
    key = record_id("team-a", NAME)

    assert await move_legacy_record(store, NAME, key, "uid-1", adopt=False)

    moved = await store.read(key)
    assert [(e.seq, e.payload, e.actor) for e in moved] == [(e.seq, e.payload, e.actor) for e in before]
    assert owner_after(moved) == "uid-1"
    assert await store.last_seq(NAME) == 0
    # The old key's lease was taken (fencing a harness still writing there) and carried over.
    lease = await store.current_lease(key)
    assert lease is not None and lease.number >= 4
    # Once: a second look finds nothing to move and changes nothing.
    assert await move_legacy_record(store, NAME, key, "uid-1", adopt=False)
    assert await store.last_seq(key) == len(before)


async def test_a_record_that_predates_the_binding_is_moved_to_the_first_session_that_takes_it_up(
    store: EventStore,
) -> None:
    await store.append(NAME, [EventDraft(payload=UserInput(goal="g"))])
    assert await move_legacy_record(store, NAME, record_id("team-b", NAME), "uid-9", adopt=False)
    assert owner_after(await store.read(record_id("team-b", NAME))) == "uid-9"
    assert await store.last_seq(NAME) == 0


async def test_a_bare_name_record_of_another_uid_is_left_unless_the_spec_adopts_it(store: EventStore) -> None:
    await operator_record(store, NAME, "uid-1")
    key = record_id("team-a", NAME)
    assert not await move_legacy_record(store, NAME, key, "uid-2", adopt=False)
    assert await store.last_seq(key) == 0
    assert await store.last_seq(NAME) == 2

    assert await move_legacy_record(store, NAME, key, "uid-2", adopt=True)
    assert owner_after(await store.read(key)) == "uid-2"
    assert await store.last_seq(NAME) == 0


async def test_a_move_cut_short_before_the_old_key_went_is_finished(store: EventStore) -> None:
    await operator_record(store, NAME, "uid-1")
    key = record_id("team-a", NAME)
    assert await move_legacy_record(store, NAME, key, "uid-1", adopt=False)
    # As if the old key's deletion had not happened: the old record back under the bare name.
    await operator_record(store, NAME, "uid-1")
    assert await move_legacy_record(store, NAME, key, "uid-1", adopt=False)
    assert await store.last_seq(NAME) == 0
    assert await store.last_seq(key) == 2


async def test_a_session_with_a_record_of_its_own_leaves_a_bare_name_record_where_it_is(
    store: EventStore,
) -> None:
    key = record_id("team-a", NAME)
    await operator_record(store, key, "uid-1")
    await store.append(NAME, [EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="old"))])
    assert await move_legacy_record(store, NAME, key, "uid-1", adopt=False)
    assert await store.last_seq(NAME) == 1
    assert await store.last_seq(key) == 2


def test_a_harness_pod_works_on_the_record_of_its_namespace_and_name() -> None:
    """The environment the operator gives a harness pod, read as the pod reads it."""

    def pod_session(namespace: str) -> AgentSession:
        pod = harness_pod(replace(REF, namespace=namespace), spec_with(), OperatorSettings(), 1)
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
        return session_from_environment(env)

    sessions = [pod_session("team-a"), pod_session("team-b")]
    assert [s.session_id for s in sessions] == [record_id("team-a", REF.name), record_id("team-b", REF.name)]
    assert [s.metadata.name for s in sessions] == [REF.name, REF.name]
    # The session on another executor (as a recorded move makes it) keeps its record.
    moved = sessions[0].on_executor(EXAMPLE_MANIFEST["spec"]["executor"])
    assert moved.session_id == sessions[0].session_id
