"""The operator against the real control plane, with a local stand-in for the kubelet: an
AgentSession applied with kubectl gets its pods, Services and NetworkPolicies (admitted under the
"restricted" Pod Security level), its status follows the record, a deleted harness pod leads to a
new attempt with a higher lease that completes without repeating a completed step, and deleting the
session removes its pods but keeps its record."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import secrets
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.desired import ENV_SANDBOX_ENDPOINTS
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from belay.harness.attempt import FAULT_ENV
from belay.harness.stopping import DRAIN_ENV, STOP_MARGIN_S
from belay.journal.events import (
    Checkpoint,
    Event,
    EventDraft,
    Lifecycle,
    LifecycleEvent,
    LifecycleKind,
    Note,
    NoteKind,
    TaskEvent,
    UserInput,
    Verification,
)
from belay.journal.state import SessionState, fold
from belay.lifetime import descendants
from belay.local.tickets import TicketService
from belay.stores.base import EventStore, StaleLease
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import REPO_ROOT, install_crds, token_kubeconfig
from tests.belay_cli import deliverables, is_stopped, steps_run_twice
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    OperatorProcess,
    agentsession_status,
    kubectl_json,
    wait_for,
    wait_for_session_end,
)
from tests.controller.service_proxy import ServiceProxy
from tests.controller.sessions import EXAMPLE_MANIFEST, record_with_a_gap
from tests.harness.example import run_example
from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until_async

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-e2e"
SESSION = "parser-fix"
# The first attempt stops itself right after the implementer's `fix` checkpoint; the test then
# deletes its pod, as a node failure or an eviction would.
FAULT_POINT = "checkpoint:implementer/fix"


def record_of(name: str = SESSION) -> str:
    """The record of the session `name` of the tests' namespace."""
    return names.record_id(NAMESPACE, name)


