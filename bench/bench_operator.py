"""The operator against the real control plane (no node: pods stay Pending, so this measures the
operator and the apiserver, not container starts).

- reconcile_latency_p50_s: from creating an AgentSession to every child object existing (harness
  and sandbox pods, the Service, three NetworkPolicies, the token Secret), median of several.
- operator_rss_mib_500_sessions: resident memory of the operator process once 500 sessions are
  reconciled (each has a status with its observedGeneration), idle in their follow loops.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess
from tests.testenv.kube import ControlPlane

from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from bench.common import Figure

NAMESPACE = "bench"
LATENCY_RUNS = 15
FLEET = 500
# A session with one subagent has seven children: two pods, a Service, three policies, a Secret.
CHILDREN = 7
COMMAND = "python -m bench bench_operator"


def session(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "request": {"goal": "measure the operator"},
            "executor": {"type": "scripted", "plan": "/nonexistent/plan.yaml"},
            "subagents": [{"name": "worker"}],
        },
    }


def children(api: client.ApiClient, name: str) -> int:
    selector = f"belay.dev/session={name}"
    core = client.CoreV1Api(api)
    networking = client.NetworkingV1Api(api)
    return (
        len(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)
        + len(core.list_namespaced_service(NAMESPACE, label_selector=selector).items)
        + len(core.list_namespaced_secret(NAMESPACE, label_selector=selector).items)
        + len(networking.list_namespaced_network_policy(NAMESPACE, label_selector=selector).items)
    )


def wait_until(probe: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def reconcile_latency(api: client.ApiClient, custom: client.CustomObjectsApi, name: str) -> float:
    start = time.perf_counter()
    custom.create_namespaced_custom_object("belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(name))
    wait_until(lambda: children(api, name) >= CHILDREN, f"children of {name}", 120)
    return time.perf_counter() - start


def reconciled_count(custom: client.CustomObjectsApi) -> int:
    listed: Any = custom.list_namespaced_custom_object("belay.dev", "v1alpha1", NAMESPACE, "agentsessions")
    return sum(1 for item in listed["items"] if (item.get("status") or {}).get("observedGeneration"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        root = Path(tmp)
        kube = ControlPlane(root / "kube")
        kube.start()
        operator = None
        try:
            install_crds(kube)
            kube.kubectl("create", "namespace", NAMESPACE)
            settings = OperatorSettings(
                event_store=f"sqlite://{root / 'events.db'}", artifact_store=f"file://{root / 'artifacts'}"
            )
            operator = OperatorProcess(kube, NAMESPACE, settings, root / "operator.log")
            operator.follow_interval_s = 1.0
            operator.start()
            api = load_api_client(str(kube.kubeconfig))
            custom = client.CustomObjectsApi(api)
            reconcile_latency(api, custom, "warm-up")  # the operator's first pass pays for discovery

            samples = [reconcile_latency(api, custom, f"latency-{i}") for i in range(LATENCY_RUNS)]
            p50 = statistics.median(samples)

            fleet_start = time.perf_counter()
            for i in range(FLEET - LATENCY_RUNS - 1):
                custom.create_namespaced_custom_object(
                    "belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(f"fleet-{i}")
                )
            wait_until(lambda: reconciled_count(custom) >= FLEET, "the fleet to be reconciled", 1800)
            fleet_seconds = time.perf_counter() - fleet_start
            time.sleep(10)  # idle: every worker back in its follow loop
            assert operator.process is not None
            rss = rss_mib(operator.process.pid)
        finally:
            if operator is not None:
                operator.stop()
            kube.stop()
    spread = f"min {min(samples):.3f}s, max {max(samples):.3f}s over {LATENCY_RUNS} sessions"
    return [
        Figure(
            "reconcile_latency_p50_s",
            p50,
            "s",
            COMMAND,
            f"create to all {CHILDREN} children existing, one subagent, no node; {spread}",
        ),
        Figure(
            "operator_rss_mib_500_sessions",
            rss,
            "MiB",
            COMMAND,
            f"VmRSS of the operator after {FLEET} sessions reconciled "
            f"({fleet_seconds:.0f}s to reconcile the fleet), SQLite record, follow interval 1s",
        ),
    ]
