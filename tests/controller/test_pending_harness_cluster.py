"""A harness pod that never starts, on the real control plane: no kubelet runs the session's pods, so
they stay Pending, and the test reports for each harness pod what a kubelet that cannot pull its
image would (ImagePullBackOff, on the pod's status subresource). The operator shows the reason as
the session's Reconciling condition while the pod waits, ends the attempt at the start deadline with
the reason in the record, and after the third such end starts no fourth pod: the session is
Stalled (RepeatedFailure) with ImagePullBackOff in its message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.settings import OperatorSettings
from belay.journal.events import LifecycleEvent
from belay.stores.factory import open_event_store
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    NAMESPACE,
    cluster_manifest,
    condition,
    e2e_cluster,
    session_status,
    stores,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

SESSION = "cannot-pull"
DEADLINE_S = 8.0
PULL = 'Back-off pulling image "registry.example/belay-harness:missing"'


@pytest.fixture
def operator(
    e2e_cluster: ControlPlane,  # noqa: F811
    stores: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(
        event_store=stores[0],
        artifact_store=stores[1],
        image_pull_policy="Never",
        harness_start_deadline_s=DEADLINE_S,
        failure_backoff_s=1.0,
        sandbox_pool_size=0,
    )
    process = OperatorProcess(e2e_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


def harness_pods(kube: ControlPlane) -> list[dict[str, Any]]:
    selector = f"{names.LABEL_SESSION}={SESSION},{names.LABEL_COMPONENT}={names.COMPONENT_HARNESS}"
    return list(kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", selector).get("items", []))


def cannot_pull(kube: ControlPlane, seen: set[str]) -> None:
    """What a kubelet that cannot pull the image reports, on each harness pod not yet reported."""
    for pod in harness_pods(kube):
        name = pod["metadata"]["name"]
        if name in seen or pod["metadata"].get("deletionTimestamp"):
            continue
        status = {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "harness",
                    "image": "registry.example/belay-harness:missing",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": PULL}},
                }
            ],
        }
        kube.kubectl(
            "patch", "pod", name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        seen.add(name)


async def test_a_harness_pod_that_cannot_pull_its_image_ends_its_attempt_with_the_reason(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,
    stores: tuple[str, str],  # noqa: F811
) -> None:
    kube = e2e_cluster
    seen: set[str] = set()
    describe = lambda: f"pods: {sorted(seen)}\noperator log:\n{operator.log()[-4000:]}"  # noqa: E731
    kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(SESSION)))
    try:
        # While the pod waits: the kubelet's reason is the session's.
        waiting = wait_for(
            lambda: (
                cannot_pull(kube, seen),
                (c := condition(session_status(kube, SESSION), "Reconciling")),
                c and c["reason"] == "ImagePullBackOff" and c,
            )[-1],
            "the session to show ImagePullBackOff",
            timeout=60,
            describe=describe,
        )
        assert f"harness pod {SESSION}-harness-0 is Pending: ImagePullBackOff: {PULL}" in waiting["message"]
        assert condition(session_status(kube, SESSION), "Ready")["status"] == "False"  # type: ignore[index]

        # At the deadline the attempt ends and the next pod is made, each in turn, until the third
        # end of the same kind stalls the session.
        stalled = wait_for(
            lambda: (
                cannot_pull(kube, seen),
                (c := condition(session_status(kube, SESSION), "Stalled")) and c["status"] == "True" and c,
            )[-1],
            "the session stalled by the pod that never starts",
            timeout=180,
            describe=describe,
        )
        assert stalled["reason"] == "RepeatedFailure", stalled
        assert "3 attempts in a row ended the same way" in stalled["message"], stalled
        assert f"ImagePullBackOff: {PULL}" in stalled["message"], stalled
        assert len(seen) == 3, seen
        # No harness pod is left waiting.
        wait_for(
            lambda: not [p for p in harness_pods(kube) if not p["metadata"].get("deletionTimestamp")],
            "the last Pending harness pod to be deleted",
            timeout=30,
            describe=describe,
        )
    finally:
        kube.kubectl("delete", "agentsession", SESSION, "-n", NAMESPACE, "--timeout=60s", check=False)

    store = open_event_store(stores[0])
    try:
        events = await store.read(names.record_id(NAMESPACE, SESSION))
    finally:
        await store.close()
    lost = [e.payload for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == "harness_lost"]
    assert len(lost) == 3, lost
    for payload in lost:
        assert payload.reason == "HarnessPodLost"
        assert f"still Pending at its start deadline ({DEADLINE_S:g} s): ImagePullBackOff" in payload.detail
    assert not [e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == "harness_started"]
