"""A session judged live by the platform's own tools, against the real control plane with the
operator running and the local kubelet playing the node: at every phase it goes through, kstatus
(sigs.k8s.io/cli-utils) and Argo CD's health check under gopher-lua say what docs/operator.md
promises of the very object `kubectl get` returns; `kubectl wait` works as documented; and the
session is applied and changed with server-side apply under one field manager, as Argo CD and Flux
apply it, then pruned."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from belay.harness.attempt import FAULT_ENV
from belay.lifetime import descendants
from tests.api.kubehelpers import REPO_ROOT, install_crds
from tests.belay_cli import is_stopped
from tests.controller.judges import Judges, Verdict
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import OperatorProcess, wait_for
from tests.controller.sessions import EXAMPLE_MANIFEST, record_with_a_gap
from tests.controller.test_operator import TICKETS_TOKEN, tickets  # noqa: F401 (a fixture)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-judged"
# How Argo CD's application controller names itself as a field manager.
GITOPS_MANAGER = "argocd-controller"
FIRST_STOP = "checkpoint:researcher/reproduce"  # where the first attempt freezes (stops renewing)
REPLACEMENT_STOP = "lifecycle:harness_started"  # where the replacement stops, before it restores


def example(name: str) -> dict[str, Any]:
    """The example session with its plan and inputs at absolute paths the local pods can read, and
    without its approvals: a person (here, Git) gives them."""
    manifest = copy.deepcopy(EXAMPLE_MANIFEST)
    folder = REPO_ROOT / "examples/parser-fix"
    manifest["metadata"] = {"name": name, "namespace": NAMESPACE}
    manifest["spec"]["executor"]["plan"] = str(folder / "plan.yaml")
    for sub in manifest["spec"]["subagents"]:
        for item in sub["inputs"]:
            item["source"], item["hostPath"] = str(folder / item["source"]), True
    del manifest["spec"]["approvals"]
    return manifest


@pytest.fixture(scope="module")
def cluster(kube: ControlPlane) -> ControlPlane:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    return kube


@pytest.fixture
def judges(cluster: ControlPlane, kstatus_bin: Path, argocd_health_bin: Path) -> Judges:
    return Judges(cluster, NAMESPACE, kstatus_bin, argocd_health_bin)


@pytest.fixture
def operator(cluster: ControlPlane, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator, not yet started: a test starts (and restarts) it when its story needs it."""
    settings = OperatorSettings(
        event_store=f"sqlite://{tmp_path / 'events.db'}",
        artifact_store=f"file://{tmp_path / 'artifacts'}",
        image_pull_policy="Never",
    )
    process = OperatorProcess(cluster, NAMESPACE, settings, tmp_path / "operator.log")
    try:
        yield process
    finally:
        process.stop()


def stops_at(tickets_url: str, *points: str) -> Callable[[dict[str, Any]], dict[str, str]]:
    """What the cluster gives each harness pod the kubelet starts: the ticket service's address,
    and for the n-th the n-th fault point, where it stops itself (none after the last)."""
    started: list[str] = []

    def env(pod: dict[str, Any]) -> dict[str, str]:
        if pod["metadata"]["labels"].get(names.LABEL_COMPONENT) != names.COMPONENT_HARNESS:
            return {}
        started.append(pod["metadata"]["name"])
        values = {"BELAY_TICKETS_URL": tickets_url, "BELAY_TICKETS_TOKEN": TICKETS_TOKEN}
        if len(started) <= len(points):
            values[FAULT_ENV] = points[len(started) - 1]
        return values

    return env


