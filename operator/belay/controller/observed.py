"""What a pass reads of the cluster and the store, as the pure functions of this package take it:
the session's harness and sandbox pods, the pool pods claimed for an attempt, its lease."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from belay.api.agentsession import AgentSessionSpec
from belay.api.status import PodPhase
from belay.controller import names
from belay.controller.pool import claimed_sandboxes
from belay.controller.recovery import HarnessPod, SandboxPod, sandbox_replacement
from belay.journal.phase import Liveness
from belay.journal.state import SessionState
from belay.stores.base import EventStore

PHASES: tuple[PodPhase, ...] = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


async def operator_liveness(store: EventStore, session: str) -> Liveness:
    """The session's lease and its last renewal, now; the operator recovers lost attempts."""
    lease = await store.current_lease(session)
    renewal = await store.lease_renewal(session)
    return Liveness(
        now=datetime.now(UTC),
        lease=lease.number if lease else 0,
        holder=lease.holder if lease else "",
        renewed_lease=renewal.number if renewal else 0,
        renewed_at=renewal.renewed_at if renewal else None,
        recovered_by="operator",
    )


def pod_phase(pod: Any) -> PodPhase:
    phase = getattr(pod.status, "phase", None) or "Pending"
    return phase if phase in PHASES else "Unknown"


def waiting_cause(pod: Any) -> tuple[str, str]:
    """Why a Pending pod waits (reason, message): its container's waiting state (ImagePullBackOff,
    CreateContainerConfigError, ...), else its PodScheduled condition when False (Unschedulable);
    ("", "") when it says nothing."""
    status = pod.status
    for container in getattr(status, "container_statuses", None) or []:
        waiting = getattr(getattr(container, "state", None), "waiting", None)
        if waiting is not None and waiting.reason:
            return waiting.reason, waiting.message or ""
    for condition in getattr(status, "conditions", None) or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason:
            return condition.reason, condition.message or ""
    return "", ""


def harness_pods(pods: list[Any]) -> list[HarnessPod]:
    found = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_HARNESS:
            continue
        index = labels.get(names.LABEL_ATTEMPT, "")
        if not index.isdigit():
            continue
        phase = pod_phase(pod)
        reason, message = waiting_cause(pod) if phase == "Pending" and pod.status else ("", "")
        found.append(
            HarnessPod(
                name=pod.metadata.name,
                index=int(index),
                phase=phase,
                deleting=pod.metadata.deletion_timestamp is not None,
                created_at=pod.metadata.creation_timestamp,
                waiting_reason=reason,
                waiting_message=message,
            )
        )
    return found


def sandbox_pods(pods: list[Any]) -> dict[str, SandboxPod]:
    return {
        pod.metadata.name: SandboxPod(
            name=pod.metadata.name,
            phase=pod_phase(pod),
            deleting=pod.metadata.deletion_timestamp is not None,
        )
        for pod in pods
        if (pod.metadata.labels or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_SANDBOX
    }


def replacements_of(state: SessionState, spec: AgentSessionSpec) -> dict[str, int]:
    return {sub.name: sandbox_replacement(state, sub.name) for sub in spec.subagents}


def claimed_pods(pods: list[Any], index: int | None, replacements: dict[str, int]) -> dict[str, str]:
    """The pool pods claimed for attempt `index` that are still their subagents' sandboxes."""
    labelled = ((pod.metadata.name, pod.metadata.labels or {}) for pod in pods)
    return claimed_sandboxes(labelled, index, replacements)
