"""The example session on the real node (tests/testenv/node.py), run by the operator, with the
sandbox pool (docs/operator.md#the-sandbox-pool) and without it, side by side in one run:

- `pod_start_p50_s`: from the AgentSession created to its harness pod Running (the scheduler, the
  kubelet, containerd and runc starting a container of the Belay image, already imported);
- `cluster_recovery_p50_s`: with the pool, from the harness pod deleted (its harness stops cleanly
  on the kubelet's SIGTERM) to the first event the next attempt writes to the record (the
  operator noticing, starting the next attempt and claiming its sandboxes from the pool, a new
  pod scheduled and started, the harness taking the lease); `cluster_recovery_no_pool_p50_s` the
  same with the pool disabled (`sandboxPool.size` 0: the next attempt's sandbox pods start with
  its harness pod);
- `sandbox_claim_p50_s`: with the pool, from the next attempt's start (`harness_started`) to each
  of its sandboxes answering it with its subagent's token (`sandbox_started` or
  `sandbox_replaced`): the claim of a pool pod, handing it the token, and its first answer; the
  same wait without the pool is in its detail;
- `cluster_recovery_to_done_ratio`: the whole session with one harness pod deleted mid-session
  against the same session without, both with the pool.

Each session waits for its publish approval (the point where the lossy runs delete the harness
pod, once the pool is full); the approval is given at once in the run without a loss and once the
next attempt waits again in the runs with one, so all wait for nothing but the machine. The runs
alternate (no pool, pool, no loss) `PAIRS` times, each in a namespace and with an operator of its
own.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import wait_for, wait_for_session_end
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, operated_session
from tests.testenv.env import TestEnv
from tests.testenv.node import harness_image_for_sources, node_missing_reason

from belay.journal.events import Event, LifecycleKind
from bench.common import Figure

PAIRS = 3
POOL_SIZE = 2
COMMAND = "python -m bench bench_node"
SANDBOX_READY = (LifecycleKind.SANDBOX_STARTED, LifecycleKind.SANDBOX_REPLACED)


@dataclass
class Run:
    pod_start: float
    whole: float
    recovery: float | None = None
    sandbox_waits: tuple[float, ...] = ()


def harness_running(setup: SessionSetup, index: int) -> bool:
    pod = setup.pods().get(f"{SESSION}-harness-{index}")
    return bool(pod) and pod["status"].get("phase") == "Running"  # type: ignore[index]


def next_attempt_event(setup: SessionSetup, lost_attempt: int) -> Event | None:
    """The first event a harness of a later attempt than `lost_attempt` writes."""
    return next(
        (e for e in setup.events() if e.actor.kind == "harness" and (e.actor.attempt or 0) > lost_attempt),
        None,
    )


def sandbox_waits(events: list[Event], attempt: int) -> tuple[float, ...]:
    """For each sandbox of `attempt`: from its harness's start to the sandbox answering it."""
    of_attempt = [e for e in events if e.actor.kind == "harness" and e.actor.attempt == attempt]
    started = next(e for e in of_attempt if getattr(e.payload, "kind", None) == LifecycleKind.HARNESS_STARTED)
    return tuple(
        (e.created_at - started.created_at).total_seconds()
        for e in of_attempt
        if getattr(e.payload, "kind", None) in SANDBOX_READY
    )


def one_session(cluster: NodeCluster, work: Path, lose_harness: bool, pool_size: int) -> Run:
    session_dir = Path(tempfile.mkdtemp(dir=work))
    with operated_session(
        cluster, "bench", session_dir, os.environ.__setitem__, sandbox_pool_size=pool_size
    ) as setup:
        started = time.time()
        cluster.apply([setup.manifest(approved=False)])
        wait_for(
            lambda: harness_running(setup, 0),
            "the harness pod running",
            timeout=300,
            describe=setup.describe,
        )
        run = Run(pod_start=time.time() - started, whole=0.0)
        waiting = wait_for(
            setup.waiting_for_approval, "the approval wait", timeout=300, describe=setup.describe
        )
        if lose_harness:
            if pool_size:
                wait_for(
                    lambda: len(setup.pool_pods()) >= pool_size or None, "a full pool", timeout=300,
                    describe=setup.describe,
                )  # fmt: skip
            lost_attempt = waiting["harness"]["lease"]
            deleted = time.time()
            cluster.kube.kubectl(
                "delete", "pod", "-n", setup.namespace, waiting["harness"]["pod"], "--wait=false"
            )
            first = wait_for(
                lambda: next_attempt_event(setup, lost_attempt), "the next attempt's first event",
                timeout=300, describe=setup.describe,
            )  # fmt: skip
            run.recovery = first.created_at.timestamp() - deleted
            again = wait_for(
                lambda: (s := setup.waiting_for_approval()) and s["harness"]["lease"] > lost_attempt and s,
                "the next attempt to wait for the approval",
                timeout=300,
                describe=setup.describe,
            )
            run.sandbox_waits = sandbox_waits(setup.events(), again["harness"]["lease"])
        setup.approve()
        done = wait_for_session_end(
            cluster.kube, setup.namespace, SESSION, timeout=600, describe=setup.describe
        )
        if done["phase"] != "Succeeded":
            raise RuntimeError(f"the session ended {done['phase']}: {setup.describe()}")
        run.whole = time.time() - started
        return run


