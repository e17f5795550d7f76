"""The example session on the real node (tests/testenv/node.py), run by the operator:

- `pod_start_p50_s`: from the AgentSession created to its harness pod Running (the scheduler, the
  kubelet, containerd and runc starting a container of the Belay image, already imported);
- `cluster_recovery_p50_s`: from the harness pod deleted to the first event the next attempt
  writes to the record (the operator noticing, recording the loss, a new pod scheduled and started,
  the harness taking the lease);
- `cluster_recovery_to_done_ratio`: the whole session with one harness pod deleted mid-session
  against the same session without, run side by side.

Each session waits for its publish approval (the point where the lossy run deletes its harness
pod); the approval is given at once in the run without a loss and once the next attempt waits
again in the run with one, so both wait for nothing but the machine.
"""

from __future__ import annotations

import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess, wait_for, wait_for_session_end
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, new_setup, ticket_service
from tests.testenv.env import TestEnv
from tests.testenv.node import harness_image_for_sources, node_missing_reason

from belay.journal.events import Event, LifecycleKind
from bench.common import Figure

PAIRS = 3
COMMAND = "python -m bench bench_node"


def harness_running(setup: SessionSetup, index: int) -> bool:
    pod = setup.pods().get(f"{SESSION}-harness-{index}")
    return bool(pod) and pod["status"].get("phase") == "Running"  # type: ignore[index]


def next_attempt_event(setup: SessionSetup) -> Event | None:
    """The first event the harness writes after the operator recorded the loss."""
    events = setup.events()
    lost = next(
        (e.seq for e in events if getattr(e.payload, "kind", None) == LifecycleKind.HARNESS_LOST), None
    )
    if lost is None:
        return None
    return next((e for e in events if e.seq > lost and e.actor.kind == "harness"), None)


def one_session(cluster: NodeCluster, work: Path, lose_harness: bool) -> tuple[float, float, float | None]:
    """(pod start, whole session, recovery or None) for one run of the example."""
    namespace = f"bench-{secrets.token_hex(3)}"
    with ticket_service(work / f"{namespace}-tickets.json") as tickets:
        setup = new_setup(cluster, namespace, tickets, work / f"{namespace}-tickets.json")
        for key, value in setup.store_environment().items():
            os.environ[key] = value
        operator = OperatorProcess(
            cluster.kube, namespace, setup.settings(), work / f"{namespace}-operator.log"
        )
        operator.start()
        try:
            started = time.time()
            cluster.apply([setup.manifest(approved=False)])
            wait_for(
                lambda: harness_running(setup, 0),
                "the harness pod running",
                timeout=300,
                describe=setup.describe,
            )
            pod_start = time.time() - started
            wait_for(setup.waiting_for_approval, "the approval wait", timeout=300, describe=setup.describe)
            recovery = None
            if lose_harness:
                deleted = time.time()
                cluster.kube.kubectl("delete", "pod", "-n", namespace, f"{SESSION}-harness-0", "--wait=false")
                first = wait_for(
                    lambda: next_attempt_event(setup), "the next attempt's first event", timeout=300,
                    describe=setup.describe,
                )  # fmt: skip
                recovery = first.created_at.timestamp() - deleted
                wait_for(
                    lambda: (s := setup.waiting_for_approval()) and s["harness"]["attempt"] > 0,
                    "the next attempt to wait for the approval",
                    timeout=300,
                    describe=setup.describe,
                )
            setup.approve()
            done = wait_for_session_end(
                cluster.kube, namespace, SESSION, timeout=600, describe=setup.describe
            )
            if done["phase"] != "Succeeded":
                raise RuntimeError(f"the session ended {done['phase']}: {setup.describe()}")
            return pod_start, time.time() - started, recovery
        finally:
            cluster.kube.kubectl(
                "delete", "agentsession", "--all", "-n", namespace, "--timeout=120s", check=False
            )
            operator.stop()
            cluster.kube.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def run() -> list[Figure]:
    reason = node_missing_reason()
    image, no_image = harness_image_for_sources()
    if reason or image is None:
        raise RuntimeError(reason or no_image)
    tag = image.reference.removeprefix("docker.io/library/")
    with tempfile.TemporaryDirectory(prefix="belay-bench-node-") as work_dir:
        work = Path(work_dir)
        env = TestEnv(work / "env", node=True, harness_image=image)
        saved = dict(os.environ)
        try:
            env.start()
            cluster = NodeCluster(env, tag)
            install_crds(cluster.kube)
            starts: list[float] = []
            plain: list[float] = []
            lossy: list[float] = []
            recoveries: list[float] = []
            for _ in range(PAIRS):
                for lose in (False, True):
                    pod_start, whole, recovery = one_session(cluster, work, lose)
                    starts.append(pod_start)
                    (lossy if lose else plain).append(whole)
                    if recovery is not None:
                        recoveries.append(recovery)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            env.stop()
    pod_start = statistics.median(starts)
    recovery = statistics.median(recoveries)
    ratio = statistics.median(lossy) / statistics.median(plain)

    def listed(samples: list[float]) -> str:
        return ", ".join(f"{s:.2f}" for s in samples)

    return [
        Figure(
            key="pod_start_p50_s",
            value=pod_start,
            unit="s",
            command=COMMAND,
            detail=f"median of {len(starts)} sessions, AgentSession applied to harness pod Running: "
            + listed(starts),
        ),
        Figure(
            key="cluster_recovery_p50_s",
            value=recovery,
            unit="s",
            command=COMMAND,
            detail=(
                f"median of {len(recoveries)}, harness pod deleted to the next attempt's first event: "
                f"{listed(recoveries)}; pod start {pod_start:.2f} s"
            ),
            goal=f"<= pod start + 2 s ({pod_start + 2:.2f} s)",
        ),
        Figure(
            key="cluster_recovery_to_done_ratio",
            value=ratio,
            unit="x",
            command=COMMAND,
            detail=(
                f"median whole session with one harness loss {statistics.median(lossy):.1f} s "
                f"({listed(lossy)}) against without {statistics.median(plain):.1f} s ({listed(plain)}), "
                f"{PAIRS} pairs run alternately"
            ),
        ),
    ]
