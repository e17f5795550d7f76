"""What a session's pods load from the session's namespace that the operator does not make there.

Without `watchNamespaces` the chart makes the harness's ServiceAccount and the record key Secret
only in the operator's namespace; each session namespace needs its own copy, with the store and
etcd credentials Secrets. A pod whose ServiceAccount is missing is refused by the apiserver (the
pass would fail on every retry), and one whose Secret is missing waits Pending for ever: so before
a harness pod is made the operator looks for each of them, and a session that lacks one is
stalled with a message naming each one missing and the command that makes it, until it exists.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from belay.api.agentsession import AgentSessionSpec
from belay.api.status import OperatorReason
from belay.controller import admission
from belay.controller.kube import KubeClient
from belay.controller.observed import harness_pods
from belay.controller.recovery import HarnessPod
from belay.controller.settings import OperatorSettings
from belay.journal.phase import ENDED_PHASES, phase_of, recovery_failed
from belay.journal.state import SessionState

# How soon a session waiting on its namespace is looked at again (nothing the operator watches
# tells it that a ServiceAccount or a Secret was made).
RECHECK_S = 15.0
# What a copy of a Secret must not carry from its first namespace.
_NOT_COPIED = ",".join(
    f".metadata.{field}"
    for field in ("namespace", "uid", "resourceVersion", "creationTimestamp", "ownerReferences")
)


@dataclass(frozen=True)
class Need:
    kind: Literal["ServiceAccount", "Secret"]
    name: str
    what: str  # what it is for, in words


def pod_needs(spec: AgentSessionSpec, settings: OperatorSettings) -> list[Need]:
    """What the harness and sandbox pods of a session load from its namespace, made by whoever
    installs the operator (never by the operator, nor named by the session itself)."""
    needs = [
        Need("ServiceAccount", settings.harness_service_account, "the harness pods' ServiceAccount"),
        Need("ServiceAccount", settings.workload_service_account, "the sandbox pods' ServiceAccount"),
    ]
    if not admission.own_stores(spec):
        # A session on its own stores loads the Secret it names instead (checked where it is read).
        if settings.store_secret:
            needs.append(Need("Secret", settings.store_secret, "the store credentials"))
        if settings.etcd_credentials_secret:
            needs.append(Need("Secret", settings.etcd_credentials_secret, "the etcd client certificate"))
        if settings.record_key_secret:
            needs.append(Need("Secret", settings.record_key_secret, "the record key"))
    needs.extend(Need("Secret", name, "an image pull Secret") for name in settings.image_pull_secrets)
    unique: dict[tuple[str, str], Need] = {}
    for need in needs:
        # Kubernetes makes the `default` ServiceAccount in every namespace itself.
        if not (need.kind == "ServiceAccount" and need.name == "default"):
            unique.setdefault((need.kind, need.name), need)
    return list(unique.values())


def harness_pod_awaited(state: SessionState, pods: Sequence[HarnessPod]) -> bool:
    """A harness pod is to be made, or waits to start: the session goes on and none of its harness
    pods runs. (An ended or stalled session makes none, and a running one has what it loads.)"""
    if phase_of(state) in ENDED_PHASES or recovery_failed(state):
        return False
    return not any(pod.live and pod.phase == "Running" for pod in pods)


def how_to_make(need: Need, namespace: str, operator_namespace: str) -> str:
    """The command that makes `need` in `namespace`: a ServiceAccount created, a Secret copied from
    the operator's namespace (where the chart made or was given it)."""
    if need.kind == "ServiceAccount":
        return f"kubectl create serviceaccount {need.name} -n {namespace}"
    return (
        f"kubectl get secret {need.name} -n {operator_namespace} -o json | jq 'del({_NOT_COPIED})' "
        f"| kubectl apply -n {namespace} -f -"
    )


def missing_problem(missing: Sequence[Need], namespace: str, operator_namespace: str) -> tuple[str, str]:
    """The Stalled reason, and one line: each missing object, what it is for, and the command that
    makes it."""
    each = "; ".join(
        f"the {need.kind} {need.name} ({need.what}): {how_to_make(need, namespace, operator_namespace)}"
        for need in missing
    )
    return OperatorReason.MISSING_IN_NAMESPACE, (
        f"namespace {namespace} lacks what this session's pods load, so no harness pod is made: {each} "
        "(with the namespace in the chart's watchNamespaces, the chart makes the harness's "
        "ServiceAccount and the record key there)"
    )


async def lacking(
    kube: KubeClient,
    namespace: str,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    state: SessionState,
    pods: list[Any],
) -> tuple[str, str] | None:
    """What the session's pods load that its namespace lacks, while a harness pod is awaited: the
    reason and message the session is stalled with, or None."""
    if not harness_pod_awaited(state, harness_pods(pods)):
        return None
    needs = pod_needs(spec, settings)
    found = await asyncio.gather(*(kube.call(kube.exists, n.kind, namespace, n.name) for n in needs))
    missing = [need for need, exists in zip(needs, found, strict=True) if not exists]
    if not missing:
        return None
    return missing_problem(missing, namespace, os.environ.get("POD_NAMESPACE", "OPERATOR_NAMESPACE"))
