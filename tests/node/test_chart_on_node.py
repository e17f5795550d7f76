"""docs/operator.md's "Install on a cluster", followed literally on the node: the blocks marked
`sh install` run in order, as written, in one shell, with the variables the reader sets pointing at
the node's stores (its etcd, its S3 server and a bucket on it) and at the Belay image imported into
containerd (never pulled). They create the namespaces and the store Secret, `helm install` the
chart (a real Deployment: its pod logs in in-cluster through the `kubernetes` Service and holds the
Lease), run the example session to Succeeded and print `kubectl belay brief`. The test then checks
what that left: the brief, the record (under the record key the chart made), the ticket filed once,
and no request of the operator refused by the chart's RBAC."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.controller import names
from belay.journal.state import fold
from tests.api.kubehelpers import REPO_ROOT
from tests.belay_cli import steps_run_twice
from tests.controller.operator_process import kubectl_json
from tests.controller.test_chart import helm
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, ticket_service
from tests.testenv.binaries import component
from tests.testenv.node import NODE_IP, NODE_NAME

pytestmark = [pytest.mark.testenv, pytest.mark.node]

RELEASE, OPERATOR_NAMESPACE = "belay", "belay-system"
DOC = REPO_ROOT / "docs/operator.md"


def install_steps() -> list[str]:
    """The section's `sh install` blocks, in order."""
    section = DOC.read_text().split("\n## Install on a cluster\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh install\n(.*?)^```$", section, flags=re.S | re.M)


@pytest.fixture
def setup(node_cluster: NodeCluster, helm_bin: Path, tmp_path: Path) -> Iterator[SessionSetup]:
    """The stores the reader brings: a prefix on the node's etcd and a bucket on its S3 server.
    The namespaces and the Secret are the doc's to make."""
    tickets_file = tmp_path / "tickets.json"
    namespace = f"team-{secrets.token_hex(3)}"
    with ticket_service(tickets_file) as tickets:
        found = SessionSetup(
            cluster=node_cluster,
            namespace=namespace,
            events_url=f"etcd://{node_cluster.env.etcd.endpoint.removeprefix('http://')}/{namespace}",
            bucket=f"{namespace}-{secrets.token_hex(4)}",
            tickets=tickets,
            tickets_file=tickets_file,
        )
        node_cluster.env.s3.client().create_bucket(Bucket=found.bucket)
        try:
            yield found
        finally:
            kube = node_cluster.kube
            kube.kubectl("delete", "agentsession", SESSION, "-n", namespace, "--timeout=120s", check=False)
            helm(helm_bin, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, kube=kube)
            for name in (namespace, OPERATOR_NAMESPACE):
                kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def reader_environment(node_cluster: NodeCluster, setup: SessionSetup, helm_bin: Path) -> dict[str, str]:
    """What the reader sets before the first block, for this node; and kubectl, helm and
    kubectl-belay on PATH, pointed at its cluster."""
    stores = setup.store_environment()
    s3_port = node_cluster.env.s3.port
    tools = [
        str(Path(component("kubernetes").path("kubectl")).parent),
        str(helm_bin.parent),
        str(Path(sys.executable).parent),  # kubectl-belay
    ]
    return {
        **os.environ,
        "PATH": os.pathsep.join([*tools, os.environ.get("PATH", "")]),
        "KUBECONFIG": str(node_cluster.kube.kubeconfig),
        "BELAY_IMAGE": node_cluster.image,
        "BELAY_IMAGE_PULL_POLICY": "Never",  # imported into containerd: the node has no registry
        "ETCD_URL": setup.events_url,
        "BUCKET": setup.bucket,
        "AWS_ACCESS_KEY_ID": stores["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": stores["AWS_SECRET_ACCESS_KEY"],
        "AWS_DEFAULT_REGION": stores["AWS_DEFAULT_REGION"],
        "AWS_ENDPOINT_URL": stores["AWS_ENDPOINT_URL"],
        "STORE_EGRESS": json.dumps([{"cidr": f"{NODE_IP}/32", "ports": [s3_port]}]),
        "MODEL_EGRESS": json.dumps([{"cidr": f"{NODE_IP}/32", "ports": [setup.tickets.port]}]),
        "TICKETS_URL": stores["BELAY_TICKETS_URL"],
        "TICKETS_TOKEN": stores["BELAY_TICKETS_TOKEN"],
        "SESSIONS": setup.namespace,
    }


def test_the_documented_install_runs_a_session_to_succeeded_on_the_node(
    node_cluster: NodeCluster, setup: SessionSetup, helm_bin: Path
) -> None:
    kube = node_cluster.kube
    steps = install_steps()
    assert len(steps) == 4 and "helm install belay charts/belay" in steps[2], steps
    assert node_cluster.image.startswith("belay-harness:")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(steps)],
        cwd=REPO_ROOT,
        env=reader_environment(node_cluster, setup, helm_bin),
        capture_output=True,
        text=True,
        timeout=1800,
    )

    def describe() -> str:
        logs = kube.kubectl(
            "logs", "-n", OPERATOR_NAMESPACE, f"deployment/{RELEASE}", "--tail=60", check=False
        )
        return f"{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}\n{setup.describe()}\noperator:\n{logs.stdout}"

    assert ran.returncode == 0, describe()
    # The helm install printed the chart's NOTES; the last block printed the brief.
    assert "kubectl -n belay-system rollout status deployment/belay" in ran.stdout, describe()
    assert ran.stdout.count("condition met") == 1, describe()  # kubectl wait: Succeeded
    brief = ran.stdout.rsplit("condition met", 1)[1]
    assert re.search(rf"^Session \S*{SESSION}: Succeeded ", brief, flags=re.M), brief
    assert "Steps" in brief, brief

    # The operator ran as a pod of the node, held the Lease, and no request of it was refused.
    holder = kubectl_json(kube, "get", "lease", "belay-operator", "-n", OPERATOR_NAMESPACE)["spec"][
        "holderIdentity"
    ]
    pod = kubectl_json(kube, "get", "pod", holder, "-n", OPERATOR_NAMESPACE)
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert "forbidden" not in kube.kubectl("logs", "-n", OPERATOR_NAMESPACE, holder).stdout.lower()
    # The harness ran as the chart's harness account, with requests: never BestEffort.
    selector = f"{names.LABEL_COMPONENT}={names.COMPONENT_HARNESS}"
    harness = kubectl_json(kube, "get", "pods", "-n", setup.namespace, "-l", selector)
    for item in harness["items"]:
        assert item["spec"]["serviceAccountName"] == "belay-harness"
        assert item["status"].get("qosClass") != "BestEffort"

    # The record is written under the record key the chart made, and holds one run of each step.
    key = kubectl_json(kube, "get", "secret", f"{RELEASE}-record-key", "-n", setup.namespace)
    setup.record_key = base64.b64decode(key["data"]["BELAY_RECORD_KEY"]).decode()
    events = setup.events()
    assert steps_run_twice(events) == []
    assert {"fix.patch", "report.md"} <= set(fold(events).deliverables)
    assert setup.tickets_filed() == 1
