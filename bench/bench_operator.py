"""The operator against the real control plane (no node: pods stay Pending, so this measures the
operator and the apiserver, not container starts).

- reconcile_latency_p50_s: from creating an AgentSession to every child object existing (harness
  and sandbox pods, the Service, three NetworkPolicies, the token Secret), median of several.
- operator_rss_mib_500_sessions: resident memory of the operator process once 500 sessions are
  reconciled (each has a status with its observedGeneration), idle in their follow loops.
- operator_sessions_<N>_*: a fleet of N AgentSessions (5,000 unless BELAY_BENCH_FLEET says
  otherwise) with their record in etcd, half of them active (a writer appends events to their
  records, as their harnesses would) and half idle: the operator's RSS, the reconcile latency of
  new sessions among them while the active half moves, and the operator's CPU once nothing
  changes (its user and system seconds, from /proc, over the last of several consecutive windows
  after the last event; every window is in the figure's detail).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess
from tests.controller.sessions import pending_session
from tests.testenv.etcd import EtcdServer
from tests.testenv.kube import ControlPlane

from belay.controller import names
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.etcd import EtcdEventStore
from bench.common import Figure

NAMESPACE = "bench"
LATENCY_RUNS = 15
FLEET = 500
# A session with one subagent has seven children: two pods, a Service, three policies, a Secret.
CHILDREN = 7
COMMAND = "python -m bench bench_operator"
FLEET_GOAL = 5000
FLEET_SESSIONS = int(os.environ.get("BELAY_BENCH_FLEET", str(FLEET_GOAL)))
# Said of a run for fewer sessions: what the full fleet took on the 2-core machine the published
# figures come from.
SMALLER_FLEET_WHY = (
    "at 5,000, under a load average of 11 to 14 from other work, reconciling the fleet took 14 minutes "
    "and the whole run about 20"
)
FLEET_LATENCY_RUNS = 9
CREATING_THREADS = 8
# Events a second the writer appends across the active half of the fleet (each one wakes a worker
# for a pass and changes a status).
ACTIVE_EVENTS_PER_S = 1.0
# The operator's CPU is sampled over consecutive windows after the last event: the first ones
# still hold the passes that the writer's events queued; the last one is the figure.
QUIET_WINDOW_S = 60.0
QUIET_WINDOWS = 6
RECORD_PREFIX = "/bench"
# The index of a new session's first attempt, which names its harness pod.
FIRST_ATTEMPT = 0


def session(name: str) -> dict[str, Any]:
    return pending_session(name, NAMESPACE, "measure the operator")


def children(api: client.ApiClient, name: str) -> int:
    selector = f"belay.dev/session={name}"
    core = client.CoreV1Api(api)
    networking = client.NetworkingV1Api(api)
    return (
        len(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)
        + len(core.list_namespaced_service(NAMESPACE, label_selector=selector).items)
        + len(core.list_namespaced_secret(NAMESPACE, label_selector=selector).items)
        + len(networking.list_namespaced_network_policy(NAMESPACE, label_selector=selector).items)
    )


def wait_until(probe: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def wait_slowly(probe: Any, what: str, timeout: float) -> None:
    """For probes that list the whole fleet: seldom, so the listing does not load the apiserver."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(5)


