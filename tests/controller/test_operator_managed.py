"""A managed executor in a cluster: the operator runs the parser-review example with
`executor.type: openai-agents` (and `anthropic-managed`) against the provider's stand-in on loopback,
the provider's key and address coming from the Secret named in `executor.credentialsSecret`. The
first harness pod stops itself at a boundary of the unsafe `create_ticket` the remote agent asked
for: its tool request recorded (the ticket not created yet), or its result recorded but not posted;
the test deletes the pod, as an eviction would. The next attempt goes on with the same remote
session: the ticket's result is posted once, nothing completed is run again, one ticket, the
deliverable the uninterrupted plan writes, and the key stays in the harness pods.
"""

from __future__ import annotations

import json
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.controller import names
from belay.controller.kube import load_api_client
from belay.executors.endpoints import PROVIDERS
from belay.harness.attempt import fault_key
from belay.harness.models.scripted import planned_calls
from belay.journal.events import (
    Event,
    ExecutorChange,
    Lifecycle,
    LifecycleKind,
    RemoteEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.local.tickets import load_tickets
from belay.stores.base import EventStore
from belay.stores.factory import open_event_store
from tests.belay_cli import (
    StandinProcess,
    deliverables,
    deliveries,
    manifest_for,
    provider_problems,
    remote_sessions,
    steps_run_twice,
)
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for, wait_for_session_end
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    NAMESPACE,
    e2e_cluster,
    harness_env,
    harness_lost_seq,
    is_stopped_pod,
    kubectl_belay,
    operator,
    record_of,
    stores,
    tickets,
)
from tests.executors.example import MANIFEST, PLAN, SUBAGENT, example_plan, review_sha256
from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until, wait_until_async

pytestmark = pytest.mark.testenv

SECRET = "provider-keys"


def ticket_operation() -> str:
    """The operation id the plan's `create_ticket` call gets: derived from the record's structure
    (subagent, step, ordinal in the step), the same as the scripted plan's own id for it."""
    calls = planned_calls(SUBAGENT, example_plan().subagents[SUBAGENT])
    return next(call.call_id for call in calls if call.name == "create_ticket")


def cluster_manifest(name: str, executor: str) -> dict[str, Any]:
    """The example on `executor`, paths absolute, its credentials from the Secret. Each test names
    its session apart: the objects of an earlier session of the same name (its sandbox token
    Secret) may still be on their way out, collected after their owner."""
    manifest = manifest_for(yaml.safe_load(MANIFEST.read_text()), MANIFEST, executor)
    manifest["metadata"] = {"name": name, "namespace": NAMESPACE}
    manifest["spec"]["executor"]["credentialsSecret"] = SECRET
    return manifest


def provider_secret(standin: StandinProcess) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": standin.environment(),
    }


def describer(running: OperatorProcess, kubelet: LocalKubelet) -> Callable[[], str]:
    """What a failed wait shows: the operator's log, each pod's, the kubelet's last errors."""

    def describe() -> str:
        logs = "\n".join(
            f"--- {name}\n{pod.log.read_text(errors='replace')[-3000:]}"
            for name, pod in kubelet.started_pods.items()
            if pod.log.exists()
        )
        return f"operator log:\n{running.log()[-3000:]}\n{logs}\nkubelet errors: {kubelet.errors[-5:]}"

    return describe


async def wait_for_event(store: EventStore, session: str, key: str, describe: Callable[[], str]) -> None:
    async def keys() -> list[str]:
        return [fault_key(e) for e in await store.read(record_of(session))]

    await wait_until_async(
        keys,
        f"{key} in the record",
        until=lambda found: key in found,
        timeout=180,
        interval=0.3,
        describe=describe,
    )


def operations_requested(events: list[Event], after_seq: int = 0) -> list[str]:
    return [e.payload.operation_id for e in events if isinstance(e, ToolRequestEvent) and e.seq > after_seq]


