"""The operator's sessions on the real node: the example AgentSession runs with its harness and
sandbox pods as containers of the Belay image, in a namespace that enforces the "restricted" Pod
Security level, with the security context really applied (checked from inside each container);
and it completes, with no step run twice and one ticket, after its harness pod is deleted (the
harness stops cleanly on SIGTERM, no loss is recorded), after a sandbox pod is deleted, and after
the harness container's process is killed.

The session is run without its approval, so it stops before publishing the patch and waits with
its pods running: a point mid-session where the test looks inside the containers or injects the
fault; then the approval is given, as `kubectl belay approve` gives it."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.journal.events import Event, LifecycleKind
from belay.journal.state import fold
from tests.belay_cli import steps_run_twice
from tests.controller.judges import judge
from tests.controller.operator_process import wait_for, wait_for_session_end
from tests.controller.test_operator import completed_steps, steps_run_after
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, operated_session
from tests.testenv.node import NODE_NAME

pytestmark = [pytest.mark.testenv, pytest.mark.node]

UID = 65532
NO_CAPABILITIES = "0000000000000000"
# Run inside a container: who it runs as, with which capabilities, and where it may write.
SECURITY_PROBE = r"""
import json, os
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
def write(folder):
    path = os.path.join(folder, ".belay-probe")
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        return "written"
    except OSError as error:
        return error.strerror
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
    "capabilities": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
    "writes": {folder: write(folder) for folder in ("/", "/usr/local", "/home/belay", "/tmp")},
}))
"""


@pytest.fixture
def session(
    node_cluster: NodeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SessionSetup]:
    with operated_session(node_cluster, "node", tmp_path, monkeypatch.setenv) as setup:
        yield setup


def describe(setup: SessionSetup) -> str:
    return f"{setup.describe()}\noperator log:\n{setup.operator_log()[-3000:]}"


def start_and_wait_for_approval(setup: SessionSetup) -> dict[str, dict[str, Any]]:
    """Applies the session without its approval; returns its running pods once it waits."""
    setup.cluster.apply([setup.manifest(approved=False)])
    wait_for(
        setup.waiting_for_approval,
        "the session to wait for its approval",
        timeout=300,
        describe=lambda: describe(setup),
    )
    return setup.running_pods()


def session_object(setup: SessionSetup) -> dict[str, Any]:
    """The AgentSession as `kubectl get -o json` returns it: what GitOps tools read."""
    got = setup.cluster.kube.kubectl("get", "agentsession", SESSION, "-n", setup.namespace, "-o", "json")
    return dict(json.loads(got.stdout))


def lifecycle_seq(events: list[Event], kind: LifecycleKind) -> int | None:
    return next(
        (e.seq for e in events if e.type == "lifecycle" and getattr(e.payload, "kind", None) == kind), None
    )


def finish(setup: SessionSetup) -> dict[str, Any]:
    setup.approve()
    done = wait_for_session_end(
        setup.cluster.kube, setup.namespace, SESSION, timeout=600, describe=lambda: describe(setup)
    )
    assert done["phase"] == "Succeeded", describe(setup)
    return done


def test_the_example_session_runs_in_real_containers_under_restricted(
    node_cluster: NodeCluster, session: SessionSetup, kstatus_bin: Path, argocd_health_bin: Path
) -> None:
    kube = node_cluster.kube
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [NODE_NAME]

    running = start_and_wait_for_approval(session)
    # The platform's own tools judge the live object on the node as on the control plane alone
    # (tests/controller/test_gitops_judges.py): waiting on a person is settled but suspended.
    waiting = judge(session_object(session), kstatus_bin, argocd_health_bin)
    assert (waiting.kstatus, waiting.argocd) == ("Current", "Suspended"), waiting
    assert sorted(running) == [
        f"{SESSION}-harness-0",
        f"{SESSION}-sbx-implementer-0",
        f"{SESSION}-sbx-researcher-0",
    ]
    for name, pod in running.items():
        assert pod["spec"]["nodeName"] == NODE_NAME
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"].endswith(node_cluster.image) and container["containerID"].startswith(
            "containerd://"
        )
        inside = json.loads(node_cluster.exec(session.namespace, name, "python3", "-c", SECURITY_PROBE))
        assert (inside["uid"], inside["gid"]) == (UID, UID), name
        assert set(inside["capabilities"].values()) == {NO_CAPABILITIES}, (name, inside)
        assert (inside["no_new_privs"], inside["seccomp"]) == ("1", "2"), (name, inside)
        writes = inside["writes"]
        assert writes["/"] == writes["/usr/local"] == writes["/home/belay"] == "Read-only file system", (
            name,
            writes,
        )
        assert writes["/tmp"] == "written", (name, writes)

    # The namespace really enforces "restricted": the same image, run as a plain pod, is refused.
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": session.namespace},
        "spec": {"containers": [{"name": "c", "image": node_cluster.image}]},
    }
    refused = kube.kubectl("create", "-f", "-", input=json.dumps(plain), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr

    done = finish(session)
    succeeded = judge(session_object(session), kstatus_bin, argocd_health_bin)
    assert (succeeded.kstatus, succeeded.argocd) == ("Current", "Healthy"), succeeded
    ready = session.cluster.kube.kubectl(
        "wait", "--for=condition=Ready", f"agentsession/{SESSION}", "-n", session.namespace, "--timeout=30s"
    )
    assert ready.returncode == 0, ready.stderr
    events = session.events()
    assert steps_run_twice(events) == []
    assert {"fix.patch", "report.md"} <= set(fold(events).deliverables)
    assert {d["name"] for d in done["deliverables"]} >= {"fix.patch", "report.md"}
    assert session.tickets_filed() == 1


def delete_harness_pod(setup: SessionSetup) -> LifecycleKind:
    """The kubelet sends SIGTERM: the harness stops cleanly within its grace period, and the
    operator starts the next attempt without recording a loss."""
    setup.cluster.kube.kubectl("delete", "pod", "-n", setup.namespace, f"{SESSION}-harness-0", "--wait=false")
    return LifecycleKind.HARNESS_STOPPED


def delete_sandbox_pod(setup: SessionSetup) -> LifecycleKind:
    """The pod is deleted and gone before the session goes on: a pod still terminating keeps
    serving until the kubelet stops its container, and a harness that finished its work in it
    meanwhile would never need the replacement."""
    pod = f"{SESSION}-sbx-implementer-0"
    setup.cluster.kube.kubectl("delete", "pod", "-n", setup.namespace, pod, "--wait=false")
    setup.cluster.kube.kubectl("wait", "--for=delete", f"pod/{pod}", "-n", setup.namespace, "--timeout=110s")
    return LifecycleKind.SANDBOX_LOST


def kill_harness_process(setup: SessionSetup) -> LifecycleKind:
    """The container's main process dies (SIGKILL from the host): the container exits 137, the
    pod fails (restartPolicy Never)."""
    pid = setup.cluster.node.container_pid(setup.namespace, f"{SESSION}-harness-0")
    os.kill(pid, signal.SIGKILL)
    return LifecycleKind.HARNESS_LOST


@pytest.mark.parametrize(
    "fault", [delete_harness_pod, delete_sandbox_pod, kill_harness_process], ids=lambda f: f.__name__
)
def test_the_session_completes_after_a_real_pod_is_lost(session: SessionSetup, fault: Any) -> None:
    start_and_wait_for_approval(session)
    before = session.events()
    done_before = completed_steps(fold(before))
    assert done_before, "the session waits after completed steps"

    kind = fault(session)
    wait_for(
        lambda: (
            session.status().get("phase") in ("Recovering", "Running", "WaitingOnUser")
            and lifecycle_seq(session.events(), kind) is not None
        ),
        f"the operator to record {kind.value}",
        timeout=180,
        describe=lambda: describe(session),
    )
    done = finish(session)
    events = session.events()
    lost = lifecycle_seq(events, kind)
    assert lost is not None
    assert steps_run_after(events, lost).isdisjoint(done_before)
    assert steps_run_twice(events) == []
    assert session.tickets_filed() <= 1
    started = [e for e in events if getattr(e.payload, "kind", None) == LifecycleKind.HARNESS_STARTED]
    if kind in (LifecycleKind.HARNESS_LOST, LifecycleKind.HARNESS_STOPPED):
        # A second attempt, in a new pod, under a higher lease.
        assert len(started) == 2 and fold(events).lifecycle.lease > 1
    if kind == LifecycleKind.HARNESS_STOPPED:
        assert lifecycle_seq(events, LifecycleKind.HARNESS_LOST) is None, "a clean stop recorded as a loss"
        assert not fold(events).unknown_outcomes
    if kind == LifecycleKind.SANDBOX_LOST:
        # The same attempt restored its sandbox into the replacement pod.
        assert len(started) == 1
        assert any(getattr(e.payload, "kind", None) == LifecycleKind.SANDBOX_REPLACED for e in events)
    assert {d["name"] for d in done["deliverables"]} >= {"fix.patch", "report.md"}