def apply(kube: ControlPlane, manifest: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --server-side` under the GitOps tool's field manager, never forcing conflicts."""
    return kube.kubectl(
        "apply",
        "--server-side",
        f"--field-manager={GITOPS_MANAGER}",
        *flags,
        "-f",
        "-",
        input=json.dumps(manifest),
        check=False,
    )


def harness_pods(kubelet: LocalKubelet, session: str) -> list[str]:
    return [
        name
        for name, pod in kubelet.started_pods.items()
        if pod.labels.get(names.LABEL_SESSION) == session
        and pod.labels.get(names.LABEL_COMPONENT) == names.COMPONENT_HARNESS
    ]


def stopped(kubelet: LocalKubelet, pod: str) -> bool:
    local = kubelet.pods.get(pod)
    return local is not None and any(is_stopped(p) for p in descendants(local.process.pid))


def seen_as(
    judges: Judges, name: str, phase: str, describe: Callable[[], str], timeout: float = 180
) -> Verdict:
    """The first verdict on the session in the given phase: both tools judged that same object."""
    return wait_for(
        lambda: (v := judges.session(name)) is not None and v.phase == phase and v,
        f"the session {phase}",
        timeout=timeout,
        describe=describe,
    )


def managers(obj: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """managedFields by (manager, operation, subresource): the fields each owns."""
    return {
        (m["manager"], m["operation"], m.get("subresource", "")): m.get("fieldsV1", {})
        for m in obj["metadata"]["managedFields"]
    }


def owned_by_others(entry: dict[str, Any]) -> set[str]:
    """The fields of a managedFields entry other than the operator's own metadata (its finalizer
    and its belay.dev/ annotations) and status."""
    fields = {key for key in entry if key not in ("f:metadata", "f:status")}
    metadata = entry.get("f:metadata", {})
    fields |= {f"metadata.{k}" for k in metadata if k not in ("f:finalizers", "f:annotations", ".")}
    fields |= {
        f"metadata.{k}"
        for k in metadata.get("f:annotations", {})
        if k != "." and not k.startswith(f"f:{names.GROUP}/")
    }
    fields |= {
        f"metadata.finalizers.{k}"
        for k in metadata.get("f:finalizers", {})
        if k not in (".", f'v:"{names.FINALIZER}"')
    }
    return fields


def children(judges: Judges, uid: str) -> list[str]:
    """Every object in the namespace the session owns."""
    found = []
    for kind in ("pods", "services", "networkpolicies", "secrets", "checkpoints", "agentsessions"):
        for item in judges.get(kind).get("items", []):
            if any(o["uid"] == uid for o in item["metadata"].get("ownerReferences", [])):
                found.append(f"{kind}/{item['metadata']['name']}")
    return found


def test_a_session_applied_by_gitops_is_judged_at_every_phase_and_pruned(
    cluster: ControlPlane,
    judges: Judges,
    operator: OperatorProcess,
    tickets: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    kube, name = cluster, "journey"
    manifest = example(name)
    describe = lambda: f"operator log:\n{operator.log()[-3000:]}\nnow: {judges.session(name)}"  # noqa: E731

    # Applied before any operator runs: the CRD's default status says no generation was observed.
    applied = apply(kube, manifest)
    assert applied.returncode == 0, applied.stderr
    unobserved = judges.session(name)
    assert unobserved is not None
    assert (unobserved.kstatus, unobserved.argocd) == ("InProgress", "Progressing"), unobserved
    assert "latest observed generation is 0" in unobserved.kstatus_message
    not_ready = judges.wait(name, "condition=Ready", 2)
    assert not_ready.returncode != 0 and "timed out" in not_ready.stderr

    # The operator records the request; no node runs the pods yet.
    operator.start()
    pending = wait_for(
        lambda: (v := judges.session(name)) and v.obj["status"].get("observedGeneration") == 1 and v,
        "the operator's first pass",
        describe=describe,
    )
    assert pending.phase == "Pending", pending
    assert (pending.kstatus, pending.argocd) == ("InProgress", "Progressing"), pending
    assert pending.argocd_message.startswith("Pending: ")

    api = load_api_client(str(kube.kubeconfig))
    with LocalKubelet(
        api, NAMESPACE, tmp_path / "kubelet", extra_env=stops_at(tickets, FIRST_STOP, REPLACEMENT_STOP)
    ) as kubelet:
        ready = judges.wait(name, "condition=Ready", 110)
        assert ready.returncode == 0, ready.stderr
        running = seen_as(judges, name, "Running", describe)
        assert (running.kstatus, running.argocd) == ("Current", "Progressing"), running

        # The first attempt freezes at its fault point and stops renewing its lease: interrupted,
        # then replaced; the replacement stops before it restores, so the session stays Recovering.
        first = harness_pods(kubelet, name)[0]
        wait_for(lambda: stopped(kubelet, first), f"{first} to stop at {FIRST_STOP}", describe=describe)
        recovering = seen_as(judges, name, "Recovering", describe, timeout=240)
        assert (recovering.kstatus, recovering.argocd) == ("InProgress", "Progressing"), recovering
        assert recovering.argocd_message.startswith("Recovering: ")
        replacement = wait_for(
            lambda: len(pods := harness_pods(kubelet, name)) > 1 and stopped(kubelet, pods[1]) and pods[1],
            "the replacement to stop before it restores",
            describe=describe,
        )
        # Before the replacement goes silent in its turn: the status names the lost attempt and
        # the one restoring.
        restoring = wait_for(
            lambda: (
                (v := judges.session(name)) and "restores from the last verified" in v.argocd_message and v
            ),
            "the replacement named in the status",
            timeout=20,
            describe=describe,
        )
        assert restoring.phase == "Recovering", restoring
        assert (restoring.kstatus, restoring.argocd) == ("InProgress", "Progressing"), restoring
        kubelet.send_signal(replacement, signal.SIGCONT)

        # It restores and runs until the publish step asks for an approval.
        waiting = judges.wait(name, "condition=WaitingOnUser", 110)
        assert waiting.returncode == 0, waiting.stderr
        asking = seen_as(judges, name, "WaitingOnUser", describe)
        assert (asking.kstatus, asking.argocd) == ("Current", "Suspended"), asking
        [pending_approval] = asking.obj["status"]["pendingApprovals"]

        # The approval comes from Git: the changed spec, applied by the same field manager while
        # the operator runs, with no conflict.
        manifest["spec"]["approvals"] = [
            {
                "operationId": pending_approval["operationId"],
                "payloadSha256": pending_approval["payloadSha256"],
            }
        ]
        changed = apply(kube, manifest)
        assert changed.returncode == 0 and "conflict" not in changed.stderr.lower(), changed.stderr
        done = wait_for(
            lambda: judges.wait(name, "jsonpath={.status.phase}=Succeeded", 100).returncode == 0 or None,
            "kubectl wait for Succeeded",
            timeout=400,
            describe=describe,
        )
        assert done
        succeeded = judges.session(name)
        assert succeeded is not None and succeeded.obj["status"]["observedGeneration"] == 2
        assert (succeeded.kstatus, succeeded.argocd) == ("Current", "Healthy"), succeeded
        checkpoints = judges.kstatus_of_list("checkpoints")
        assert checkpoints and {c["status"] for c in checkpoints} == {"Current"}, checkpoints

        # Server-side apply as GitOps tools do it: the GitOps manager owns the spec, the operator
        # only the status (plus its finalizer and its own annotations), and the unchanged manifest
        # makes no difference.
        owners = managers(judges.get("agentsession", name, "--show-managed-fields"))
        assert any(m == GITOPS_MANAGER and "f:spec" in fields for (m, _, _), fields in owners.items())
        for (manager, operation, subresource), fields in owners.items():
            if manager == GITOPS_MANAGER:
                continue
            assert not owned_by_others(fields), (manager, operation, subresource, fields)
            if manager == names.FIELD_MANAGER:
                assert (operation, subresource) == ("Apply", "status"), owners.keys()
        diff = kube.kubectl(
            "diff",
            "--server-side",
            f"--field-manager={GITOPS_MANAGER}",
            "-f",
            "-",
            input=json.dumps(manifest),
            check=False,
        )
        assert diff.returncode == 0 and not diff.stdout, diff.stdout + diff.stderr
        dry_run = apply(kube, manifest, "--dry-run=server", "-o", "json")
        assert dry_run.returncode == 0, dry_run.stderr
        live = judges.get("agentsession", name)
        as_applied = json.loads(dry_run.stdout)
        assert as_applied["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
        assert as_applied["spec"] == live["spec"]

        # Deleted while no operator runs: its finalizer holds it, Terminating.
        uid = live["metadata"]["uid"]
        owned = children(judges, uid)
        assert any(o.startswith("checkpoints/") for o in owned) and any(
            o.startswith("secrets/") for o in owned
        )
        operator.stop()
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--cascade=foreground", "--wait=false")
        terminating = judges.session(name)
        assert terminating is not None
        assert (terminating.kstatus, terminating.argocd) == ("Terminating", "Progressing"), terminating
        assert terminating.argocd_message == "Pending deletion"

        # A prune cleans up every child.
        operator.start()
        gone = judges.wait(name, "delete", 110)
        assert gone.returncode == 0, gone.stderr
        wait_for(
            lambda: not children(judges, uid) or None,
            "every child to go",
            describe=lambda: str(children(judges, uid)),
        )


def test_a_failed_session_is_failed_and_degraded(
    cluster: ControlPlane,
    judges: Judges,
    operator: OperatorProcess,
    tickets: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """Its only attempt is lost (recovery.maxAttempts 1): Failed to kstatus, Degraded to Argo CD."""
    kube, name = cluster, "gives-up"
    manifest = example(name)
    manifest["spec"]["recovery"] = {"maxAttempts": 1}
    describe = lambda: f"operator log:\n{operator.log()[-3000:]}\nnow: {judges.session(name)}"  # noqa: E731
    operator.start()
    api = load_api_client(str(kube.kubeconfig))
    with LocalKubelet(
        api, NAMESPACE, tmp_path / "kubelet", extra_env=stops_at(tickets, FIRST_STOP)
    ) as kubelet:
        assert apply(kube, manifest).returncode == 0
        first = wait_for(
            lambda: harness_pods(kubelet, name) and harness_pods(kubelet, name)[0], "the harness"
        )
        wait_for(lambda: stopped(kubelet, first), f"{first} to stop at {FIRST_STOP}", describe=describe)
        kube.kubectl("delete", "pod", first, "-n", NAMESPACE, "--wait=false", "--grace-period=1")
        failed = seen_as(judges, name, "Failed", describe)
        assert (failed.kstatus, failed.argocd) == ("Failed", "Degraded"), failed
        assert judges.wait(name, "condition=Stalled", 60).returncode == 0
        assert judges.wait(name, "condition=Ready", 2).returncode != 0
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=110s")


def test_a_corrupt_record_is_failed_and_degraded(
    cluster: ControlPlane, judges: Judges, operator: OperatorProcess, tmp_path: Path
) -> None:
    """A record changed behind the store's back (an event deleted from its SQLite file): the
    operator stalls the session, which kstatus reads as Failed (not InProgress) and Argo CD as
    Degraded."""
    kube, name = cluster, "corrupt"
    events = record_with_a_gap(tmp_path / "corrupt" / "events.db", name)
    manifest = example(name)
    # The record is the operator's own store's (a session may not name one on the operator's disk).
    operator.settings = operator.settings.model_copy(update={"event_store": events})
    operator.start()
    assert apply(kube, manifest).returncode == 0
    try:
        stalled = judges.wait(name, "condition=Stalled", 60)
        assert stalled.returncode == 0, stalled.stderr + operator.log()[-2000:]
        verdict = judges.session(name)
        assert verdict is not None
        assert (verdict.kstatus, verdict.argocd) == ("Failed", "Degraded"), verdict
        assert "at seq 3" in verdict.kstatus_message and verdict.argocd_message == verdict.kstatus_message
    finally:
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=60s", check=False)