@pytest.mark.parametrize(
    ("executor", "boundary"),
    [
        ("openai-agents", "tool_request"),
        ("openai-agents", "tool_result"),
        ("anthropic-managed", "tool_result"),
    ],
)
async def test_a_managed_session_survives_its_harness_pod_and_keeps_its_remote_session(
    executor: str,
    boundary: str,
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,  # noqa: F811
    stores: tuple[str, str],  # noqa: F811
    tickets: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    kube = e2e_cluster
    variables = PROVIDERS[executor]
    key = f"sk-cluster-{secrets.token_hex(16)}"  # the stand-in accepts this key and no other
    standin = StandinProcess(executor, PLAN, tmp_path / "standin", api_key=key)
    ticket_op = ticket_operation()
    point = f"{boundary}:{ticket_op}"
    ticket_ran = boundary == "tool_result"
    session = f"review-{executor.split('-')[0]}-{boundary.replace('_', '-')}"
    first_harness = f"{session}-harness-0"
    api = load_api_client(str(kube.kubeconfig))
    kubelet = LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets, point))

    describe = describer(operator, kubelet)

    store = open_event_store(stores[0])
    try:
        with kubelet:
            kube.kubectl("apply", "-f", "-", input=json.dumps(provider_secret(standin)))
            kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(session, executor)))

            # The first attempt: it stops itself at the boundary, the ticket's call still open.
            await wait_for_event(store, session, point, describe)
            first = kubelet.started_pods[first_harness]
            wait_for(
                lambda: is_stopped_pod(first.process.pid), "the first harness to stop itself", 60, describe
            )
            before = await store.read(record_of(session))
            held = remote_sessions(before)
            assert list(held) == [SUBAGENT]
            assert deliveries(before, ticket_op) == []
            done_before = {e.payload.operation_id for e in before if isinstance(e, ToolResultEvent)}
            assert (ticket_op in done_before) == ticket_ran
            assert ticket_op in operations_requested(before)
            assert len(load_tickets(tmp_path / "tickets.json")) == ticket_ran
            waiting = standin.stats()["sessions"][held[SUBAGENT]]
            assert waiting["calls_requested"] == len(done_before | {ticket_op})

            # Frozen at the boundary, it cannot stop cleanly on the kubelet's SIGTERM: it is killed
            # when its (here short) grace period is over.
            kube.kubectl("delete", "pod", "-n", NAMESPACE, first_harness, "--wait=false", "--grace-period=1")
            done = wait_for_session_end(kube, NAMESPACE, session, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1) + describe()
            assert done.get("harnessLost", 0) >= 1

            # The replacement took the provider's address and key from the Secret too.
            harnesses = [
                pod
                for pod in kubelet.started_pods.values()
                if pod.labels.get(names.LABEL_COMPONENT) == names.COMPONENT_HARNESS
            ]
            assert len(harnesses) >= 2
            for pod in harnesses:
                assert pod.env[variables.api_key] == key
                assert pod.env[variables.base_url] == standin.base_url
            sandboxes = [p for p in kubelet.started_pods.values() if p not in harnesses]
            assert sandboxes and all(key not in json.dumps(p.env) for p in sandboxes)

        after = await store.read(record_of(session))
        lost = harness_lost_seq(after)
        # Same remote session, nothing completed run again, the ticket's result posted once.
        assert remote_sessions(after) == held
        assert steps_run_twice(after) == []
        assert set(operations_requested(after, lost)).isdisjoint(done_before)
        [delivered] = deliveries(after, ticket_op)
        assert delivered.seq > lost
        stats = standin.stats()
        assert provider_problems(stats, subagents=1) == [], json.dumps(stats, indent=1)
        assert len(load_tickets(tmp_path / "tickets.json")) == 1
        assert deliverables(after)["review.md"] == review_sha256()
        listed = {d["name"]: d for d in done["deliverables"]}
        assert listed["review.md"]["sha256"] == review_sha256()
        # The key reached neither the record, nor the session's status, nor a sandbox.
        record = Path(stores[0].removeprefix("sqlite://"))
        files = list(record.parent.glob(record.name + "*"))  # with its write-ahead log
        assert files and all(key.encode() not in f.read_bytes() for f in files)
        session_object = kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, session)
        assert key not in json.dumps(session_object)
    finally:
        await store.close()
        kube.kubectl(
            "delete", "agentsession", "-n", NAMESPACE, session, "--ignore-not-found", "--timeout=120s"
        )
        kube.kubectl("delete", "secret", "-n", NAMESPACE, SECRET, "--ignore-not-found")
        standin.stop()


