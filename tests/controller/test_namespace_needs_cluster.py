"""A session in a namespace that lacks the harness's ServiceAccount and the record key Secret (no
`watchNamespaces`, nothing copied there yet), on the real control plane: the operator makes no pod
(the apiserver would refuse the harness pod on every retry, or it would wait Pending with no word),
and the session is Stalled with reason MissingInNamespace naming each missing object and the
command that makes it. Once both exist, the next pass makes the harness pod."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.settings import OperatorSettings
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    agentsession_status,
    cluster_manifest,
    condition,
    e2e_cluster,
    stores,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-bare"  # a session namespace nobody prepared
OPERATOR_NAMESPACE = "belay-system"
SESSION = "needs"
SERVICE_ACCOUNT = "belay-harness"
RECORD_KEY = "belay-record-key"


@pytest.fixture
def bare_namespace(e2e_cluster: ControlPlane) -> Iterator[str]:  # noqa: F811
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    e2e_cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    try:
        yield NAMESPACE
    finally:
        e2e_cluster.kubectl("delete", "agentsession", SESSION, "-n", NAMESPACE, "--timeout=60s", check=False)
        e2e_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.fixture
def operator(
    e2e_cluster: ControlPlane,  # noqa: F811
    bare_namespace: str,
    stores: tuple[str, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OperatorProcess]:
    monkeypatch.setenv("POD_NAMESPACE", OPERATOR_NAMESPACE)
    monkeypatch.setenv("BELAY_RECORD_KEY", secrets.token_hex(24))  # the operator holds the fleet's key
    settings = OperatorSettings(
        event_store=stores[0],
        artifact_store=stores[1],
        image_pull_policy="Never",
        harness_service_account=SERVICE_ACCOUNT,
        record_key_secret=RECORD_KEY,
        sandbox_pool_size=0,
    )
    process = OperatorProcess(e2e_cluster, bare_namespace, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


def harness_pods(kube: ControlPlane) -> list[dict[str, Any]]:
    selector = f"{names.LABEL_SESSION}={SESSION},{names.LABEL_COMPONENT}={names.COMPONENT_HARNESS}"
    return list(kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", selector).get("items", []))


def test_a_namespace_without_the_service_account_and_record_key_stalls_the_session_naming_them(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,
) -> None:
    kube = e2e_cluster
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    manifest = cluster_manifest(SESSION)
    manifest["metadata"]["namespace"] = NAMESPACE
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    stalled = wait_for(
        lambda: (
            (c := condition(agentsession_status(kube, NAMESPACE, SESSION), "Stalled"))
            and c["status"] == "True"
            and c
        ),
        "the session stalled on what its namespace lacks",
        timeout=60,
        describe=describe,
    )
    assert stalled["reason"] == "MissingInNamespace", stalled
    message = stalled["message"]
    assert "\n" not in message
    assert f"kubectl create serviceaccount {SERVICE_ACCOUNT} -n {NAMESPACE}" in message, message
    assert f"kubectl get secret {RECORD_KEY} -n {OPERATOR_NAMESPACE} -o json" in message, message
    assert f"kubectl apply -n {NAMESPACE} -f -" in message, message
    assert harness_pods(kube) == []
    assert "Traceback" not in operator.log()

    # What the message says to do, done: the next pass makes the harness pod.
    kube.kubectl("create", "serviceaccount", SERVICE_ACCOUNT, "-n", NAMESPACE)
    kube.kubectl(
        "create", "secret", "generic", RECORD_KEY, "-n", NAMESPACE,
        f"--from-literal=BELAY_RECORD_KEY={secrets.token_hex(24)}",
    )  # fmt: skip
    wait_for(lambda: harness_pods(kube), "the harness pod, once both exist", timeout=60, describe=describe)
    status = agentsession_status(kube, NAMESPACE, SESSION)
    assert (condition(status, "Stalled") or {}).get("reason") != "MissingInNamespace", status
