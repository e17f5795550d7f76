"""The chart installs the operator as a real Deployment on the node (the Belay image imported into
containerd, never pulled): its pod logs in in-cluster through the `kubernetes` Service, holds the
Lease, and runs the example session to completion in another namespace."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.kubehelpers import install_crds
from tests.belay_cli import steps_run_twice
from tests.controller.operator_process import kubectl_json, wait_for, wait_for_session_end
from tests.controller.test_chart import CHART, helm
from tests.node.cluster import RESTRICTED, NodeCluster
from tests.node.sessions import SESSION, STORE_SECRET, SessionSetup, new_setup, ticket_service
from tests.testenv.node import NODE_IP, NODE_NAME

pytestmark = [pytest.mark.testenv, pytest.mark.node]

RELEASE = OPERATOR_NAMESPACE = "belay-system"


@pytest.fixture
def sessions_namespace(node_cluster: NodeCluster, tmp_path: Path) -> Iterator[SessionSetup]:
    install_crds(node_cluster.kube)
    tickets_file = tmp_path / "tickets.json"
    with ticket_service(tickets_file) as tickets:
        setup = new_setup(node_cluster, f"chart-{secrets.token_hex(3)}", tickets, tickets_file)
        try:
            yield setup
        finally:
            node_cluster.kube.kubectl("delete", "namespace", setup.namespace, "--wait=false", check=False)


def test_the_chart_runs_the_operator_on_the_node_and_it_completes_a_session(
    node_cluster: NodeCluster, sessions_namespace: SessionSetup, helm_bin: Path
) -> None:
    kube, setup = node_cluster.kube, sessions_namespace
    repository, tag = node_cluster.image.split(":")
    node_cluster.create_namespace(OPERATOR_NAMESPACE, RESTRICTED)
    secret = kubectl_json(kube, "get", "secret", STORE_SECRET, "-n", setup.namespace)
    node_cluster.apply([{**secret, "metadata": {"name": STORE_SECRET, "namespace": OPERATOR_NAMESPACE}}])
    egress = [{"cidr": f"{NODE_IP}/32", "ports": [setup.etcd_port, node_cluster.env.s3.port]}]
    model = [{"cidr": f"{NODE_IP}/32", "ports": [setup.tickets.port]}]
    installed = helm(
        helm_bin, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never", "--set", "replicaCount=1",
        "--set", f"stores.events={setup.events_url}", "--set", f"stores.artifacts=s3://{setup.bucket}",
        "--set", f"stores.existingSecret={STORE_SECRET}",
        "--set-json", f'watchNamespaces=["{setup.namespace}"]',
        "--set-json", f"sessions.storeEgress={json.dumps(egress)}",
        "--set-json", f"sessions.modelEgress={json.dumps(model)}",
        kube=kube,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    # The chart made the record key (on by default) there too: the record is written under it.
    key = kubectl_json(kube, "get", "secret", f"{RELEASE}-record-key", "-n", setup.namespace)
    setup.record_key = base64.b64decode(key["data"]["BELAY_RECORD_KEY"]).decode()

    def describe() -> str:
        logs = kube.kubectl(
            "logs", "-n", OPERATOR_NAMESPACE, f"deployment/{RELEASE}", "--tail=60", check=False
        )
        return setup.describe() + "\noperator:\n" + logs.stdout + logs.stderr

    try:
        holder = wait_for(
            lambda: (
                kubectl_json(kube, "get", "lease", "belay-operator", "-n", OPERATOR_NAMESPACE)
                .get("spec", {})
                .get("holderIdentity")
            ),
            "the operator pod to take the Lease",
            timeout=240,
            describe=describe,
        )
        # The kubelet reports the container a moment after it runs (the operator may take the
        # Lease first).
        pod = wait_for(
            lambda: (
                (p := kubectl_json(kube, "get", "pod", holder, "-n", OPERATOR_NAMESPACE))
                .get("status", {})
                .get("containerStatuses", [{}])[0]
                .get("containerID")
                and p
            ),
            "the kubelet to report the operator's container",
            timeout=60,
            describe=describe,
        )
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")

        node_cluster.apply([setup.manifest(approved=True)])
        done = wait_for_session_end(kube, setup.namespace, SESSION, timeout=600, describe=describe)
        assert done["phase"] == "Succeeded", describe()
        assert steps_run_twice(setup.events()) == []
        assert setup.tickets_filed() == 1
        # Every request the operator made was held to the chart's RBAC, and none was refused.
        logs = kube.kubectl("logs", "-n", OPERATOR_NAMESPACE, holder).stdout
        assert "forbidden" not in logs.lower()
        kube.kubectl("delete", "agentsession", SESSION, "-n", setup.namespace, "--timeout=120s")
    finally:
        helm(helm_bin, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, kube=kube)
        kube.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--wait=false", check=False)
