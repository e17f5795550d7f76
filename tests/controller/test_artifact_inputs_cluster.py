"""`inputs[].artifact` with the operator against the test control plane, its pods run by the local
kubelet stand-in: a producer session publishes a proven report; a consumer of the same namespace
takes it (the operator pins its sha256 in the consumer's record before the first harness pod, and
the consumer's first sandbox is seeded with exactly those bytes); a consumer of another namespace
naming the same session gets nothing: it stalls, one line naming the session and the deliverable,
and no pod is made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.controller.kube import load_api_client
from belay.controller.names import record_id
from belay.controller.settings import OperatorSettings
from belay.journal.state import fold
from belay.stores.factory import open_artifact_store, open_event_store
from tests.api.kubehelpers import install_crds
from tests.cli.test_artifact_inputs import CONSUMER, PRODUCER, consumer_manifest, producer_manifest
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    OperatorProcess,
    agentsession_status,
    kubectl_json,
    wait_for,
    wait_for_session_end,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

TEAM_A = "belay-artifacts-a"
TEAM_B = "belay-artifacts-b"


def in_cluster(path: Path, namespace: str) -> dict[str, Any]:
    """A manifest `belay run` would take, in a namespace, its plan at an absolute path."""
    manifest = yaml.safe_load(path.read_text())
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["executor"]["plan"] = str(path.parent / manifest["spec"]["executor"]["plan"])
    return dict(manifest)


def harness_pods(kube: ControlPlane, name: str, namespace: str) -> list[str]:
    listed = kubectl_json(
        kube, "get", "pods", "-n", namespace, "-l", f"belay.dev/session={name},belay.dev/component=harness"
    )
    return [p["metadata"]["name"] for p in listed.get("items", [])]


def stalled(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Stalled"), {})


async def test_a_session_takes_the_proven_deliverable_of_a_session_of_its_namespace_only(
    kube: ControlPlane, tmp_path: Path
) -> None:
    install_crds(kube)
    for namespace in (TEAM_A, TEAM_B):
        kube.kubectl("create", "namespace", namespace)
    events, artifacts = f"sqlite://{tmp_path / 'events.db'}", f"file://{tmp_path / 'artifacts'}"
    settings = OperatorSettings(event_store=events, artifact_store=artifacts, image_pull_policy="Never")
    operator = OperatorProcess(
        kube, TEAM_A, settings, tmp_path / "operator.log", more_namespaces=[TEAM_B]
    ).start()
    describe = lambda: f"operator log:\n{operator.log()[-6000:]}"  # noqa: E731
    try:
        api = load_api_client(str(kube.kubeconfig))
        with LocalKubelet(api, TEAM_A, tmp_path / "kubelet"):
            kube.kubectl(
                "create", "-f", "-", input=json.dumps(in_cluster(producer_manifest(tmp_path), TEAM_A))
            )
            done = wait_for_session_end(kube, TEAM_A, PRODUCER, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", done

            consumer = in_cluster(consumer_manifest(tmp_path / "consumer"), TEAM_A)
            kube.kubectl("create", "-f", "-", input=json.dumps(consumer))
            done = wait_for_session_end(kube, TEAM_A, CONSUMER, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", (done, describe())

            # Another namespace's session of the consumer's name names the same source: refused.
            elsewhere = in_cluster(consumer_manifest(tmp_path / "elsewhere"), TEAM_B)
            kube.kubectl("create", "-f", "-", input=json.dumps(elsewhere))
            status = wait_for(
                lambda: (
                    (s := agentsession_status(kube, TEAM_B, CONSUMER))
                    and stalled(s).get("status") == "True"
                    and s
                ),
                "the refusal in the other namespace",
                timeout=120,
                describe=describe,
            )
    finally:
        operator.stop()

    refusal = stalled(status)
    assert refusal["reason"] == "ArtifactInputRefused"
    assert refusal["message"] == (
        f"artifact input: deliverable report.md of session {PRODUCER}: there is no session {PRODUCER} "
        f"in namespace {TEAM_B}"
    )
    assert harness_pods(kube, CONSUMER, TEAM_B) == []

    store = open_event_store(events)
    try:
        produced = fold(await store.read(record_id(TEAM_A, PRODUCER)))
        consumed = fold(await store.read(record_id(TEAM_A, CONSUMER)))
        refused = fold(await store.read(record_id(TEAM_B, CONSUMER)))
    finally:
        await store.close()
    report = produced.artifacts["report.md"].ref.sha256
    assert dict(consumed.input_pins) == {f"{PRODUCER}/report.md": report}
    blobs = open_artifact_store(artifacts)
    assert blobs.get(consumed.artifacts["copy.md"].ref.sha256) == blobs.get(report)
    assert dict(refused.input_pins) == {}
