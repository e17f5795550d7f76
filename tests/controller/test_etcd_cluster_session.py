"""A session whose record is in a three-member etcd cluster (the same etcd build, on loopback), run
by the operator with the kubelet stand-in: a follower stops while the harness writes, then the
leader while it waits, leaving no quorum; both come back. Every event written before a fault is
still there, no completed step runs twice, the session finishes, and the status says the store is
unavailable only while it was (tests/faults/etcd_session.py; tests/node runs the same on the node)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller.kube import load_api_client
from belay.controller.names import record_id
from belay.controller.settings import OperatorSettings
from belay.journal.events import Event
from belay.stores.factory import open_event_store
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    OperatorProcess,
    agentsession_status,
    wait_for_session_end,
)
from tests.controller.test_operator import cluster_manifest, harness_env, tickets  # noqa: F401 (fixture)
from tests.faults.etcd_session import Session, check, lose_a_follower_then_the_quorum
from tests.testenv.etcd import EtcdCluster
from tests.testenv.kube import ControlPlane

pytestmark = [pytest.mark.testenv, pytest.mark.slow]

NAMESPACE = "belay-etcd-faults"
SESSION = "quorum"
GRANT = cluster_manifest()["spec"]["approvals"][0]


@pytest.fixture(scope="module")
def faults_cluster(kube: ControlPlane) -> ControlPlane:
    from tests.api.kubehelpers import install_crds

    install_crds(kube)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    return kube


@pytest.fixture
def events_url(etcd_cluster: EtcdCluster) -> str:
    return etcd_cluster.events_url(f"/faults-{secrets.token_hex(4)}")


@pytest.fixture
def operator(faults_cluster: ControlPlane, events_url: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(
        event_store=events_url, artifact_store=f"file://{tmp_path / 'artifacts'}", image_pull_policy="Never"
    )
    process = OperatorProcess(faults_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


async def test_a_session_outlives_a_lost_follower_and_a_lost_quorum_of_its_etcd(
    faults_cluster: ControlPlane,
    etcd_cluster: EtcdCluster,
    events_url: str,
    operator: OperatorProcess,
    tickets: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    kube = faults_cluster
    manifest = cluster_manifest(SESSION)
    manifest["metadata"]["namespace"] = NAMESPACE
    del manifest["spec"]["approvals"]  # it waits for the approval at its end
    store = open_event_store(events_url)

    def status() -> dict[str, Any]:
        return agentsession_status(kube, NAMESPACE, SESSION)

    async def events() -> list[Event]:
        return list(await store.read(record_id(NAMESPACE, SESSION)))

    def approve() -> None:
        patch = json.dumps({"spec": {"approvals": [GRANT]}})
        kube.kubectl("patch", "agentsession", SESSION, "-n", NAMESPACE, "--type=merge", "-p", patch)

    def describe() -> str:
        pods = kube.kubectl("get", "pods", "-n", NAMESPACE, check=False).stdout
        return f"operator log:\n{operator.log()[-4000:]}\n{pods}\nstatus: {json.dumps(status())[-2000:]}"

    session = Session(
        status=status,
        events=events,
        waiting_for_approval=lambda: bool(status().get("pendingApprovals")),
        approve=approve,
        ended=lambda: wait_for_session_end(kube, NAMESPACE, SESSION, timeout=600, describe=describe),
        describe=describe,
    )
    api = load_api_client(str(kube.kubeconfig))
    try:
        with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets)):
            kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
            try:
                outcome = await lose_a_follower_then_the_quorum(etcd_cluster, session)
            finally:
                kube.kubectl(
                    "delete", "agentsession", SESSION, "-n", NAMESPACE, "--timeout=120s", check=False
                )
        check(outcome)
    finally:
        await store.close()