def cluster_manifest(name: str = SESSION) -> dict[str, Any]:
    """The example session, with the plan and inputs at absolute paths the local pods can read."""
    manifest = copy.deepcopy(EXAMPLE_MANIFEST)
    example = REPO_ROOT / "examples/parser-fix"
    manifest["metadata"] = {"name": name, "namespace": NAMESPACE}
    manifest["spec"]["executor"]["plan"] = str(example / "plan.yaml")
    for sub in manifest["spec"]["subagents"]:
        for item in sub["inputs"]:
            item["source"], item["hostPath"] = str(example / item["source"]), True
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
def tickets(tmp_path: Path) -> Iterator[str]:
    """The ticket service the example's tools call, on a loop of its own: the test's loop spends
    its time in blocking waits on kubectl."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    starting = TicketService(tmp_path / "tickets.json", TICKETS_TOKEN).start()
    service = asyncio.run_coroutine_threadsafe(starting, loop).result(30)
    try:
        yield service.url
    finally:
        asyncio.run_coroutine_threadsafe(service.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def operator(e2e_cluster: ControlPlane, stores: tuple[str, str], tmp_path: Path) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(event_store=stores[0], artifact_store=stores[1], image_pull_policy="Never")
    process = OperatorProcess(e2e_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


def pods(kube: ControlPlane, session: str = SESSION) -> dict[str, dict[str, Any]]:
    listed = kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={session}")
    return {p["metadata"]["name"]: p for p in listed.get("items", [])}


def session_status(kube: ControlPlane, session: str = SESSION) -> dict[str, Any]:
    return agentsession_status(kube, NAMESPACE, session)


# The credential the ticket service takes, which the cluster gives the harness pods.
TICKETS_TOKEN = "tickets-credential-" + secrets.token_hex(16)


def harness_env(
    tickets_url: str, fault_point: str | None = None
) -> Callable[[dict[str, Any]], dict[str, str]]:
    """What the cluster around a harness pod provides: the ticket service's address; and, for the
    first attempt when asked, the fault point where it stops itself."""

    def env(pod: dict[str, Any]) -> dict[str, str]:
        labels = pod["metadata"]["labels"]
        if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_HARNESS:
            return {}
        values = {"BELAY_TICKETS_URL": tickets_url, "BELAY_TICKETS_TOKEN": TICKETS_TOKEN}
        if fault_point and labels.get(names.LABEL_ATTEMPT) == "0":
            values[FAULT_ENV] = fault_point
        return values

    return env


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


async def wait_for_checkpoint(
    store: EventStore, record: str, checkpoint_id: str, describe: Callable[[], str], timeout: float = 180
) -> None:
    """Until the record holds the checkpoint (the harness stops itself right after the fault point)."""

    async def checkpoints() -> list[str | None]:
        return [getattr(e.payload, "checkpoint_id", None) for e in await store.read(record)]

    await wait_until_async(
        checkpoints,
        f"the checkpoint {checkpoint_id} in the record",
        until=lambda found: checkpoint_id in found,
        timeout=timeout,
        interval=0.3,
        describe=describe,
    )


def completed_steps(state: SessionState) -> set[str]:
    """Steps (subagent/step) done or verified so far."""
    return {t.task_id for t in state.tasks.values() if t.status in ("done", "verified") and "/" in t.task_id}


def harness_lost_seq(events: list[Event]) -> int:
    return next(
        e.seq
        for e in events
        if e.type == "lifecycle" and e.payload.kind == LifecycleKind.HARNESS_LOST  # type: ignore[union-attr]
    )


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
    pod_env = harness_env(tickets, FAULT_POINT)

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
            await wait_for_checkpoint(store, record_of(), "implementer/fix", describe)
            running = session_status(kube)
            assert running["phase"] == "Running"
            assert condition(running, "Ready")["status"] == "True"  # type: ignore[index]
            assert running["harness"]["pod"] == "parser-fix-harness-0"
            table = kube.kubectl("get", "agentsessions", "-n", NAMESPACE).stdout
            assert table.splitlines()[0].split() == ["NAME", "PHASE", "WAITING", "ON", "STEP", "AGE"]
            assert "Running" in table.splitlines()[1]

            old_lease = (await store.current_lease(record_of())).number  # type: ignore[union-attr]
            done_before = completed_steps(fold(await store.read(record_of())))
            # Frozen at the fault point, the harness cannot stop cleanly on the kubelet's SIGTERM:
            # it is killed when its (here short) grace period is over, a lost attempt.
            kube.kubectl(
                "delete", "pod", "-n", NAMESPACE, "parser-fix-harness-0", "--wait=false", "--grace-period=1"
            )

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
                    record_of(),
                    [EventDraft(payload=Note(note_id="zombie", kind=NoteKind.FINDING, text="late write"))],
                    lease=old_lease,
                )

            done = wait_for_session_end(kube, NAMESPACE, SESSION, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
            assert condition(done, "Ready")["reason"] == "Completed"  # type: ignore[index]
            assert condition(done, "Recovering")["status"] == "False"  # type: ignore[index]
            assert condition(done, "Stalled") is None

            events = await store.read(record_of())
            state = fold(events)
            assert done_before, "the fault point comes after completed steps"
            assert steps_run_after(events, harness_lost_seq(events)).isdisjoint(done_before)
            assert state.lifecycle.lease > old_lease
            assert {"fix.patch", "report.md"} <= set(state.deliverables)
            listed = {d["name"]: d for d in done["deliverables"]}
            patch = state.artifacts["fix.patch"].ref
            assert listed["fix.patch"]["sha256"] == patch.sha256
            assert patch.sha256 in listed["fix.patch"]["location"]
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
            assert await store.last_seq(record_of()) == state.last_seq
        finally:
            await store.close()


# Where the first attempt stops itself in the graceful-stop test: both subagents' first calls of a
# step are in flight.
STOP_POINT = "tool_request:implementer.fix.1"


async def test_a_harness_pod_deleted_gracefully_stops_cleanly_and_the_next_attempt_loses_nothing(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    tmp_path: Path,
) -> None:
    """`kubectl delete pod` of a running harness: the kubelet sends SIGTERM, the harness lets its
    calls in flight finish, records its clean stop and exits 143 within the pod's grace period; the
    operator starts the next attempt without recording a loss, and that attempt neither treats a
    finished call as an unknown outcome nor runs it again."""
    kube = e2e_cluster
    name = "graceful"
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}\npods: {sorted(pods(kube, name))}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    harness = f"{name}-harness-0"
    with LocalKubelet(
        api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets, STOP_POINT)
    ) as kubelet:
        kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(name)))
        store = open_event_store(stores[0])
        try:
            first = wait_for(
                lambda: harness in kubelet.pods and kubelet.pods[harness],
                "the harness pod",
                describe=describe,
            )
            spec = kubectl_json(kube, "get", "pod", "-n", NAMESPACE, harness)["spec"]
            grace = OperatorSettings.model_fields["stop_drain_s"].default + STOP_MARGIN_S
            assert spec["terminationGracePeriodSeconds"] == grace
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            assert float(env[DRAIN_ENV]) < grace
            wait_for(
                lambda: is_stopped_pod(first.process.pid),
                f"the harness to reach {STOP_POINT}",
                describe=describe,
            )

            kube.kubectl("delete", "pod", "-n", NAMESPACE, harness, "--wait=false")  # its grace period
            wait_for(lambda: pending_sigterm(first.process.pid), "the kubelet's SIGTERM", describe=describe)
            kubelet.send_signal(harness, signal.SIGCONT)  # it goes on from the fault point, then stops
            wait_for(
                lambda: harness in kubelet.exit_codes or None, "the harness pod to end", describe=describe
            )
            assert kubelet.exit_codes[harness] == 128 + signal.SIGTERM, kubelet.log_of(harness)

            done = wait_for_session_end(kube, NAMESPACE, name, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
            assert done.get("harnessLost", 0) == 0, done
            events = await store.read(record_of(name))
        finally:
            await store.close()
            # Its pods go with it while this kubelet still runs them (the next test's would not).
            kube.kubectl("delete", "agentsession", "-n", NAMESPACE, name, "--timeout=120s", check=False)
            wait_for(lambda: not pods(kube, name) or None, "the pods to go", describe=describe)
    stop_seq, stop = next(
        (e.seq, e.payload)
        for e in events
        if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.HARNESS_STOPPED
    )
    # The call at the fault point was either dispatched before the signal was handled (then it
    # finished within the drain) or never dispatched (then the next attempt issues it): both are a
    # clean stop, and which one depends on when the signal lands.
    assert stop.reason == "SIGTERM" and stop.attempt == 1, stop
    kinds = [e.payload.kind for e in events if isinstance(e.payload, Lifecycle)]
    assert LifecycleKind.HARNESS_LOST not in kinds, kinds
    finished = {e.payload.operation_id for e in events if e.type == "tool_result" and e.seq < stop_seq}  # type: ignore[union-attr]
    assert set(stop.operations) <= finished, "a call in flight did not finish within the drain"
    unknown = {
        e.payload.operation_id
        for e in events
        if e.type == "operation_outcome" and e.payload.outcome == "unknown"
    }  # type: ignore[union-attr]
    assert not unknown & finished, unknown
    again = [
        e.payload.operation_id
        for e in events
        if e.type == "tool_result" and e.seq > stop_seq and e.payload.operation_id in finished
    ]  # type: ignore[union-attr]
    assert not again, f"finished before the stop, run again: {again}"
    assert not unknown, f"a clean stop left unknown outcomes: {unknown}"
    assert fold(events).lifecycle.clean_stops == 1


def is_stopped_pod(pid: int) -> bool:
    """Whether the pod's command (the deepest of its processes that is `belay`) is stopped."""
    return any(is_stopped(child) for child in descendants(pid))


