"""`kubectl belay sessions` in the test cluster, run by a person whose Role grants AgentSession
access only: five sessions standing in five places (moving, waiting on the user, on an external
condition, ready for review, interrupted), their records in a real event store, their status the
operator's projection of those records (`session_status_patch`, applied to the status subresource
as the operator applies it, with the lease and its renewal read from the store as the operator
reads them). No operator loop runs here: it would start harness pods, and the test needs each
session to stay where its record puts it.

In a cluster the operator, not a person, replaces an attempt that stopped: the interrupted
session's lost attempt is recorded and fenced as the operator does, and nothing a person runs
moves it on."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.kube import KubeClient, load_api_client
from belay.controller.reconciler import operator_liveness
from belay.controller.record import harness_lost_write
from belay.controller.status import session_status_patch
from belay.journal import commands
from belay.journal.events import Actor, Approval, EventDraft
from belay.journal.state import fold
from belay.stores.base import ArtifactStore, EventStore
from belay.stores.factory import open_artifact_store, open_event_store
from tests.api.kubehelpers import install_crds
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.controller.sessions_only_user import kubectl_belay, sessions_only_kubeconfig
from tests.fleet_records import EXPECTED, SUMMARY, write_five_sessions
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-fleet"
INTERRUPTED = "fleet-interrupted"


def holder(session: str, alive: bool) -> str:
    return f"pod:{session}-harness-1"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[EventStore, ArtifactStore, str]]:
    events = open_event_store(f"sqlite://{tmp_path / 'events.db'}")
    artifacts = open_artifact_store(f"file://{tmp_path / 'artifacts'}")
    yield events, artifacts, f"file://{tmp_path / 'artifacts'}"
    asyncio.run(events.close())


def manifest(name: str, labels: dict[str, str], namespace: str = NAMESPACE) -> dict[str, Any]:
    session = copy.deepcopy(EXAMPLE_MANIFEST)
    session["metadata"] = {"name": name, "namespace": namespace, "labels": labels}
    session["spec"]["request"] = {"goal": f"the goal of {name}"}
    return session


async def project(
    kube: KubeClient, store: EventStore, artifacts: ArtifactStore, session: str, namespace: str = NAMESPACE
) -> None:
    """One status write, as the operator's pass ends: the record folded, the lease read, the
    status applied to the subresource."""
    state = fold(await store.read(session))
    status = session_status_patch(
        state,
        previous_status=None,
        generation=1,
        now=datetime.now(UTC),
        locate=lambda ref: artifacts.location(ref.sha256),
        liveness=await operator_liveness(store, session),
    )
    await asyncio.to_thread(kube.apply_status, namespace, session, status.to_status())


def cluster_expected() -> dict[str, dict[str, Any]]:
    """The local expectations, with each command spelled for kubectl; the interrupted session
    shows the operator recovering it."""
    expected = {}
    for name, e in EXPECTED.items():
        expected[name] = {
            "phase": e.phase,
            "bucket": e.bucket,
            "waits_on_user": list(e.user),
            "waits_on_external": list(e.external),
            "ready_for_review": list(e.review),
            "command": commands.in_cluster(e.command) if e.command else None,
        }
    expected[INTERRUPTED].update(phase="Recovering", command=None)
    return expected


def rows_of(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    fields = ("phase", "bucket", "waits_on_user", "waits_on_external", "ready_for_review", "command")
    return {row["session"]: {f: row[f] for f in fields} for row in view["sessions"]}


async def test_kubectl_belay_sessions_shows_five_states_to_a_user_with_agentsession_access_only(
    kube: ControlPlane, stores: tuple[EventStore, ArtifactStore, str], tmp_path: Path
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    config_file = sessions_only_kubeconfig(kube, NAMESPACE, tmp_path / "sessions-only.kubeconfig")
    store, artifacts, _ = stores
    client = KubeClient(load_api_client(str(kube.kubeconfig)), field_manager=names.FIELD_MANAGER)

    await write_five_sessions(store, artifacts, holder)
    uids = {}
    for name in EXPECTED:
        labels = {"belay.dev/objective": "release"} if name in ("fleet-approval", "fleet-review") else {}
        created = kube.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(manifest(name, labels)))
        uids[name] = json.loads(created.stdout)["metadata"]["uid"]
    # The operator found the interrupted attempt's pod gone: it records the loss and fences it.
    lost = harness_lost_write(uids[INTERRUPTED], 1, f"{INTERRUPTED}-harness-1", "no harness pod")
    await store.append(INTERRUPTED, list(lost.drafts), idempotency_key=lost.idempotency_key)
    await store.acquire_lease(INTERRUPTED, holder=names.FIELD_MANAGER)
    for name in EXPECTED:
        if name != INTERRUPTED:
            await store.renew_lease(name, 1)  # the live attempts prove they are alive
        await project(client, store, artifacts, name)

    listed = kubectl_belay(config_file, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    view = json.loads(listed.stdout)
    assert rows_of(view) == cluster_expected()
    assert view["summary"]["line"] == SUMMARY
    review = next(r for r in view["sessions"] if r["session"] == "fleet-review")
    assert review["deliverables"] == ["report.md"]
    assert all(r["last_event_age_s"] is not None and r["events"] > 0 for r in view["sessions"])

    # The table through a pipe: whole cells, the kubectl command last, the summary line.
    table = kubectl_belay(config_file, "sessions")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[-1] == SUMMARY and len(lines) == 2 + len(EXPECTED)
    approval_line = next(line for line in lines if line.startswith("fleet-approval "))
    assert approval_line.endswith("kubectl belay approve fleet-approval approve-worker.publish.1")

    # A label selector, evaluated by the apiserver.
    picked = json.loads(
        kubectl_belay(config_file, "sessions", "--json", "-l", "belay.dev/objective=release").stdout
    )
    assert sorted(r["session"] for r in picked["sessions"]) == ["fleet-approval", "fleet-review"]
    assert {r["objective"] for r in picked["sessions"]} == {"release"}

    # Every namespace: the admin may list them, and each command names its namespace; this
    # user's Role is one namespace's, and says so in one line.
    everywhere = kubectl_belay(kube.kubeconfig, "sessions", "-A", "--json")
    assert everywhere.returncode == 0, everywhere.stderr
    approval = next(r for r in json.loads(everywhere.stdout)["sessions"] if r["session"] == "fleet-approval")
    assert approval["namespace"] == NAMESPACE
    assert (
        approval["command"] == f"kubectl belay approve fleet-approval approve-worker.publish.1 -n {NAMESPACE}"
    )
    refused = kubectl_belay(config_file, "sessions", "-A")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: cannot list AgentSessions in every namespace: 403 Forbidden"
    ]

    # --watch prints again when a session moves on: the approval granted and projected.
    plugin = Path(sys.executable).with_name("kubectl-belay")
    watcher = subprocess.Popen(
        [str(plugin), "sessions", "--watch", "--json", "--kubeconfig", str(config_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        first = json.loads(watcher.stdout.readline())
        assert first["summary"]["waiting_on_you"] == 1
        granted = Approval(
            approval_id="approve-worker.publish.1",
            operation_id="worker.publish.1",
            payload_sha256="ab" * 32,
            granted=True,
            by="test",
        )
        await store.append(
            "fleet-approval", [EventDraft(payload=granted, actor=Actor(kind="user", name="test"))]
        )
        await store.renew_lease("fleet-approval", 1)
        await project(client, store, artifacts, "fleet-approval")
        second = json.loads(watcher.stdout.readline())
        row = next(r for r in second["sessions"] if r["session"] == "fleet-approval")
        assert (row["phase"], row["waits_on_user"], row["command"]) == ("Running", [], None)
        assert second["summary"]["waiting_on_you"] == 0 and second["summary"]["moving"] == 2
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
