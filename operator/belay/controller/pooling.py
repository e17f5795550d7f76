"""The sandbox pool at work (docs/operator.md#the-sandbox-pool): keeps each namespace's pool at
its size and claims pool pods for the attempts that want them. What to do is decided by the pure
functions of belay.controller.pool; this module makes the calls.

A pool pod is made in two calls: the pod (holding only its claim key's sha256), then the Secret
holding the key, owned by the pod. This process remembers which pods it made a key for: it never
reads Secrets, so a pool pod it does not remember (one made before a restart, or by another
replica) is one it cannot vouch for; such a pod is deleted and made again, never claimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from belay.api.agentsession import AgentSessionSpec
from belay.controller import admission, names
from belay.controller.desired import SessionRef
from belay.controller.kube import KubeClient
from belay.controller.pool import (
    PoolPod,
    SandboxTemplate,
    claim_choice,
    claim_key_secret,
    claim_patch,
    pool_changes,
    pool_pod,
    pool_policy,
    running_session,
    template_id,
    template_of,
)
from belay.controller.settings import OperatorSettings

log = logging.getLogger("belay.operator")

# The pool is checked at least this often, even when nothing wakes it.
POOL_RESYNC_S = 30.0
# After a failed pass (the apiserver busy), the next one is this far off.
POOL_RETRY_S = 1.0

Wanted = dict[str, dict[str, SandboxTemplate]]


def _ready(pod: Any) -> bool:
    statuses = getattr(pod.status, "container_statuses", None) or []
    return bool(statuses) and all(getattr(s, "ready", False) for s in statuses)


class SandboxPool:
    def __init__(self, kube: KubeClient, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.keyed: set[tuple[str, str]] = set()  # (namespace, pod) whose claim key this process made
        self.policies: set[str] = set()  # namespaces whose pool policy this process applied
        self.namespaces: set[str] = set()  # namespaces where pool pods were seen: to keep or drain
        self.wake = asyncio.Event()
        self.refill_after = 0.0  # the event loop's time before which no pass runs (after a claim)
        self._templates: dict[str, tuple[int, list[tuple[str, SandboxTemplate]]]] = {}

    # ---- what the pool holds

    def observed(self, pods: list[Any]) -> list[PoolPod]:
        return [
            PoolPod(
                name=pod.metadata.name,
                namespace=pod.metadata.namespace,
                template=(pod.metadata.labels or {}).get(names.LABEL_TEMPLATE, ""),
                phase=getattr(pod.status, "phase", None) or "Pending",
                deleting=pod.metadata.deletion_timestamp is not None,
                ready=_ready(pod),
                keyed=(pod.metadata.namespace, pod.metadata.name) in self.keyed,
            )
            for pod in pods
        ]

    def templates_of(self, key: str, body: Mapping[str, Any]) -> list[tuple[str, SandboxTemplate]]:
        """The sandbox templates of one session (parsed once per generation of its spec)."""
        generation = int(body.get("metadata", {}).get("generation") or 0)
        known = self._templates.get(key)
        if known is None or known[0] != generation:
            spec = AgentSessionSpec.model_validate(body["spec"])
            refused = admission.refusals(spec, self.settings)  # nothing is made for it, pool pods included
            templates = [] if refused else [template_of(sub, self.settings) for sub in spec.subagents]
            known = (generation, [(template_id(t, self.settings), t) for t in templates])
            self._templates[key] = known
        return known[1]

    def wanted(self, bodies: Mapping[str, Mapping[str, Any]]) -> Wanted:
        """The sandbox templates each namespace's pool keeps: those of its sessions still running
        (AgentSession bodies by key); none with a size of 0."""
        wanted: Wanted = {}
        if self.settings.sandbox_pool_size == 0:
            return wanted
        for key, body in list(bodies.items()):
            if not running_session(body):
                continue
            try:
                templates = self.templates_of(key, body)
            except ValueError:
                continue  # a spec the model refuses: its session's pass reports it
            wanted.setdefault(body["metadata"].get("namespace", ""), {}).update(templates)
        return wanted

    def forget(self, key: str) -> None:
        self._templates.pop(key, None)

    # ---- claims

    async def claim(self, ref: SessionRef, wanted: Mapping[str, str], index: int) -> dict[str, str]:
        """Claim a pool pod for each subagent in `wanted` (subagent to template id) that its
        template's pool can give one: the pods claimed, by subagent. The session's NetworkPolicies
        must be in place: the claim puts the pod under them."""
        if not wanted:
            return {}
        pods = await self.kube.call(self.kube.pool_pods, ref.namespace)
        choice = claim_choice(wanted, self.observed(pods))
        results = await asyncio.gather(
            *(
                self.kube.call(
                    self.kube.claim_pod, ref.namespace, pod.name, claim_patch(ref, subagent, index)
                )
                for subagent, pod in choice.items()
            )
        )
        claimed = {}
        for (subagent, pod), won in zip(choice.items(), results, strict=True):
            self.keyed.discard((ref.namespace, pod.name))  # out of the pool either way
            if won:
                claimed[subagent] = pod.name
        if choice:
            # The pool makes new pods for the ones taken, but only once the claiming attempt's
            # harness pod has had the node to itself to start: pods started beside it slow its start.
            self.refill_after = asyncio.get_running_loop().time() + self.settings.sandbox_pool_refill_delay_s
            self.wake.set()
        log.info("session %s/%s attempt %s claimed %s", ref.namespace, ref.name, index, claimed or "none")
        return claimed

    # ---- keeping it full

    async def keep(self, wanted: Wanted) -> None:
        for namespace in sorted(set(wanted) | self.namespaces):
            templates = wanted.get(namespace, {})
            pods = await self.kube.call(self.kube.pool_pods, namespace)
            changes = pool_changes(
                {namespace: templates}, self.observed(pods), self.settings.sandbox_pool_size
            )
            if (changes.create or pods) and namespace not in self.policies:
                await self.kube.call(self.kube.apply, pool_policy(namespace))
                self.policies.add(namespace)
            versions = {p.metadata.name: p.metadata.resource_version for p in pods}
            await asyncio.gather(
                *(
                    self.kube.call(self.kube.delete_pod, namespace, pod.name, versions.get(pod.name))
                    for pod in changes.delete
                ),
                *(self._make(namespace, template) for namespace, template in changes.create),
            )
            for pod in changes.delete:
                self.keyed.discard((namespace, pod.name))
            if templates or pods:
                self.namespaces.add(namespace)
            else:
                self.namespaces.discard(namespace)

    async def _make(self, namespace: str, template: SandboxTemplate) -> None:
        key = secrets.token_urlsafe(32)
        name = names.pool_pod_name(template_id(template, self.settings), secrets.token_hex(3))
        digest = hashlib.sha256(key.encode()).hexdigest()
        uid = await self.kube.call(
            self.kube.create_pod, pool_pod(namespace, template, self.settings, name, digest)
        )
        try:
            await self.kube.call(self.kube.ensure_secret, claim_key_secret(namespace, name, uid, key))
        except Exception:
            await self.kube.call(self.kube.delete_pod, namespace, name)
            raise
        self.keyed.add((namespace, name))

    async def run(self, wanted: Callable[[], Wanted]) -> None:
        """Keep the pools until cancelled: a pass when woken (a pool pod changed, a claim, a
        session came or ended), and at least every POOL_RESYNC_S."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POOL_RESYNC_S)
            self.wake.clear()
            pause = self.refill_after - asyncio.get_running_loop().time()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                await self.keep(wanted())
            except Exception:
                log.exception("keeping the sandbox pool failed; trying again")
                await asyncio.sleep(POOL_RETRY_S)
                self.wake.set()