def listed(samples: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in samples)


def run() -> list[Figure]:
    reason = node_missing_reason()
    image, no_image = harness_image_for_sources()
    if reason or image is None:
        raise RuntimeError(reason or no_image)
    tag = image.reference.removeprefix("docker.io/library/")
    runs: dict[str, list[Run]] = {"no pool": [], "pool": [], "no loss": []}
    with tempfile.TemporaryDirectory(prefix="belay-bench-node-") as work_dir:
        work = Path(work_dir)
        env = TestEnv(work / "env", node=True, harness_image=image)
        saved = dict(os.environ)
        try:
            env.start()
            cluster = NodeCluster(env, tag)
            install_crds(cluster.kube)
            for _ in range(PAIRS):
                runs["no pool"].append(one_session(cluster, work, lose_harness=True, pool_size=0))
                runs["pool"].append(one_session(cluster, work, lose_harness=True, pool_size=POOL_SIZE))
                runs["no loss"].append(one_session(cluster, work, lose_harness=False, pool_size=POOL_SIZE))
        finally:
            os.environ.clear()
            os.environ.update(saved)
            env.stop()
    return figures(runs)


def figures(runs: dict[str, list[Run]]) -> list[Figure]:
    starts = [r.pod_start for kind in runs.values() for r in kind]
    recoveries = {
        kind: [r.recovery for r in runs[kind] if r.recovery is not None] for kind in ("pool", "no pool")
    }
    waits = {kind: [w for r in runs[kind] for w in r.sandbox_waits] for kind in ("pool", "no pool")}
    pod_start = statistics.median(starts)
    pooled, unpooled = statistics.median(recoveries["pool"]), statistics.median(recoveries["no pool"])
    lossy, plain = [r.whole for r in runs["pool"]], [r.whole for r in runs["no loss"]]
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
            value=pooled,
            unit="s",
            command=COMMAND,
            detail=(
                f"with the sandbox pool (size {POOL_SIZE}): median of {len(recoveries['pool'])}, harness "
                f"pod deleted to the next attempt's first event: {listed(recoveries['pool'])}; without the "
                f"pool {unpooled:.2f} s ({listed(recoveries['no pool'])}), side by side; pod start "
                f"{pod_start:.2f} s"
            ),
            goal="<= 2",
        ),
        Figure(
            key="cluster_recovery_no_pool_p50_s",
            value=unpooled,
            unit="s",
            command=COMMAND,
            detail=(
                f"the same with the pool disabled (sandboxPool.size 0): median of "
                f"{len(recoveries['no pool'])}: {listed(recoveries['no pool'])}"
            ),
        ),
        Figure(
            key="sandbox_claim_p50_s",
            value=statistics.median(waits["pool"]),
            unit="s",
            command=COMMAND,
            detail=(
                f"the next attempt's start to each claimed sandbox answering it with its token: median of "
                f"{len(waits['pool'])} ({listed(waits['pool'])}); without the pool, to its new sandbox pod "
                f"answering: {statistics.median(waits['no pool']):.2f} s ({listed(waits['no pool'])})"
            ),
            goal="<= 0.5",
        ),
        Figure(
            key="cluster_recovery_to_done_ratio",
            value=statistics.median(lossy) / statistics.median(plain),
            unit="x",
            command=COMMAND,
            detail=(
                f"with the pool: median whole session with one harness loss {statistics.median(lossy):.1f} s "
                f"({listed(lossy)}) against without {statistics.median(plain):.1f} s ({listed(plain)}), "
                f"{PAIRS} of each run alternately"
            ),
        ),
    ]
