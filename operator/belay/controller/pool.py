"""The sandbox pool, as pure functions: which pool pods a namespace should have, which to claim for
an attempt, and the objects and patches that do it (docs/operator.md#the-sandbox-pool).

A pool pod is the sandbox pod a subagent would get, made before anyone needs it, for a sandbox
template (image, network profile, resources): the same container, but with no token. Its server
takes no request until a claim gives it one (belay.sandbox.app): the operator claims it for one
subagent of one attempt (a label and owner change, made only while the pod is still in the pool),
and the harness of that attempt, which alone mounts the pod's one-time claim key, hands it the
subagent's token. Before its claim only the pool's NetworkPolicy selects it (nothing in, nothing
out); the claim's one write moves it under the session's policies. A claimed pod is never returned:
it goes with its attempt, and the pool makes a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from belay.api.agentsession import AgentSessionSpec, SubagentSpec
from belay.api.resources import SandboxResources
from belay.controller import admission, names
from belay.controller.desired import (
    CLAIM_KEY,
    SessionRef,
    pod_manifest,
    sandbox_container,
    sandbox_placement,
    sandbox_scratch,
)
from belay.controller.settings import OperatorSettings

# Template ids are this many hex digits of the digest of the pool pod they make.
TEMPLATE_ID_CHARS = 10
# Pod phases in which a pool pod may still be claimed or become claimable.
LIVE = ("Pending", "Running")


@dataclass(frozen=True)
class SandboxTemplate:
    """What a sandbox pod is made of, apart from whose it is."""

    image: str
    network_profile: str
    resources: SandboxResources = field(default_factory=SandboxResources)
    runtime_class: str | None = None


def template_of(subagent: SubagentSpec, settings: OperatorSettings) -> SandboxTemplate:
    return SandboxTemplate(
        admission.sandbox_image(subagent, settings),
        subagent.network_profile,
        subagent.resources,
        admission.runtime_class(subagent, settings),
    )


def _pool_shape(
    metadata: dict[str, Any], template: SandboxTemplate, settings: OperatorSettings, credential: list[str]
) -> dict[str, Any]:
    container = sandbox_container(
        template.image, template.network_profile, template.resources, settings, credential
    )
    pod = pod_manifest(metadata, settings, container, sandbox_scratch(template.resources))
    pod["spec"].update(sandbox_placement(settings, template.runtime_class))
    return pod


def pool_pod(
    namespace: str, template: SandboxTemplate, settings: OperatorSettings, name: str, claim_key_sha256: str
) -> dict[str, Any]:
    """A pool pod: the sandbox container with no token, the sha256 of its claim key instead. No
    owner (it is no session's yet) and no service account token, like every sandbox pod."""
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": names.pool_selector(template_id(template, settings)),
    }
    return _pool_shape(metadata, template, settings, ["--claim-key-sha256", claim_key_sha256])


def template_id(template: SandboxTemplate, settings: OperatorSettings) -> str:
    """A digest of the pod the template makes: a change of the settings that shape it (an image, a
    port, the drain) gives another id, so pods of the old shape leave the pool."""
    shape = _pool_shape({}, template, settings, ["--claim-key-sha256"])
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()
    return digest[:TEMPLATE_ID_CHARS]


