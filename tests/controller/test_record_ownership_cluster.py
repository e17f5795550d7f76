"""Whose record it is, with the operator against the real control plane and a real etcd, watching
two namespaces: sessions of one name in two namespaces have a record each, and `retention: Delete`
of one leaves the other's; a session deleted with its record retained and created again (a new
uid) is refused its predecessor's record (`RecordBelongsToAnother`, nothing appended, nothing
deleted) until its spec adopts it; `forkFrom` never reaches another namespace's session; a record
under its bare name (written before records were keyed by namespace) is moved to its session's key
once. No node runs the pods: every session here stays Pending or ends from its record alone."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller.names import record_id
from belay.controller.ownership import owner_after
from belay.controller.record import request_write
from belay.controller.settings import OperatorSettings
from belay.journal.events import (
    Checkpoint,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    UserInput,
    Verification,
)
from belay.journal.state import EMPTY, fold
from belay.stores.base import EventStore
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess, agentsession_status, kubectl_json, wait_for
from tests.controller.sessions import pending_session, spec_with
from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until_async

pytestmark = pytest.mark.testenv

TEAM_A = "belay-records-a"
TEAM_B = "belay-records-b"
NAME = "parser-fix"


@pytest.fixture(scope="module")
def two_namespaces(kube: ControlPlane) -> ControlPlane:
    install_crds(kube)
    for namespace in (TEAM_A, TEAM_B):
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
        }
        kube.kubectl("apply", "-f", "-", input=json.dumps(body))
    return kube


@pytest.fixture
def events_url(etcd_endpoint: str) -> str:
    return f"etcd://{etcd_endpoint.removeprefix('http://')}/belay-records-{secrets.token_hex(4)}"


@pytest.fixture
async def store(events_url: str) -> AsyncIterator[EventStore]:
    opened = open_event_store(events_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def operator(two_namespaces: ControlPlane, events_url: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(
        event_store=events_url, artifact_store=f"file://{tmp_path / 'artifacts'}", image_pull_policy="Never"
    )
    process = OperatorProcess(
        two_namespaces, TEAM_A, settings, tmp_path / "operator.log", more_namespaces=[TEAM_B]
    ).start()
    try:
        yield process
    finally:
        process.stop()


def session(name: str, namespace: str, goal: str, **spec: Any) -> dict[str, Any]:
    manifest = pending_session(name, namespace, goal)
    manifest["spec"].update(spec)
    return manifest


def apply(kube: ControlPlane, *manifests: dict[str, Any]) -> None:
    kube.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests})
    )


def delete(kube: ControlPlane, name: str, namespace: str) -> None:
    kube.kubectl("delete", "agentsession", name, "-n", namespace, "--timeout=120s")


def uid_of(kube: ControlPlane, name: str, namespace: str) -> str:
    return str(kubectl_json(kube, "get", "agentsession", name, "-n", namespace)["metadata"]["uid"])


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def harness_pods(kube: ControlPlane, name: str, namespace: str) -> list[str]:
    listed = kubectl_json(
        kube, "get", "pods", "-n", namespace, "-l", f"belay.dev/session={name},belay.dev/component=harness"
    )
    return [p["metadata"]["name"] for p in listed.get("items", [])]


async def records_by_goal(store: EventStore) -> dict[str, str]:
    """Every record in the store, by the goal its request asks."""
    found = {}
    for record in await store.list_sessions():
        goal = fold(await store.read(record)).request.goal
        if goal:
            found[goal] = record
    return found


async def test_sessions_of_one_name_in_two_namespaces_keep_a_record_each_and_retention_deletes_only_its_own(
    two_namespaces: ControlPlane, operator: OperatorProcess, store: EventStore
) -> None:
    kube = two_namespaces
    deleted = {"record": "Delete", "artifacts": "Delete"}
    apply(
        kube,
        session(NAME, TEAM_A, "team a's goal", retention=deleted),
        session(NAME, TEAM_B, "team b's goal"),
    )

    records = await wait_until_async(
        lambda: records_by_goal(store),
        "a record for each namespace's session",
        until=lambda found: {"team a's goal", "team b's goal"} <= set(found),
        timeout=60,
        interval=0.3,
        describe=lambda: operator.log()[-4000:],
    )
    assert records["team a's goal"] != records["team b's goal"]
    kept = await store.read(records["team b's goal"])
    assert owner_after(kept) == uid_of(kube, NAME, TEAM_B)
    for namespace in (TEAM_A, TEAM_B):
        wait_for(lambda n=namespace: harness_pods(kube, NAME, n), f"the harness pod in {namespace}")

    delete(kube, NAME, TEAM_A)

    left = await records_by_goal(store)
    assert "team a's goal" not in left
    assert left["team b's goal"] == records["team b's goal"]
    assert await store.read(records["team b's goal"]) == kept
    status = agentsession_status(kube, TEAM_B, NAME)
    assert condition(status, "Stalled").get("status") != "True", status
    delete(kube, NAME, TEAM_B)


async def test_a_session_created_again_is_refused_its_predecessors_record_until_its_spec_adopts_it(
    two_namespaces: ControlPlane, operator: OperatorProcess, store: EventStore
) -> None:
    kube = two_namespaces
    name, key = "again", record_id(TEAM_A, "again")
    apply(kube, session(name, TEAM_A, "the first session's goal"))
    first_uid = uid_of(kube, name, TEAM_A)
    await wait_until_async(
        lambda: store.last_seq(key), "the first request", until=bool, timeout=60, interval=0.3
    )
    delete(kube, name, TEAM_A)
    before = await store.read(key)
    assert owner_after(before) == first_uid

    # Created again, with `retention: Delete`: a new uid, refused; nothing recorded, no pod.
    apply(kube, session(name, TEAM_A, "the second session's goal", retention={"record": "Delete"}))
    status = wait_for(
        lambda: (
            (s := agentsession_status(kube, TEAM_A, name))
            and condition(s, "Stalled").get("status") == "True"
            and s
        ),
        "the refusal",
        timeout=60,
        describe=lambda: operator.log()[-4000:],
    )
    stalled = condition(status, "Stalled")
    assert stalled["reason"] == "RecordBelongsToAnother"
    assert first_uid in stalled["message"] and "spec.adoptRecord" in stalled["message"]
    assert condition(status, "Ready")["status"] == "False"
    assert await store.read(key) == before
    assert harness_pods(kube, name, TEAM_A) == []
    # Deleting the refused session deletes nothing of a record that is not its own.
    delete(kube, name, TEAM_A)
    assert await store.read(key) == before

    # Created again, adopting the record: it is bound to the new uid, and the session goes on.
    apply(kube, session(name, TEAM_A, "the third session's goal", adoptRecord=True))
    third_uid = uid_of(kube, name, TEAM_A)
    adopted = await wait_until_async(
        lambda: store.read(key),
        "the adoption",
        until=lambda events: owner_after(events) == third_uid,
        timeout=60,
        interval=0.3,
        describe=lambda: operator.log()[-4000:],
    )
    assert [e.payload for e in adopted[: len(before)]] == [e.payload for e in before]
    wait_for(lambda: harness_pods(kube, name, TEAM_A), "the adopted session's harness pod")
    assert (
        condition(agentsession_status(kube, TEAM_A, name), "Stalled").get("reason")
        != "RecordBelongsToAnother"
    )
    delete(kube, name, TEAM_A)


def completed(goal: str, *middle: Any) -> list[EventDraft]:
    payloads = [
        UserInput(goal=goal),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
        *middle,
        Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, attempt=1, reason="DeliverablesPublished"),
        Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=1),
    ]
    return [EventDraft(payload=p) for p in payloads]


def verified_checkpoint() -> Checkpoint:
    return Checkpoint(
        checkpoint_id="worker/first",
        covers_seq=2,
        subagent="worker",
        next_step="second",
        verification=Verification(command="true", status="passed", exit_code=0),
    )


async def test_a_bare_name_record_moves_to_its_session_once(
    two_namespaces: ControlPlane, operator: OperatorProcess, store: EventStore
) -> None:
    kube = two_namespaces
    goal = "the source's goal"
    # Written under the bare name, as records were before they were keyed by namespace.
    await store.append("source", completed(goal, verified_checkpoint()))
    legacy = await store.read("source")
    # One bound to another AgentSession's uid, which no session here may take.
    other = request_write("uid-of-someone-else", 1, spec_with(), EMPTY)
    assert other is not None
    await store.append("theirs", list(other.drafts), idempotency_key=other.idempotency_key)

    apply(kube, session("source", TEAM_A, goal), session("theirs", TEAM_A, "a goal of its own"))
    key = record_id(TEAM_A, "source")
    moved = await wait_until_async(
        lambda: store.read(key),
        "the move",
        until=lambda events: len(events) >= len(legacy),
        timeout=60,
        interval=0.3,
        describe=lambda: operator.log()[-4000:],
    )
    assert [(e.seq, e.payload) for e in moved] == [(e.seq, e.payload) for e in legacy]
    assert owner_after(moved) == uid_of(kube, "source", TEAM_A)
    assert await store.last_seq("source") == 0
    wait_for(
        lambda: agentsession_status(kube, TEAM_A, "source").get("phase") == "Succeeded",
        "the moved record's session to read as Succeeded",
        describe=lambda: operator.log()[-4000:],
    )
    # The record bound to another uid stays where it is; the session starts its own.
    theirs = await wait_until_async(
        lambda: store.read(record_id(TEAM_A, "theirs")),
        "its own record",
        until=bool,
        timeout=60,
        interval=0.3,
    )
    assert fold(theirs).request.goal == "a goal of its own"
    assert await store.last_seq("theirs") == 1

    # Once: an operator started again moves nothing a second time; the session goes on on its
    # record (an edit of its request is recorded there, after the moved history).
    operator.stop()
    operator.start()
    patch = json.dumps({"spec": {"request": {"goal": "the source's goal, amended"}}})
    kube.kubectl("patch", "agentsession", "source", "-n", TEAM_A, "--type=merge", "-p", patch)
    after = await wait_until_async(
        lambda: store.read(key),
        "the scope change",
        until=lambda events: len(events) > len(moved),
        timeout=60,
        interval=0.3,
        describe=lambda: operator.log()[-4000:],
    )
    assert after[: len(moved)] == moved
    assert [e.type for e in after[len(moved) :]] == ["scope_change"]
    assert await store.last_seq("source") == 0
    for name in ("source", "theirs"):
        delete(kube, name, TEAM_A)


async def test_fork_from_reaches_only_a_session_of_its_own_namespace(
    two_namespaces: ControlPlane, operator: OperatorProcess, store: EventStore
) -> None:
    kube = two_namespaces
    goal = "the fork source's goal"
    apply(kube, session("fork-source", TEAM_A, goal))
    key = record_id(TEAM_A, "fork-source")
    await wait_until_async(lambda: store.last_seq(key), "its request", until=bool, timeout=60, interval=0.3)
    # The source's harness (no node runs it here) records a verified checkpoint.
    checkpoint = verified_checkpoint().model_copy(update={"covers_seq": 1})
    await store.append(key, [EventDraft(payload=checkpoint)])

    fork_a = session("fork-a", TEAM_A, goal, forkFrom={"session": "fork-source"})
    fork_b = session("fork-b", TEAM_B, goal, forkFrom={"session": "fork-source"})
    apply(kube, fork_a, fork_b)
    forked = wait_for(
        lambda: agentsession_status(kube, TEAM_A, "fork-a").get("forkedFrom"),
        "the fork in the source's namespace",
        timeout=60,
        describe=lambda: operator.log()[-4000:],
    )
    assert forked["checkpointId"] == "worker/first"
    refused = wait_for(
        lambda: (
            (s := agentsession_status(kube, TEAM_B, "fork-b")) and condition(s, "Stalled").get("reason") and s
        ),
        "the fork from another namespace to stall",
        timeout=60,
        describe=lambda: operator.log()[-4000:],
    )
    assert condition(refused, "Stalled")["reason"] == "ForkSourceMissing"
    assert "forkedFrom" not in refused
    assert await store.last_seq(record_id(TEAM_B, "fork-b")) == 0
    assert harness_pods(kube, "fork-b", TEAM_B) == []
    for name, namespace in (("fork-a", TEAM_A), ("fork-b", TEAM_B), ("fork-source", TEAM_A)):
        delete(kube, name, namespace)
