"""The sandbox pool on the real node (docs/operator.md#the-sandbox-pool), with kube-router enforcing
the NetworkPolicies: a pool pod can be reached by nothing and reaches nothing (shown able to fail:
without the pool's policy it reaches DNS); a recovering attempt claims the pool's
pods, which from then on answer its harness, through their Service too, and reach only what their
subagent's profile allows; the session completes without repeating a step, and the claimed pods
never go back to the pool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.pool import pool_policy
from belay.journal.events import LifecycleKind
from belay.journal.state import fold
from tests.belay_cli import steps_run_twice
from tests.controller.operator_process import wait_for, wait_for_session_end
from tests.controller.test_operator import completed_steps
from tests.node.cluster import GOT_THROUGH, NodeCluster, dns, tcp
from tests.node.sessions import SESSION, SessionSetup, operated_session
from tests.testenv.node import DNS_SERVICE_IP, NODE_IP

pytestmark = [pytest.mark.testenv, pytest.mark.node]

POOL_SIZE = 2
SANDBOX_PORT = 8080


@pytest.fixture
def session(
    node_cluster: NodeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SessionSetup]:
    with operated_session(
        node_cluster,
        "pool",
        tmp_path,
        monkeypatch.setenv,
        sandbox_pool_size=POOL_SIZE,
        wait_for_namespace=True,
    ) as setup:
        yield setup


def describe(setup: SessionSetup) -> str:
    return f"{setup.describe()}\noperator log:\n{setup.operator_log()[-3000:]}"


def probe(setup: SessionSetup, pod: str, targets: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Whether each connection from inside the pod's container got through."""
    return {
        name: seen in GOT_THROUGH for name, seen in setup.cluster.probe(setup.namespace, pod, targets).items()
    }


def test_a_pool_pod_is_walled_off_until_an_attempt_claims_it_and_then_serves_that_attempt_only(
    node_cluster: NodeCluster, session: SessionSetup
) -> None:
    setup = session
    setup.cluster.apply([setup.manifest(approved=False)])
    wait_for(setup.waiting_for_approval, "the approval wait", timeout=300, describe=lambda: describe(setup))
    pool = wait_for(
        lambda: len(p := setup.pool_pods()) == POOL_SIZE and p, "a full pool", timeout=300,
        describe=lambda: describe(setup),
    )  # fmt: skip
    first_harness = f"{SESSION}-harness-0"
    pool_ip = {name: pod["status"]["podIP"] for name, pod in pool.items()}
    some_pool_pod = sorted(pool)[0]
    store = tcp(NODE_IP, setup.etcd_port)

    # Before its claim: the session's own harness cannot reach a pool pod, and a pool pod reaches
    # nothing, not even DNS or the stores.
    into_pool = {name: tcp(ip, SANDBOX_PORT) for name, ip in pool_ip.items()}
    assert probe(setup, first_harness, into_pool) == {name: False for name in pool}
    assert probe(setup, some_pool_pod, {"store": store, "dns": dns(DNS_SERVICE_IP)}) == {
        "store": False,
        "dns": False,
    }
    # Able to fail: without the pool's policy a pool pod, selected by no other policy, reaches DNS
    # (the harness could not reach it even then: its own egress names only its session's pods);
    # with the policy again, it does not. The operator writes a deleted policy again at once, so
    # it is paused meanwhile, as one that is down.
    to_dns = {"dns": dns(DNS_SERVICE_IP)}
    assert setup.operator is not None
    with setup.operator.paused():
        node_cluster.kube.kubectl("delete", "networkpolicy", names.POOL_POLICY, "-n", setup.namespace)
        wait_for(
            lambda: probe(setup, some_pool_pod, to_dns)["dns"] or None,
            "a pool pod to reach DNS without the pool's policy",
            timeout=120,
        )
        node_cluster.apply([pool_policy(setup.namespace)])
    wait_for(
        lambda: not probe(setup, some_pool_pod, to_dns)["dns"] or None,
        "the pool's policy enforced again",
        timeout=120,
    )
    # The pod the test ran its probe in is no longer one that ran nothing: out of the pool with it.
    node_cluster.kube.kubectl("delete", "pod", "-n", setup.namespace, some_pool_pod, "--wait=false")
    pool = wait_for(
        lambda: len(p := setup.pool_pods()) == POOL_SIZE and some_pool_pod not in p and p,
        "the pool refilled",
        timeout=300,
        describe=lambda: describe(setup),
    )

    done_before = completed_steps(fold(setup.events()))
    node_cluster.kube.kubectl("delete", "pod", "-n", setup.namespace, first_harness, "--wait=false")
    claimed = wait_for(
        lambda: len(c := setup.claimed_pods()) == 2 and c, "the next attempt's claims", timeout=180,
        describe=lambda: describe(setup),
    )  # fmt: skip
    assert {pod["metadata"]["name"] for pod in claimed.values()} == set(pool)
    status = wait_for(
        lambda: (
            (s := setup.waiting_for_approval())
            and s["harness"]["attempt"] > 0
            and s["harness"]["phase"] == "Running"
            and s
        ),
        "the next attempt to wait for the approval, its harness running",
        timeout=300,
        describe=lambda: describe(setup),
    )
    harness = status["harness"]["pod"]
    # After its claim: the attempt's harness reaches each claimed pod, by its address and through
    # its Service; the claimed pod still reaches nothing (its subagent's profile is `none`).
    for subagent, pod in claimed.items():
        service = f"{names.sandbox_service_name(SESSION, subagent)}.{setup.namespace}.svc.cluster.local"
        targets = {
            "address": tcp(pod["status"]["podIP"], SANDBOX_PORT),
            "service": tcp(service, SANDBOX_PORT),
        }
        assert probe(setup, harness, targets) == {"address": True, "service": True}, subagent
        assert probe(setup, pod["metadata"]["name"], {"store": store}) == {"store": False}, subagent

    setup.approve()
    done = wait_for_session_end(
        node_cluster.kube, setup.namespace, SESSION, timeout=600, describe=lambda: describe(setup)
    )
    assert done["phase"] == "Succeeded", describe(setup)
    events = setup.events()
    assert steps_run_twice(events) == []
    kinds = [getattr(e.payload, "kind", None) for e in events]
    assert LifecycleKind.HARNESS_STOPPED in kinds and LifecycleKind.HARNESS_LOST not in kinds
    assert done_before <= completed_steps(fold(events))
    # The claimed pods went with the session's end; none came back to the pool.
    wait_for(lambda: not setup.claimed_pods() or None, "the claimed pods to go", timeout=180)
    assert not set(setup.pool_pods()) & set(pool)