async def test_an_edit_of_spec_executor_moves_a_live_session_at_its_next_step_boundary(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,  # noqa: F811
    stores: tuple[str, str],  # noqa: F811
    tickets: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The session starts self-hosted; while its harness is inside a step, `kubectl belay resume
    --executor openai-agents` edits spec.executor. The operator records the move, Ready says it is
    pending, the harness finishes its step and stops cleanly, and the next attempt goes on with the
    managed executor from the record: nothing verified is verified again."""
    kube = e2e_cluster
    session = "review-moved"
    standin = StandinProcess("openai-agents", PLAN, tmp_path / "standin")
    # Inside the second step: its first call has its result.
    point = f"tool_result:{SUBAGENT}.reproduce.1"
    api = load_api_client(str(kube.kubeconfig))
    kubelet = LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets, point))
    first_harness = f"{session}-harness-0"

    describe = describer(operator, kubelet)

    store = open_event_store(stores[0])
    try:
        with kubelet:
            kube.kubectl("apply", "-f", "-", input=json.dumps(provider_secret(standin)))
            manifest = manifest_for(yaml.safe_load(MANIFEST.read_text()), MANIFEST, "self-hosted")
            manifest["metadata"] = {"name": session, "namespace": NAMESPACE}
            kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
            await wait_for_event(store, session, point, describe)
            first = kubelet.started_pods[first_harness]
            wait_for(lambda: is_stopped_pod(first.process.pid), "the harness to stop itself", 60, describe)

            moved = kubectl_belay(
                kube.kubeconfig,
                "resume",
                session,
                "-n",
                NAMESPACE,
                "--executor",
                "openai-agents",
                "--model",
                "gpt-5",
                "--credentials-secret",
                SECRET,
            )
            assert moved.returncode == 0, moved.stderr
            assert "moved from scripted to openai-agents (gpt-5)" in moved.stdout
            await wait_for_event(store, session, "executor_change:", describe)

            def ready() -> dict[str, Any]:
                status = (
                    kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, session).get("status") or {}
                )
                return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})

            pending = wait_until(
                ready,
                "Ready to say the move is pending",
                until=lambda c: c.get("reason") == "ExecutorChangePending",
                timeout=60,
                describe=describe,
            )
            assert "moves to openai-agents (gpt-5) at the next step boundary" in pending["message"]
            kubelet.send_signal(first_harness, signal.SIGCONT)
            done = wait_for_session_end(kube, NAMESPACE, session, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", json.dumps(done, indent=1) + describe()
            later = [
                pod
                for name, pod in kubelet.started_pods.items()
                if pod.labels.get(names.LABEL_COMPONENT) == names.COMPONENT_HARNESS and name != first_harness
            ]
            assert later and all(pod.env["OPENAI_BASE_URL"] == standin.base_url for pod in later)
        events = await store.read(record_of(session))
        [move] = [e for e in events if isinstance(e.payload, ExecutorChange)]
        assert move.payload.by.startswith("kubectl-belay/")
        assert (move.payload.from_type, move.payload.to_type) == ("scripted", "openai-agents")
        stop = next(
            e
            for e in events[move.seq :]
            if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.HARNESS_STOPPED
        )
        assert stop.payload.reason == "ExecutorChanged"
        # The step in progress was finished by the first attempt; the steps after, by the managed one.
        assert steps_run_twice(events) == []
        assert list(remote_sessions(events)) == [SUBAGENT]
        assert all(e.seq > stop.seq for e in events if isinstance(e, RemoteEvent))
        assert deliverables(events)["review.md"] == review_sha256()
    finally:
        await store.close()
        kube.kubectl(
            "delete", "agentsession", "-n", NAMESPACE, session, "--ignore-not-found", "--timeout=120s"
        )
        kube.kubectl("delete", "secret", "-n", NAMESPACE, SECRET, "--ignore-not-found")
        standin.stop()
