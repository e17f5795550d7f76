"""The chart's operator Deployment running in the test cluster: `helm install` with the stores
from a Secret (an etcd event store and an S3 artifact store), two replicas with leader election.
The kube-controller-manager makes the ReplicaSet and its pods; the local kubelet runs them like any
pod, with a service account token (in-cluster login), so every request the operator makes is held
to the chart's RBAC. One replica holds the Lease and acts, the other waits (both answer the liveness
probe); the leader's pod is deleted mid-session, another replica takes the Lease and the session
completes without repeating a completed step."""

from __future__ import annotations

import base64
import json
import os
import secrets
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from belay.controller.kube import load_api_client
from belay.controller.names import record_id
from belay.journal.state import fold
from belay.stores.factory import normalize_spec, open_event_store
from tests.controller import test_operator
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    agentsession_status,
    kubectl_json,
    wait_for,
    wait_for_session_end,
)
from tests.controller.test_chart import CHART, helm
from tests.controller.test_operator import (
    FAULT_POINT,
    cluster_manifest,
    completed_steps,
    harness_env,
    harness_lost_seq,
    steps_run_after,
    wait_for_checkpoint,
)
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

tickets = test_operator.tickets  # the ticket service the example's tools call

RELEASE = OPERATOR_NAMESPACE = "belay-deploy"
SESSIONS_NAMESPACE = "belay-deploy-sessions"
STORE_SECRET = "belay-stores"
LEASE = "belay-operator"
SESSION = "parser-fix"
RECORD = record_id(SESSIONS_NAMESPACE, SESSION)


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def store_secret(namespace: str, s3: S3Server) -> dict[str, Any]:
    values = {
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_ENDPOINT_URL": s3.endpoint_url,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": STORE_SECRET, "namespace": namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def record_key(kube: ControlPlane) -> str:
    secret = kubectl_json(kube, "get", "secret", f"{RELEASE}-record-key", "-n", SESSIONS_NAMESPACE)
    return base64.b64decode(secret["data"]["BELAY_RECORD_KEY"]).decode()


def operator_pods(kube: ControlPlane) -> dict[str, dict[str, Any]]:
    listed = kubectl_json(
        kube, "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}"
    )
    return {p["metadata"]["name"]: p for p in listed.get("items", [])}


def lease_holder(kube: ControlPlane) -> str | None:
    lease = kubectl_json(kube, "get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)
    return lease.get("spec", {}).get("holderIdentity")


def session_status(kube: ControlPlane) -> dict[str, Any]:
    return agentsession_status(kube, SESSIONS_NAMESPACE, SESSION)


def http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.status, response.read().decode()


def counted(metrics_text: str, name: str) -> float:
    """The sum of a metric's samples over all label values (0 when it has none yet)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == name
    )


async def test_chart_deployment_elects_one_leader_and_a_lost_leader_is_replaced_mid_session(
    kube: ControlPlane,
    helm_bin: Path,
    etcd_endpoint: str,
    s3_server: S3Server,
    tickets: str,
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the local kubelet mounts the service account token in a mount namespace: needs root")
    events_url = f"etcd://{etcd_endpoint.removeprefix('http://')}/belay-deploy-{secrets.token_hex(4)}"
    bucket = f"belay-deploy-{secrets.token_hex(4)}"
    s3_server.client().create_bucket(Bucket=bucket)
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    objects = [
        namespace(OPERATOR_NAMESPACE, restricted),
        namespace(SESSIONS_NAMESPACE, restricted),
        # The operator loads it with envFrom; so does every harness, in its session's namespace.
        store_secret(OPERATOR_NAMESPACE, s3_server),
        store_secret(SESSIONS_NAMESPACE, s3_server),
    ]
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    installed = helm(
        helm_bin,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--set",
        f"stores.events={events_url}",
        "--set",
        f"stores.artifacts=s3://{bucket}",
        "--set",
        f"stores.existingSecret={STORE_SECRET}",
        "--set-json",
        f'watchNamespaces=["{SESSIONS_NAMESPACE}"]',
        kube=kube,
    )
    assert installed.returncode == 0, installed.stderr

    api = load_api_client(str(kube.kubeconfig))
    # The record is written under the record key the chart made (on by default).
    store = open_event_store({**normalize_spec(events_url), "record_key": record_key(kube)})
    operators = LocalKubelet(api, OPERATOR_NAMESPACE, tmp_path / "operator-node")
    sessions = LocalKubelet(
        api, SESSIONS_NAMESPACE, tmp_path / "session-node", extra_env=harness_env(tickets, FAULT_POINT)
    )

    def describe() -> str:
        logs = "\n".join(f"--- {name}:\n{operators.log_of(name)[-3000:]}" for name in list(operators.pods))
        errors = operators.errors[-3:] + sessions.errors[-3:]
        return f"lease holder: {lease_holder(kube)}\nkubelet errors: {errors}\n{logs}"

    try:
        with operators, sessions:
            # Deployment -> ReplicaSet -> two pods, started with their token; one takes the Lease.
            started = wait_for(
                lambda: len(operators.pods) == 2 and sorted(operators.pods),
                "two operator replicas",
                timeout=60,
                describe=describe,
            )
            assert sorted(operator_pods(kube)) == started
            leader = wait_for(lambda: lease_holder(kube), "a replica to take the Lease", describe=describe)
            (standby,) = set(started) - {leader}
            for name in started:
                pod = operator_pods(kube)[name]
                assert pod["status"]["phase"] == "Running"
                assert pod["spec"]["serviceAccountName"] == RELEASE

            kube.kubectl("apply", "-f", "-", input=json.dumps(in_sessions_namespace(cluster_manifest())))

            await wait_for_checkpoint(store, RECORD, "implementer/fix", describe, timeout=90)
            assert session_status(kube)["phase"] == "Running"

            # Both replicas answer the liveness probe; the leader acted (its metrics count
            # reconciles), the standby, which never held the Lease, did nothing.
            assert lease_holder(kube) == leader
            leader_ports, standby_ports = operators.pods[leader].ports, operators.pods[standby].ports
            assert http_get(leader_ports["health"], "/healthz")[0] == 200
            assert http_get(standby_ports["health"], "/healthz")[0] == 200
            status, leader_metrics = http_get(leader_ports["metrics"], "/metrics")
            assert status == 200 and counted(leader_metrics, "belay_reconciles_total") > 0
            assert counted(leader_metrics, "belay_sessions") == 1
            standby_metrics = http_get(standby_ports["metrics"], "/metrics")[1]
            assert "belay_sessions" in standby_metrics
            assert counted(standby_metrics, "belay_reconciles_total") == 0
            assert " leads " not in operators.log_of(standby)

            old_lease = (await store.current_lease(RECORD)).number  # type: ignore[union-attr]
            done_before = completed_steps(fold(await store.read(RECORD)))
            assert done_before, "the fault point comes after completed steps"

            # The leader's pod goes, and with it (as on a lost node) the stopped harness: nobody acts
            # until the Lease runs out; then another replica takes it and recovers the session alone.
            # That is the standby or the pod the ReplicaSet made in the leader's place, whichever
            # candidate polls first after the expiry.
            lost = ("--wait=false", "--grace-period=0", "--force")  # no SIGTERM first: a lost node
            kube.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, leader, *lost)
            wait_for(lambda: leader not in operators.pods, "the leader's process to be killed", timeout=30)
            kube.kubectl("delete", "pod", "-n", SESSIONS_NAMESPACE, f"{SESSION}-harness-0", *lost)
            new_leader = wait_for(
                lambda: (holder := lease_holder(kube)) != leader and holder,
                "another replica to take the Lease",
                describe=describe,
            )
            done = wait_for_session_end(kube, SESSIONS_NAMESPACE, SESSION, timeout=300, describe=describe)
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1)

            events = await store.read(RECORD)
            state = fold(events)
            assert steps_run_after(events, harness_lost_seq(events)).isdisjoint(done_before)
            assert state.lifecycle.lease > old_lease
            assert {"fix.patch", "report.md"} <= set(state.deliverables)

            # Two replicas again: the standby and the ReplicaSet's replacement for the deleted pod.
            # The new leader's kopf took the health port over from its candidate phase and did the
            # recovery; the other replica did nothing. A surplus pod the ReplicaSet made meanwhile
            # is deleted gracefully: it runs until its operator has stopped on SIGTERM.
            replicas = wait_for(
                lambda: len(operators.pods) == 2 and set(operators.pods),
                "two replicas, a surplus one stopped",
                describe=describe,
            )
            assert new_leader in replicas and len(replicas) == 2 and leader not in replicas
            assert lease_holder(kube) == new_leader
            new_leader_ports = operators.pods[new_leader].ports
            status, health = http_get(new_leader_ports["health"], "/healthz")
            assert status == 200 and "candidate" not in health
            new_leader_metrics = http_get(new_leader_ports["metrics"], "/metrics")[1]
            assert counted(new_leader_metrics, "belay_harness_replacements_total") == 1
            (waiting,) = replicas - {new_leader}
            waiting_ports = operators.pods[waiting].ports
            assert http_get(waiting_ports["health"], "/healthz")[0] == 200
            assert counted(http_get(waiting_ports["metrics"], "/metrics")[1], "belay_reconciles_total") == 0

            # The chart's RBAC was enough: no replica's request was refused.
            logs = {log.parent.name: log.read_text() for log in (tmp_path / "operator-node").glob("*/log")}
            assert len(logs) >= 3  # the two first replicas, the replacement, any surplus one
            assert [name for name, text in logs.items() if "forbidden" in text.lower()] == []

            kube.kubectl("delete", "agentsession", SESSION, "-n", SESSIONS_NAMESPACE, "--timeout=60s")
    finally:
        await store.close()
        helm(helm_bin, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, kube=kube)
        for name in (SESSIONS_NAMESPACE, OPERATOR_NAMESPACE):
            kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def in_sessions_namespace(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["namespace"] = SESSIONS_NAMESPACE
    return manifest