def reconcile_latency(api: client.ApiClient, custom: client.CustomObjectsApi, name: str) -> float:
    start = time.perf_counter()
    custom.create_namespaced_custom_object("belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(name))
    wait_until(lambda: children(api, name) >= CHILDREN, f"children of {name}", 120)
    return time.perf_counter() - start


def reconciled_count(custom: client.CustomObjectsApi) -> int:
    listed: Any = custom.list_namespaced_custom_object("belay.dev", "v1alpha1", NAMESPACE, "agentsessions")
    return sum(1 for item in listed["items"] if (item.get("status") or {}).get("observedGeneration"))


def fleet_reconcile_latency(api: client.ApiClient, custom: client.CustomObjectsApi, name: str) -> float:
    """Like `reconcile_latency`, polling one object by name (a listing by label would scan every
    pod of the fleet): the first attempt's harness pod, the last child a pass applies; then every
    child is counted once."""
    core = client.CoreV1Api(api)
    pod = names.harness_pod_name(name, FIRST_ATTEMPT)

    def exists() -> bool:
        try:
            core.read_namespaced_pod(pod, NAMESPACE)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    start = time.perf_counter()
    custom.create_namespaced_custom_object("belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(name))
    wait_until(exists, f"the harness pod of {name}", 300)
    elapsed = time.perf_counter() - start
    found = children(api, name)
    if found < CHILDREN:
        raise RuntimeError(f"{name}: the harness pod exists but only {found} of {CHILDREN} children do")
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User and system CPU of the process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    """The process's CPU seconds over the next `seconds` of wall time, divided by them."""
    cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu_before) / (time.monotonic() - wall_before)


class RecordWriter:
    """Appends notes round-robin to the records of the active sessions, at a steady rate, from a
    thread of its own (as their harnesses would, elsewhere)."""

    def __init__(self, endpoint: str, sessions: list[str], per_second: float) -> None:
        self.endpoint = endpoint
        self.sessions = sessions
        self.per_second = per_second
        self.appended = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        store = EtcdEventStore([self.endpoint], prefix=RECORD_PREFIX)
        try:
            while not self._stop.is_set():
                name = self.sessions[self.appended % len(self.sessions)]
                note = Note(note_id=f"step-{self.appended}", kind=NoteKind.FINDING, text="working")
                await store.append(names.record_id(NAMESPACE, name), [EventDraft(payload=note)])
                self.appended += 1
                await asyncio.sleep(1 / self.per_second)
        finally:
            await store.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def fleet(root: Path, count: int) -> list[Figure]:
    """The operator with `count` sessions, half active and half idle, the record in etcd."""
    kube = ControlPlane(root / "kube")
    record = EtcdServer(root / "record-etcd")
    operator = writer = None
    kube.start()
    try:
        record.start()
        install_crds(kube)
        kube.kubectl("create", "namespace", NAMESPACE)
        address = record.endpoint.removeprefix("http://")
        settings = OperatorSettings(
            event_store=f"etcd://{address}{RECORD_PREFIX}", artifact_store=f"file://{root / 'artifacts'}"
        )
        operator = OperatorProcess(kube, NAMESPACE, settings, root / "operator-fleet.log")
        operator.follow_interval_s = 300.0  # the default: the watch wakes the workers
        operator.start()
        api = load_api_client(str(kube.kubeconfig))
        custom = client.CustomObjectsApi(api)
        reconcile_latency(api, custom, "warm-up")

        fleet_start = time.perf_counter()
        names = [f"fleet-{i}" for i in range(count - 1)]
        # From several threads, so that the pace measured is the operator's, not this client's.
        with ThreadPoolExecutor(CREATING_THREADS) as creating:
            list(
                creating.map(
                    lambda name: custom.create_namespaced_custom_object(
                        "belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(name)
                    ),
                    names,
                )
            )
        wait_slowly(lambda: reconciled_count(custom) >= count, "the fleet to be reconciled", 3600)
        fleet_seconds = time.perf_counter() - fleet_start

        active = names[::2]
        writer = RecordWriter(record.endpoint, active, ACTIVE_EVENTS_PER_S)
        writer.start()
        time.sleep(10)  # the writer's events reach the operator before the samples start
        samples = [fleet_reconcile_latency(api, custom, f"new-{i}") for i in range(FLEET_LATENCY_RUNS)]
        writer.stop()
        appended = writer.appended
        writer = None

        assert operator.process is not None
        pid = operator.process.pid
        quiet = [cpu_share(pid, QUIET_WINDOW_S) for _ in range(QUIET_WINDOWS)]
        cpu = quiet[-1]
        rss = rss_mib(pid)
    finally:
        if writer is not None:
            writer.stop()
        if operator is not None:
            operator.stop()
        record.stop()
        kube.stop()
    total = count + FLEET_LATENCY_RUNS
    p50 = statistics.median(samples)
    setup = (
        f"{total} AgentSessions, record in etcd, {len(active)} active (a writer appended {appended} "
        f"events to their records at {ACTIVE_EVENTS_PER_S:g}/s during the samples) and the rest idle; "
        f"{fleet_seconds:.0f}s to reconcile the first {count}; no node"
    )
    if count < FLEET_GOAL:
        setup += f"; {count} of the {FLEET_GOAL:,} asked for (BELAY_BENCH_FLEET={count}): {SMALLER_FLEET_WHY}"
    key = f"operator_sessions_{count}"
    figures = [
        Figure(
            f"{key}_rss_mib",
            rss,
            "MiB",
            COMMAND,
            f"VmRSS of the operator after the quiet window; {setup}",
            goal="<= 1024",
        ),
        Figure(
            f"{key}_reconcile_latency_p50_s",
            p50,
            "s",
            COMMAND,
            f"create to all {CHILDREN} children of a new session, median of {FLEET_LATENCY_RUNS} "
            f"(min {min(samples):.3f}s, max {max(samples):.3f}s) while the active half moved; {setup}",
            goal="<= 1",
        ),
        Figure(
            f"{key}_idle_cpu_percent",
            cpu * 100,
            "% of one core",
            COMMAND,
            f"the operator's user+system CPU seconds over the last of {QUIET_WINDOWS} consecutive "
            f"{QUIET_WINDOW_S:g}s windows after the last event, divided by the window (all of them: "
            f"{', '.join(f'{share * 100:.1f}' for share in quiet)} %); {setup}",
            goal="< 5",
        ),
    ]
    return figures


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        root = Path(tmp)
        kube = ControlPlane(root / "kube")
        kube.start()
        operator = None
        try:
            install_crds(kube)
            kube.kubectl("create", "namespace", NAMESPACE)
            settings = OperatorSettings(
                event_store=f"sqlite://{root / 'events.db'}", artifact_store=f"file://{root / 'artifacts'}"
            )
            operator = OperatorProcess(kube, NAMESPACE, settings, root / "operator.log")
            operator.follow_interval_s = 300.0  # the default: the record's watch wakes the workers
            operator.start()
            api = load_api_client(str(kube.kubeconfig))
            custom = client.CustomObjectsApi(api)
            reconcile_latency(api, custom, "warm-up")  # the operator's first pass pays for discovery

            samples = [reconcile_latency(api, custom, f"latency-{i}") for i in range(LATENCY_RUNS)]
            p50 = statistics.median(samples)

            fleet_start = time.perf_counter()
            for i in range(FLEET - LATENCY_RUNS - 1):
                custom.create_namespaced_custom_object(
                    "belay.dev", "v1alpha1", NAMESPACE, "agentsessions", session(f"fleet-{i}")
                )
            wait_until(lambda: reconciled_count(custom) >= FLEET, "the fleet to be reconciled", 1800)
            fleet_seconds = time.perf_counter() - fleet_start
            time.sleep(10)  # idle: every worker back in its follow loop
            assert operator.process is not None
            rss = rss_mib(operator.process.pid)
        finally:
            if operator is not None:
                operator.stop()
            kube.stop()
    with tempfile.TemporaryDirectory(prefix="bench-operator-fleet-") as tmp:
        fleet_figures = fleet(Path(tmp), FLEET_SESSIONS)
    spread = f"min {min(samples):.3f}s, max {max(samples):.3f}s over {LATENCY_RUNS} sessions"
    return [
        Figure(
            "reconcile_latency_p50_s",
            p50,
            "s",
            COMMAND,
            f"create to all {CHILDREN} children existing, one subagent, no node; {spread}",
        ),
        Figure(
            "operator_rss_mib_500_sessions",
            rss,
            "MiB",
            COMMAND,
            f"VmRSS of the operator after {FLEET} sessions reconciled "
            f"({fleet_seconds:.0f}s to reconcile the fleet), SQLite record followed by its watch",
        ),
        *fleet_figures,
    ]
