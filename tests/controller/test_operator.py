"""The operator against the real control plane, with a local stand-in for the kubelet: an
AgentSession applied with kubectl gets its pods, Services and NetworkPolicies (admitted under the
"restricted" Pod Security level), its status follows the record, a deleted harness pod leads to a
new attempt with a higher lease that completes without repeating a completed step, and deleting the
session removes its pods but keeps its record."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from belay.harness.loop import FAULT_ENV
from belay.journal.events import Event, EventDraft, LifecycleKind, Note, NoteKind, TaskEvent
from belay.journal.state import fold
from belay.local.tickets import TicketService
from belay.stores.base import StaleLease
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import REPO_ROOT, install_crds
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-e2e"
SESSION = "parser-fix"
# The first attempt stops itself right after the implementer's `fix` checkpoint; the test then
# deletes its pod, as a node failure or an eviction would.
FAULT_POINT = "checkpoint:implementer/fix"


def cluster_manifest() -> dict[str, Any]:
    """The example session, with the plan and inputs at absolute paths the local pods can read."""
    manifest = copy.deepcopy(EXAMPLE_MANIFEST)
    example = REPO_ROOT / "examples/parser-fix"
    manifest["metadata"] = {"name": SESSION, "namespace": NAMESPACE}
    manifest["spec"]["executor"]["plan"] = str(example / "plan.yaml")
    for sub in manifest["spec"]["subagents"]:
        for item in sub["inputs"]:
            item["source"] = str(example / item["source"])
    return manifest


@pytest.fixture(scope="module")
def e2e_cluster(kube: ControlPlane) -> ControlPlane:
    install_crds(kube)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    return kube


@pytest.fixture
def stores(tmp_path: Path) -> tuple[str, str]:
    return f"sqlite://{tmp_path / 'events.db'}", f"file://{tmp_path / 'artifacts'}"


@pytest.fixture
async def tickets(tmp_path: Path) -> AsyncIterator[str]:
    service = await TicketService(tmp_path / "tickets.json").start()
    try:
        yield service.url
    finally:
        await service.stop()


@pytest.fixture
def operator(e2e_cluster: ControlPlane, stores: tuple[str, str], tmp_path: Path) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(event_store=stores[0], artifact_store=stores[1], image_pull_policy="Never")
    process = OperatorProcess(e2e_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


def pods(kube: ControlPlane) -> dict[str, dict[str, Any]]:
    listed = kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={SESSION}")
    return {p["metadata"]["name"]: p for p in listed.get("items", [])}


def session_status(kube: ControlPlane) -> dict[str, Any]:
    return kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, SESSION).get("status") or {}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def steps_run_after(events: list[Event], seq: int) -> set[str]:
    return {
        e.payload.task_id
        for e in events
        if isinstance(e, TaskEvent)
        and e.seq > seq
        and e.payload.status == "running"
        and "/" in e.payload.task_id
    }


async def test_session_reconciled_recovers_from_a_lost_harness_and_completes(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    tmp_path: Path,
) -> None:
    kube = e2e_cluster

    def pod_env(pod: dict[str, Any]) -> dict[str, str]:
        labels = pod["metadata"]["labels"]
        if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_HARNESS:
            return {}
        env = {"BELAY_TICKETS_URL": tickets}
        if labels.get(names.LABEL_ATTEMPT) == "0":
            env[FAULT_ENV] = FAULT_POINT
        return env

    describe = lambda: f"operator log:\n{operator.log()[-4000:]}\npods: {sorted(pods(kube))}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=pod_env) as kubelet:
        kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest()))

        # Children: per-attempt pods, a Service per sandbox, four NetworkPolicies.
        first = wait_for(
            lambda: len(pods(kube)) == 3 and pods(kube), "the first attempt's pods", describe=describe
        )
        assert sorted(first) == [
            "parser-fix-harness-0",
            "parser-fix-sbx-implementer-0",
            "parser-fix-sbx-researcher-0",
        ]
        session_uid = kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, SESSION)["metadata"]["uid"]
        for pod in first.values():
            assert pod["metadata"]["ownerReferences"][0]["uid"] == session_uid
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        services = kubectl_json(kube, "get", "services", "-n", NAMESPACE)["items"]
        assert sorted(s["metadata"]["name"] for s in services) == [
            "sbx-parser-fix-implementer",
            "sbx-parser-fix-researcher",
        ]
        policies = kubectl_json(kube, "get", "networkpolicies", "-n", NAMESPACE)["items"]
        assert len(policies) == 4
        # The namespace enforces "restricted": the pods above were admitted, a plain one is not.
        plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": NAMESPACE}}
        plain["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
        refused = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(plain), check=False)
        assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr

        # The first attempt runs until the fault point, then the test takes its pod away.
        store = open_event_store(stores[0])
        try:

            async def reached_fault() -> bool:
                return any(
                    getattr(e.payload, "checkpoint_id", None) == "implementer/fix"
                    for e in await store.read(SESSION)
                )

            for _ in range(600):
                if await reached_fault():
                    break
                await asyncio.sleep(0.3)
            assert await reached_fault(), describe()
            running = session_status(kube)
            assert running["phase"] == "Running"
            assert condition(running, "Ready")["status"] == "True"  # type: ignore[index]
            assert running["harness"]["pod"] == "parser-fix-harness-0"
            table = kube.kubectl("get", "agentsessions", "-n", NAMESPACE).stdout
            assert table.splitlines()[0].split() == ["NAME", "PHASE", "WAITING", "ON", "STEP", "AGE"]
            assert "Running" in table.splitlines()[1]

            old_lease = (await store.current_lease(SESSION)).number  # type: ignore[union-attr]
            before_loss = fold(await store.read(SESSION))
            done_before = {
                t.task_id
                for t in before_loss.tasks.values()
                if t.status in ("done", "verified") and "/" in t.task_id
            }
            kube.kubectl("delete", "pod", "-n", NAMESPACE, "parser-fix-harness-0", "--wait=false")

            # A new attempt: a higher lease, Recovering while it restores, new pods.
            recovering = wait_for(
                lambda: (s := session_status(kube)).get("harnessLost", 0) >= 1 and s,
                "harness lost",
                describe=describe,
            )
            assert recovering["harness"]["attempt"] > old_lease
            seen_recovering = condition(recovering, "Recovering")
            assert seen_recovering is not None

            # Restarting the operator loses nothing: the new process folds the record and goes on.
            operator.stop()
            operator.start()

            # The old attempt is fenced: its lease no longer appends.
            with pytest.raises(StaleLease):
                await store.append(
                    SESSION,
                    [EventDraft(payload=Note(note_id="zombie", kind=NoteKind.FINDING, text="late write"))],
                    lease=old_lease,
                )

            done = wait_for(
                lambda: (s := session_status(kube)).get("phase") in ("Succeeded", "Failed") and s,
                "the session to end",
                timeout=600,
                describe=describe,
            )
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
            assert condition(done, "Ready")["reason"] == "Completed"  # type: ignore[index]
            assert condition(done, "Recovering")["status"] == "False"  # type: ignore[index]
            assert condition(done, "Stalled") is None

            events = await store.read(SESSION)
            state = fold(events)
            lost_seq = next(
                e.seq
                for e in events
                if e.type == "lifecycle" and e.payload.kind == LifecycleKind.HARNESS_LOST  # type: ignore[union-attr]
            )
            assert done_before, "the fault point comes after completed steps"
            assert steps_run_after(events, lost_seq).isdisjoint(done_before)
            assert state.lifecycle.lease > old_lease
            assert {"fix.patch", "report.md"} <= set(state.deliverables)
            # The publish approval given in the spec reached the harness, bound to the payload hash.
            grant = EXAMPLE_MANIFEST["spec"]["approvals"][0]
            approval = state.approvals[f"approve-{grant['operationId']}"]
            assert approval.decision == "granted" and approval.payload_sha256 == grant["payloadSha256"]
        finally:
            await store.close()

        assert "parser-fix-harness-0" in kubelet.started_names
        assert any(
            n.startswith("parser-fix-harness-") and n != "parser-fix-harness-0" for n in kubelet.started_names
        )

        # Checkpoints mirrored as objects, owned by the session.
        checkpoints = kubectl_json(kube, "get", "checkpoints", "-n", NAMESPACE)["items"]
        ids = {c["spec"]["checkpointId"] for c in checkpoints}
        assert {"implementer/fix", "researcher/reproduce"} <= ids
        assert all(c["metadata"]["ownerReferences"][0]["uid"] == session_uid for c in checkpoints)

        # Transitions were posted as Kubernetes Events.
        events_listed = kubectl_json(
            kube, "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={SESSION}"
        )["items"]
        reasons = {e["reason"] for e in events_listed}
        assert "PhaseChanged" in reasons

        # Deleting the session: the finalizer removes its pods; the record stays.
        kube.kubectl("delete", "agentsession", "-n", NAMESPACE, SESSION, "--timeout=120s")
        wait_for(lambda: not pods(kube) or None, "the pods to go", describe=describe)
        store = open_event_store(stores[0])
        try:
            assert await store.last_seq(SESSION) == state.last_seq
        finally:
            await store.close()
