"""A crash loop in a cluster ends: the operator runs a session whose every harness attempt ends the
same way at the same point (its model provider does not answer), waits its backoff before the
third attempt, and after the third starts no fourth pod: the session is Stalled with reason
RepeatedFailure, the error and what a person can do."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from belay.journal.events import LifecycleEvent
from belay.stores.factory import open_event_store
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    NAMESPACE,
    condition,
    e2e_cluster,
    session_status,
    stores,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

SESSION = "crash-loop"
SECRET = "unreachable-provider"
BACKOFF_S = 4.0


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
        failure_backoff_s=BACKOFF_S,
    )
    process = OperatorProcess(e2e_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()


def manifests() -> list[dict[str, Any]]:
    """A session on a model provider whose address answers nothing (port 9, discard): every
    attempt ends at its first model call with the same connection error."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
    }
    session = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION, "namespace": NAMESPACE},
        "spec": {
            "request": {"goal": "Anything: the provider never answers."},
            "executor": {"type": "openai", "model": "gpt-5", "credentialsSecret": SECRET},
            "subagents": [{"name": "solo"}],
        },
    }
    return [secret, session]


def harness_pods_started(kubelet: LocalKubelet) -> list[str]:
    return sorted(name for name in kubelet.started_pods if "-harness-" in name)


async def test_a_crash_loop_backs_off_then_stalls_with_no_fourth_pod(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,
    stores: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    kube = e2e_cluster
    api = load_api_client(str(kube.kubeconfig))
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet") as kubelet:
        for manifest in manifests():
            kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        try:
            backing_off = wait_for(
                lambda: (
                    (c := condition(session_status(kube, SESSION), "Reconciling"))
                    and c["reason"] == "BackingOff"
                    and c
                ),
                "the backoff after the second identical failure",
                timeout=180,
                describe=describe,
            )
            assert "2 attempts in a row ended the same way" in backing_off["message"], backing_off
            assert "APIConnectionError" in backing_off["message"], backing_off
            # While it backs off, no third harness pod runs.
            assert len(harness_pods_started(kubelet)) == 2, harness_pods_started(kubelet)
            stalled = wait_for(
                lambda: condition(s := session_status(kube, SESSION), "Stalled") and s,
                "the session stalled by the repeated failure",
                timeout=180,
                describe=describe,
            )
            found = condition(stalled, "Stalled")
            assert found is not None and found["reason"] == "RepeatedFailure", found
            assert "3 attempts in a row ended the same way" in found["message"], found
            assert condition(stalled, "Ready")["status"] == "False"  # type: ignore[index]
            # The operator starts nothing more: still three harness pods after twice the backoff.
            time.sleep(2 * BACKOFF_S)
            assert len(harness_pods_started(kubelet)) == 3, harness_pods_started(kubelet)
            live = kubectl_json(
                kube, "get", "pods", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={SESSION}"
            )["items"]
            assert not [p for p in live if p["status"].get("phase") in ("Pending", "Running")], live
        finally:
            kube.kubectl("delete", "agentsession", SESSION, "-n", NAMESPACE, "--timeout=60s", check=False)
            kube.kubectl("delete", "secret", SECRET, "-n", NAMESPACE, check=False)

    # The record holds three attempts, each ended by the same error, and the backoff between the
    # second and the third.
    store = open_event_store(stores[0])
    try:
        events = await store.read(names.record_id(NAMESPACE, SESSION))
    finally:
        await store.close()
    lifecycle = [e for e in events if isinstance(e, LifecycleEvent)]
    starts = [e for e in lifecycle if e.payload.kind == "harness_started"]
    ends = [e for e in lifecycle if e.payload.kind in ("harness_finished", "harness_lost")]
    assert len(starts) == 3 and len(ends) == 3, [(e.payload.kind, e.payload.reason) for e in lifecycle]
    gap = (starts[2].created_at - ends[1].created_at).total_seconds()
    assert gap >= BACKOFF_S - 0.5, gap