def claim_key_secret(namespace: str, pod_name: str, pod_uid: str, key: str) -> dict[str, Any]:
    """The pool pod's claim key, owned by the pod (it goes with it). The pod itself holds only the
    key's sha256; the harness that claims the pod mounts this Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.claim_key_secret_name(pod_name),
            "namespace": namespace,
            "labels": names.pool_selector(),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}],
        },
        "type": "Opaque",
        "stringData": {CLAIM_KEY: key},
    }


def pool_policy(namespace: str) -> dict[str, Any]:
    """Nothing reaches a pool pod and it reaches nothing, until its claim puts it under its
    session's policies."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.POOL_POLICY,
            "namespace": namespace,
            "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY},
        },
        "spec": {
            "podSelector": {"matchLabels": {names.LABEL_COMPONENT: names.COMPONENT_POOL}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


# --------------------------------------------------------------------------------------------------
# What the pool should hold


@dataclass(frozen=True)
class PoolPod:
    """What the operator sees of one pool pod. `keyed`: this operator made its claim key's Secret
    (it never reads Secrets, so a pod it did not make is one it cannot vouch for)."""

    name: str
    namespace: str
    template: str
    phase: str
    deleting: bool = False
    ready: bool = False
    keyed: bool = False

    @property
    def live(self) -> bool:
        return self.phase in LIVE and not self.deleting

    @property
    def claimable(self) -> bool:
        return self.keyed and self.phase == "Running" and not self.deleting


# Sessions in these phases need no sandbox any more.
ENDED_PHASES = ("Succeeded", "NeedsAttention", "Failed")


def running_session(body: Mapping[str, Any]) -> bool:
    """Whether an AgentSession still needs its templates' pools: not being deleted, not ended."""
    phase = (body.get("status") or {}).get("phase")
    return not (body.get("metadata") or {}).get("deletionTimestamp") and phase not in ENDED_PHASES


def wanted_templates(
    sessions: Iterable[tuple[str, AgentSessionSpec]], settings: OperatorSettings
) -> dict[str, dict[str, SandboxTemplate]]:
    """The templates each namespace's pool keeps, from the sessions still running there (namespace
    and spec); none with a pool size of 0."""
    wanted: dict[str, dict[str, SandboxTemplate]] = {}
    if settings.sandbox_pool_size == 0:
        return wanted
    for namespace, spec in sessions:
        if admission.refusals(spec, settings):
            continue  # a session the operator refuses gets nothing made for it, pool pods included
        for subagent in spec.subagents:
            template = template_of(subagent, settings)
            wanted.setdefault(namespace, {})[template_id(template, settings)] = template
    return wanted


@dataclass(frozen=True)
class PoolChanges:
    create: list[tuple[str, SandboxTemplate]]  # one (namespace, template) per pod to make
    delete: list[PoolPod]


def pool_changes(
    wanted: Mapping[str, Mapping[str, SandboxTemplate]], pods: Iterable[PoolPod], size: int
) -> PoolChanges:
    """What keeps every wanted pool at `size` live pods: a pod that ended (it ran, or failed to) is
    deleted; so is one of a template no longer wanted, one this operator cannot vouch for, and one
    past the size. A pod being deleted counts for nothing."""
    delete: list[PoolPod] = []
    kept: dict[tuple[str, str], list[PoolPod]] = {}
    for pod in sorted(pods, key=lambda p: (not p.ready, p.phase != "Running", p.name)):
        if pod.deleting:
            continue
        if not pod.live or not pod.keyed or pod.template not in wanted.get(pod.namespace, {}):
            delete.append(pod)
            continue
        group = kept.setdefault((pod.namespace, pod.template), [])
        if len(group) < size:
            group.append(pod)
        else:
            delete.append(pod)
    create = [
        (namespace, template)
        for namespace, templates in sorted(wanted.items())
        for tid, template in sorted(templates.items())
        for _ in range(size - len(kept.get((namespace, tid), [])))
    ]
    return PoolChanges(create, delete)


# --------------------------------------------------------------------------------------------------
# Claims


def claim_choice(wanted: Mapping[str, str], pods: Iterable[PoolPod]) -> dict[str, PoolPod]:
    """A distinct claimable pod of its template for each subagent that wants one (subagent to
    template id), ready ones first; a subagent left out gets a pod made for it."""
    free = sorted((p for p in pods if p.claimable), key=lambda p: (not p.ready, p.name))
    chosen: dict[str, PoolPod] = {}
    for subagent, template in sorted(wanted.items()):
        pod = next((p for p in free if p.template == template), None)
        if pod is not None:
            free.remove(pod)
            chosen[subagent] = pod
    return chosen


def _escaped(label: str) -> str:
    return label.replace("~", "~0").replace("/", "~1")


def claim_patch(ref: SessionRef, subagent: str, index: int) -> list[dict[str, Any]]:
    """The claim of a pool pod, as one JSON patch: it applies only while the pod is still in the
    pool (the test), so two claims of one pod never both succeed; it makes the pod the sandbox of
    `subagent` in attempt `index` (the labels its session's Service and NetworkPolicies select)
    and the session's (the owner)."""
    component = f"/metadata/labels/{_escaped(names.LABEL_COMPONENT)}"
    labels = {
        **names.sandbox_selector(ref.name, subagent),
        names.LABEL_ATTEMPT: str(index),
        names.LABEL_REPLACEMENT: "0",
    }
    return [
        {"op": "test", "path": component, "value": names.COMPONENT_POOL},
        *(
            {"op": "add", "path": f"/metadata/labels/{_escaped(key)}", "value": value}
            for key, value in labels.items()
        ),
        {"op": "add", "path": "/metadata/ownerReferences", "value": [ref.owner_reference()]},
    ]


def claimed_sandboxes(
    pods: Iterable[tuple[str, Mapping[str, str]]], index: int | None, replacements: Mapping[str, int]
) -> dict[str, str]:
    """Of a session's pods (name, labels): the pool pods claimed for attempt `index`, by subagent,
    while each is still its subagent's current sandbox (no replacement since)."""
    if index is None:
        return {}
    claimed = {}
    for name, labels in pods:
        subagent = labels.get(names.LABEL_SUBAGENT, "")
        if (
            labels.get(names.LABEL_COMPONENT) == names.COMPONENT_SANDBOX
            and names.LABEL_TEMPLATE in labels
            and labels.get(names.LABEL_ATTEMPT) == str(index)
            and replacements.get(subagent, 0) == 0
        ):
            claimed[subagent] = name
    return claimed


def current_sandboxes(
    session: str, index: int, replacements: Mapping[str, int], claimed: Mapping[str, str]
) -> dict[str, str]:
    """The pod each subagent's sandbox should be now: its claimed pool pod, or the one made for it."""
    return {
        subagent: claimed.get(subagent) or names.sandbox_pod_name(session, subagent, index, replaced)
        for subagent, replaced in replacements.items()
    }


def subagents_to_claim(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    index: int | None,
    replacements: Mapping[str, int],
    existing: Iterable[str],
    claimed: Mapping[str, str],
) -> dict[str, str]:
    """The subagents of attempt `index` that may still claim a pool pod (subagent to template id):
    while the attempt's harness pod is not made yet (it must mount the claim keys), each subagent
    with no replacement, no claimed pod and no pod made for it."""
    present = set(existing)
    if settings.sandbox_pool_size == 0 or index is None or names.harness_pod_name(ref.name, index) in present:
        return {}
    return {
        sub.name: template_id(template_of(sub, settings), settings)
        for sub in spec.subagents
        if replacements.get(sub.name, 0) == 0
        and sub.name not in claimed
        and names.sandbox_pod_name(ref.name, sub.name, index) not in present
    }