def pending_sigterm(pid: int) -> bool:
    """Whether a stopped process of the pod has SIGTERM pending (the kubelet's, held until it goes on)."""
    for child in descendants(pid):
        if not is_stopped(child):
            continue
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{child}/status").read_text()
            pending = next(
                int(line.split()[1], 16) for line in status.splitlines() if line.startswith("ShdPnd:")
            )
            pending |= next(
                int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigPnd:")
            )
            if pending & (1 << (signal.SIGTERM - 1)):
                return True
    return False


REVIEWER_RBAC = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: reviewer, namespace: belay-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: belay-reviewer, namespace: belay-e2e}
rules:
- apiGroups: [belay.dev]
  resources: [agentsessions]
  verbs: [get, list, watch, patch]
- apiGroups: [belay.dev]
  resources: [checkpoints]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: belay-reviewer, namespace: belay-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: belay-reviewer}
subjects:
- {kind: ServiceAccount, name: reviewer, namespace: belay-e2e}
"""


def reviewer_kubeconfig(kube: ControlPlane, path: Path) -> Path:
    """A kubeconfig for a person allowed AgentSessions and Checkpoints only."""
    kube.kubectl("apply", "-f", "-", input=REVIEWER_RBAC)
    token = kube.kubectl("create", "token", "reviewer", "-n", NAMESPACE).stdout.strip()
    return token_kubeconfig(kube, path, "reviewer", NAMESPACE, token)


def kubectl_belay(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    plugin = Path(sys.executable).with_name("kubectl-belay")
    return subprocess.run(
        [str(plugin), *args, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=60
    )


async def test_approvals_from_gitops_and_kubectl_belay_are_bound_to_the_payload_hash(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    tmp_path: Path,
) -> None:
    kube = e2e_cluster
    name = "needs-approval"
    manifest = cluster_manifest(name)
    del manifest["spec"]["approvals"]
    manifest["metadata"]["labels"] = {"team": "parsers"}  # for `kubectl belay report -l`
    config_file = reviewer_kubeconfig(kube, tmp_path / "reviewer.kubeconfig")
    for resource in ("pods", "secrets"):
        allowed = kube.kubectl(
            "auth",
            "can-i",
            "get",
            resource,
            "-n",
            NAMESPACE,
            f"--as=system:serviceaccount:{NAMESPACE}:reviewer",
            check=False,
        )
        assert allowed.stdout.strip() == "no"

    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets)):
        kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        waiting = wait_for(
            lambda: (s := session_status(kube, name)).get("pendingApprovals") and s,
            "the publish step to ask for approval",
            timeout=600,
            describe=describe,
        )
        assert waiting["phase"] == "WaitingOnUser"
        assert condition(waiting, "WaitingOnUser")["reason"] == "AwaitingApproval"  # type: ignore[index]
        (pending,) = waiting["pendingApprovals"]
        assert waiting["waitingOn"] == f"approval {pending['approvalId']}"
        row = kube.kubectl("get", "agentsession", name, "-n", NAMESPACE, "--no-headers").stdout.split()
        assert row[:4] == [name, "WaitingOnUser", "approval", pending["approvalId"]]
        finalizers = kubectl_json(kube, "get", "agentsession", name, "-n", NAMESPACE)["metadata"][
            "finalizers"
        ]
        assert finalizers == ["belay.dev/pods-and-retention"]

        # A grant for another payload (as if the patch had changed since it was reviewed) approves nothing.
        wrong = {"operationId": pending["operationId"], "payloadSha256": "0" * 64}
        kube.kubectl(
            "patch",
            "agentsession",
            name,
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"approvals": [wrong]}}),
        )
        generation = kubectl_json(kube, "get", "agentsession", name, "-n", NAMESPACE)["metadata"][
            "generation"
        ]
        still = wait_for(
            lambda: (s := session_status(kube, name)).get("observedGeneration") == generation and s,
            "the operator to see the wrong grant",
            describe=describe,
        )
        assert still["phase"] == "WaitingOnUser" and still["pendingApprovals"] == [pending]

        brief = kubectl_belay(config_file, "brief", name)
        assert brief.returncode == 0, brief.stderr
        assert pending["payloadSha256"] in brief.stdout
        assert f"kubectl belay approve {name} {pending['approvalId']}" in brief.stdout

        # The timeline page, from what the same reviewer may read: the wait and every checkpoint.
        page = tmp_path / "report.html"
        drawn = kubectl_belay(config_file, "report", name, "-o", str(page))
        assert drawn.returncode == 0, drawn.stderr
        html = page.read_text()
        assert pending["approvalId"] in html and "Waited on you" in html
        listed = kubectl_json(kube, "get", "checkpoints", "-n", NAMESPACE, "-l", f"belay.dev/session={name}")
        assert listed["items"]
        for checkpoint in listed["items"]:
            assert f"checkpoint {checkpoint['spec']['checkpointId']} (seq {checkpoint['spec']['seq']}" in html
        picked = kubectl_belay(config_file, "report", "-l", "team=parsers", "-o", str(tmp_path))
        assert picked.returncode == 0, picked.stderr
        assert pending["approvalId"] in (tmp_path / f"{name}-report.html").read_text()

        refused = kubectl_belay(config_file, "approve", name, "no-such-approval")
        assert refused.returncode == 1 and "no approval or wait 'no-such-approval'" in refused.stderr
        approved = kubectl_belay(config_file, "approve", name, pending["approvalId"])
        assert approved.returncode == 0, approved.stderr
        assert pending["payloadSha256"] in approved.stdout

        done = wait_for_session_end(kube, NAMESPACE, name, timeout=600, describe=describe)
        assert done["phase"] == "Succeeded"
        spec_approvals = kubectl_json(kube, "get", "agentsession", name, "-n", NAMESPACE)["spec"]["approvals"]
        assert spec_approvals[-1]["payloadSha256"] == pending["payloadSha256"]

    store = open_event_store(stores[0])
    try:
        state = fold(await store.read(record_of(name)))
    finally:
        await store.close()
    record = state.approvals[pending["approvalId"]]
    assert (record.decision, record.decided_by) == ("granted", "spec")
    assert record.decision_payload_sha256 == pending["payloadSha256"]
    kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s")


async def test_fork_from_a_checkpoint_copies_history_and_a_missing_source_stalls(
    e2e_cluster: ControlPlane, operator: OperatorProcess, stores: tuple[str, str]
) -> None:
    kube = e2e_cluster
    store = open_event_store(stores[0])
    try:
        verified = Checkpoint(
            checkpoint_id="researcher/reproduce",
            covers_seq=2,
            subagent="researcher",
            next_step="diagnose",
            verification=Verification(command="python -m unittest", status="passed", exit_code=1),
        )
        later = Checkpoint(checkpoint_id="researcher/diagnose", covers_seq=4, subagent="researcher")
        history = [
            UserInput(goal="fix the parser"),
            Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
            verified,
            Note(note_id="cause", kind=NoteKind.HYPOTHESIS, text="split on every '='"),
            later,
        ]
        await store.append(record_of("fork-source"), [EventDraft(payload=p) for p in history])

        forked = cluster_manifest("forked")
        forked["spec"]["forkFrom"] = {"session": "fork-source", "checkpoint": "researcher/reproduce"}
        orphan = cluster_manifest("orphan")
        orphan["spec"]["forkFrom"] = {"session": "no-such-session"}
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [forked, orphan]}),
        )

        describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
        status = wait_for(
            lambda: (s := session_status(kube, "forked")).get("forkedFrom") and s,
            "the fork",
            describe=describe,
        )
        assert status["forkedFrom"] == {
            "session": "fork-source",
            "checkpointId": "researcher/reproduce",
            "coversSeq": 3,
        }
        copied = await store.read(record_of("forked"))
        assert [e.payload for e in copied[:3]] == history[:3]
        mirrored = wait_for(
            lambda: kubectl_json(
                kube, "get", "checkpoints", "-n", NAMESPACE, "-l", "belay.dev/session=forked"
            ).get("items"),
            "the forked session's checkpoint mirror",
            describe=describe,
        )
        assert [c["spec"]["checkpointId"] for c in mirrored] == ["researcher/reproduce"]

        # A changed request in the spec is recorded once as a scope change, keyed by generation.
        kube.kubectl(
            "patch",
            "agentsession",
            "forked",
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"request": {"goal": "fix the parser and document the format"}}}),
        )

        async def scope_changes() -> list[Any]:
            return [e.payload for e in await store.read(record_of("forked")) if e.type == "scope_change"]

        await wait_until_async(
            scope_changes,
            "two scope changes",
            until=lambda changes: len(changes) >= 2,
            timeout=90,
            interval=0.3,
        )
        # The fork's own spec already differed from the source's request (generation 1), then the patch.
        first, second = await scope_changes()
        assert (first.request_version, first.goal) == (2, EXAMPLE_MANIFEST["spec"]["request"]["goal"])
        assert first.changed_parts == EXAMPLE_MANIFEST["spec"]["request"]["parts"]
        assert (second.request_version, second.goal) == (3, "fix the parser and document the format")
        assert second.changed_parts == {}

        stalled = wait_for(
            lambda: condition(s := session_status(kube, "orphan"), "Stalled") and s,
            "the orphan to stall",
            describe=describe,
        )
        assert condition(stalled, "Stalled")["reason"] == "ForkSourceMissing"  # type: ignore[index]
        assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
        assert pods(kube, "orphan") == {}
        assert await store.last_seq(record_of("orphan")) == 0
    finally:
        await store.close()
        kube.kubectl(
            "delete", "agentsession", "forked", "orphan", "-n", NAMESPACE, "--timeout=120s", check=False
        )


@pytest.fixture(scope="module")
def uninterrupted_deliverables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The example's deliverables from an uninterrupted run (the same plan and inputs, run locally)."""
    result, events = run_example(tmp_path_factory.mktemp("reference"), "--quiet")
    assert result.returncode == 0, result.stderr
    return deliverables(events)


async def test_a_lost_sandbox_pod_is_replaced_and_restored_in_the_same_attempt(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    uninterrupted_deliverables: dict[str, str],
    tmp_path: Path,
) -> None:
    kube = e2e_cluster
    name = "sandbox-loss"
    lost_pod = f"{name}-sbx-implementer-0"
    replacement = f"{name}-sbx-implementer-0-r1"
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}\npods: {sorted(pods(kube, name))}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    store = open_event_store(stores[0])
    proxies: dict[str, ServiceProxy] = {}
    plain_env = harness_env(tickets, FAULT_POINT)

    def env(pod: dict[str, Any]) -> dict[str, str]:
        # The harness reaches its sandboxes through their Services, routed at connection time.
        values = plain_env(pod)
        if values:
            values[ENV_SANDBOX_ENDPOINTS] = json.dumps({sub: p.endpoint for sub, p in proxies.items()})
        return values

    try:
        with contextlib.ExitStack() as stack:
            kubelet = stack.enter_context(LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=env))
            for sub in ("implementer", "researcher"):
                service = names.sandbox_service_name(name, sub)
                proxy = ServiceProxy(kubelet, api, service, OperatorSettings().sandbox_port)
                proxies[sub] = stack.enter_context(proxy)
            kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(name)))
            # The harness stops itself right after the implementer's `fix` checkpoint; while it is
            # stopped, its sandbox pod is deleted, as a node failure or an eviction would.
            await wait_for_checkpoint(store, record_of(name), "implementer/fix", describe)
            kube.kubectl("delete", "pod", "-n", NAMESPACE, lost_pod, "--wait=false")

            recovering = wait_for(
                lambda: (
                    (c := condition(session_status(kube, name), "Recovering")) and c["status"] == "True" and c
                ),
                "Recovering=True",
                timeout=120,
                describe=describe,
            )
            assert recovering["reason"] == "SandboxReplaced"
            assert "implementer" in recovering["message"]
            wait_for(
                lambda: pods(kube, name).get(replacement, {}).get("status", {}).get("phase") == "Running",
                "the replacement sandbox pod to run",
                timeout=120,
                describe=describe,
            )
            status = session_status(kube, name)
            implementer = next(s for s in status["sandboxes"] if s["subagent"] == "implementer")
            assert implementer["pod"] == replacement
            warnings = kubectl_json(
                kube, "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}"
            )
            assert any(
                e["reason"] == "SandboxReplaced" and e["type"] == "Warning" for e in warnings["items"]
            ), warnings
            kubelet.send_signal(f"{name}-harness-0", signal.SIGCONT)

            done = wait_for_session_end(kube, NAMESPACE, name, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", describe()
            assert condition(done, "Recovering")["status"] == "False"  # type: ignore[index]
            # The same attempt finished the session: no other harness pod ever started.
            assert [n for n in kubelet.started_names if "-harness-" in n] == [f"{name}-harness-0"]
            assert replacement in kubelet.started_names
        events = await store.read(record_of(name))
        lifecycle = [e for e in events if isinstance(e, LifecycleEvent)]
        assert [e for e in lifecycle if e.payload.kind == LifecycleKind.HARNESS_LOST] == []
        assert len([e for e in lifecycle if e.payload.kind == LifecycleKind.HARNESS_STARTED]) == 1
        assert len({e.actor.attempt for e in events if e.actor.kind == "harness"}) == 1
        [lost] = [e for e in lifecycle if e.payload.kind == LifecycleKind.SANDBOX_LOST]
        assert lost.payload.subagent == "implementer" and lost.actor.kind == "operator"
        assert lost.payload.detail == f"pod {lost_pod}: the pod is being deleted" or lost.payload.detail == (
            f"pod {lost_pod}: the pod is gone"
        )
        [replaced] = [e for e in lifecycle if e.payload.kind == LifecycleKind.SANDBOX_REPLACED]
        assert replaced.payload.subagent == "implementer" and replaced.seq > lost.seq
        restored = [e for e in lifecycle if e.payload.kind == LifecycleKind.RESTORED and e.seq > replaced.seq]
        assert [(e.payload.subagent, e.payload.checkpoint_id) for e in restored] == [
            ("implementer", "implementer/fix")
        ]
        assert steps_run_twice(events) == []
        assert deliverables(events) == uninterrupted_deliverables
    finally:
        await store.close()
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s", check=False)


def sandbox_answers(port: int, token: str) -> int:
    """The HTTP status a sandbox server gives a request with this token."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/healthz", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


async def test_each_sandbox_pod_holds_only_its_own_token_and_refuses_the_others(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    tmp_path: Path,
) -> None:
    kube = e2e_cluster
    name = "tokens"
    subagents = ("implementer", "researcher")
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}\npods: {sorted(pods(kube, name))}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    store = open_event_store(stores[0])
    # The harness stops itself after the first checkpoint; the sandbox pods go on serving.
    pod_env = harness_env(tickets, "checkpoint:researcher/reproduce")
    try:
        with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=pod_env) as kubelet:
            kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(name)))
            await wait_for_checkpoint(store, record_of(name), "researcher/reproduce", describe)

            # One Secret per subagent, each with a token of its own.
            listed = kubectl_json(
                kube, "get", "secrets", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={name}"
            )
            tokens = {
                s["metadata"]["labels"][names.LABEL_SUBAGENT]: base64.b64decode(s["data"]["token"]).decode()
                for s in listed["items"]
            }
            uid = kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, name)["metadata"]["uid"]
            assert sorted(s["metadata"]["name"] for s in listed["items"]) == sorted(
                names.sandbox_token_secret_name(name, sub, uid) for sub in subagents
            )
            assert sorted(tokens) == list(subagents) and len(set(tokens.values())) == 2

            running = pods(kube, name)
            for sub in subagents:
                other = next(o for o in subagents if o != sub)
                pod_name = f"{name}-sbx-{sub}-0"
                spec = running[pod_name]["spec"]
                assert spec["automountServiceAccountToken"] is False
                (container,) = spec["containers"]
                assert "envFrom" not in container and "env" not in container
                assert [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v] == [
                    names.sandbox_token_secret_name(name, sub, uid)
                ]
                assert not [v for v in spec["volumes"] if "projected" in v]
                # What the pod's process can read: its own token, and no file holding the other's.
                volumes = kubelet.pods[pod_name].root / "volumes"
                files = {
                    f.relative_to(volumes).as_posix(): f.read_bytes()
                    for f in volumes.rglob("*")
                    if f.is_file()
                }
                assert files["sandbox-token/token"].decode() == tokens[sub]
                assert sorted(f for f in files if f.startswith("sandbox-token/")) == ["sandbox-token/token"]
                assert not [f for f, content in files.items() if tokens[other].encode() in content]
                # Its server takes its own token only.
                port = kubelet.pods[pod_name].ports["http"]
                assert sandbox_answers(port, tokens[sub]) == 200
                assert sandbox_answers(port, tokens[other]) == 401

            # The harness holds every sandbox's token, one file each.
            harness_tokens = kubelet.pods[f"{name}-harness-0"].root / "volumes" / "sandbox-tokens"
            assert {f.name: f.read_text() for f in harness_tokens.iterdir()} == tokens
    finally:
        await store.close()
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s", check=False)


def test_an_unreachable_store_is_reported_as_reconciling(
    e2e_cluster: ControlPlane, operator: OperatorProcess
) -> None:
    kube = e2e_cluster
    manifest = cluster_manifest("no-store")
    # The session's own stores, with the Secret that reaches them; no etcd answers at that address.
    keys = {"AWS_ACCESS_KEY_ID": "no-store", "AWS_SECRET_ACCESS_KEY": "no-store"}
    kube.kubectl(
        "create",
        "secret",
        "generic",
        "no-store-keys",
        "-n",
        NAMESPACE,
        *(f"--from-literal={k}={v}" for k, v in keys.items()),
    )
    manifest["spec"]["stores"] = {
        "events": "etcd://127.0.0.1:9/no-store",
        "artifacts": "s3://no-store",
        "secretRef": "no-store-keys",
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        status = wait_for(
            lambda: condition(s := session_status(kube, "no-store"), "Reconciling") and s,
            "the store problem in the status",
            timeout=60,
            describe=lambda: operator.log()[-3000:],
        )
        reconciling = condition(status, "Reconciling")
        assert reconciling is not None and reconciling["reason"] == "StoreUnavailable"
        assert "etcd at http://127.0.0.1:9 did not answer" in reconciling["message"]
        assert condition(status, "Ready")["status"] == "False"  # type: ignore[index]
        assert condition(status, "Stalled") is None
        assert pods(kube, "no-store") == {}
    finally:
        kube.kubectl("delete", "agentsession", "no-store", "-n", NAMESPACE, "--timeout=60s", check=False)
        kube.kubectl("delete", "secret", "no-store-keys", "-n", NAMESPACE, check=False)


def pending_approval(
    kube: ControlPlane, name: str, approval_id: str, describe: Callable[[], str]
) -> dict[str, Any]:
    return wait_for(
        lambda: next(
            (
                a
                for a in session_status(kube, name).get("pendingApprovals", [])
                if a["approvalId"] == approval_id
            ),
            None,
        ),
        f"{approval_id} to be pending",
        timeout=600,
        describe=describe,
    )


async def test_kubectl_belay_reject_and_amend_redo_exactly_the_steps_they_invalidate(
    e2e_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],
    tickets: str,
    tmp_path: Path,
) -> None:
    """In a cluster, with AgentSession access only: rejecting the patch that awaits approval redoes
    its step in the running attempt; amending the goal of the finished session records who changed
    what, reopens it, and the operator starts the attempt that redoes the invalid steps."""
    kube = e2e_cluster
    name = "amended"
    manifest = cluster_manifest(name)
    del manifest["spec"]["approvals"]
    config_file = reviewer_kubeconfig(kube, tmp_path / "reviewer.kubeconfig")
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    reason = "Make it a git patch with a commit message, so it applies with git am."
    api = load_api_client(str(kube.kubeconfig))
    with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets)):
        kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        first = pending_approval(kube, name, "approve-implementer.publish.3", describe)
        assert first["contentSha256"] and first["contentLocation"]  # what it would publish, to read
        brief = kubectl_belay(config_file, "brief", name)
        # The page names the command that fetches what the approval binds, by its hash.
        fetch = f"kubectl belay artifacts get {name} sha256:{first['contentSha256']} -o "
        assert any(
            line.strip().startswith("read the bytes it sends out") and fetch in line
            for line in brief.stdout.splitlines()
        ), brief.stdout

        rejected = kubectl_belay(config_file, "reject", name, first["approvalId"], "--reason", reason)
        assert rejected.returncode == 0, rejected.stderr
        redone = pending_approval(kube, name, "approve-implementer.publish@2.5", describe)
        assert redone["contentSha256"] != first["contentSha256"]
        assert kubectl_belay(config_file, "approve", name, redone["approvalId"]).returncode == 0
        done = wait_for_session_end(kube, NAMESPACE, name, timeout=600, describe=describe)
        assert done["phase"] == "Succeeded"

        goal = manifest["spec"]["request"]["goal"] + " Also reject a key given twice in one section."
        amended = kubectl_belay(config_file, "amend", name, "--goal", goal)
        assert amended.returncode == 0, amended.stderr
        again = pending_approval(kube, name, "approve-implementer.publish@3.3", describe)
        assert kubectl_belay(config_file, "approve", name, again["approvalId"]).returncode == 0
        final = wait_for(
            lambda: (
                (s := session_status(kube, name)).get("phase") == "Succeeded"
                and s.get("requestVersion") == 2
                and s
            ),
            "the amended session to succeed",
            timeout=600,
            describe=describe,
        )
        assert final["requestVersion"] == 2

    store = open_event_store(stores[0])
    try:
        events = await store.read(record_of(name))
    finally:
        await store.close()
    state = fold(events)
    [rejection] = state.rejections
    assert (rejection.kind, rejection.reason, rejection.reopened_steps) == (
        "approval",
        reason,
        ("implementer/publish",),
    )
    assert rejection.by == "reviewer"  # the kubeconfig user kubectl belay wrote it for
    [change] = state.scope_changes
    assert change.by == "kubectl-belay/reviewer" and change.changes[0].after == goal
    # In plan order within each subagent; the two subagents interleave as they ran.
    assert [s for s in change.reopened_steps if s.startswith("implementer/")] == [
        "implementer/regression-test",
        "implementer/fix",
        "implementer/verify",
        "implementer/publish",
    ]
    assert [s for s in change.reopened_steps if s.startswith("researcher/")] == ["researcher/report"]
    # The reused steps ran once; the amended ones once more, in the attempt the operator started.
    verified = [
        e.payload.task_id for e in events if isinstance(e, TaskEvent) and e.payload.status == "verified"
    ]
    assert verified.count("researcher/reproduce") == verified.count("researcher/diagnose") == 1
    assert verified.count("implementer/fix") == 2
    assert state.lifecycle.harness_starts >= 2
    kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s")


def test_a_corrupt_record_is_reported_as_stalled_with_the_seq(
    e2e_cluster: ControlPlane, tmp_path: Path
) -> None:
    """A record changed behind the store's back (an event deleted from its SQLite file): the
    operator does nothing for the session and says why in its status, naming the seq. The record is
    in the operator's own store (a session may not name one on the operator's disk), so this
    operator watches a namespace of its own."""
    kube = e2e_cluster
    name, namespace = "corrupt-record", "belay-corrupt"
    events = record_with_a_gap(tmp_path / "corrupt" / "events.db", name)
    kube.kubectl("create", "namespace", namespace, check=False)
    settings = OperatorSettings(
        event_store=events, artifact_store=f"file://{tmp_path / 'artifacts'}", image_pull_policy="Never"
    )
    operator = OperatorProcess(kube, namespace, settings, tmp_path / "corrupt-operator.log").start()
    manifest = cluster_manifest(name)
    manifest["metadata"]["namespace"] = namespace
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        status = wait_for(
            lambda: condition(s := agentsession_status(kube, namespace, name), "Stalled") and s,
            "the corrupt record in the status",
            timeout=60,
            describe=lambda: operator.log()[-3000:],
        )
        stalled = condition(status, "Stalled")
        assert stalled is not None and stalled["reason"] == "RecordCorrupt"
        assert "at seq 3" in stalled["message"] and "restore the store from a backup" in stalled["message"]
        assert condition(status, "Ready")["status"] == "False"  # type: ignore[index]
        listed = kubectl_json(kube, "get", "pods", "-n", namespace, "-l", f"{names.LABEL_SESSION}={name}")
        assert listed.get("items", []) == []
    finally:
        kube.kubectl("delete", "agentsession", name, "-n", namespace, "--timeout=60s", check=False)
        operator.stop()
