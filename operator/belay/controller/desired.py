"""The objects a session needs, as pure functions of the session and the operator's settings.

- A harness pod per attempt and a sandbox pod per subagent per attempt: a new attempt starts from
  clean sandboxes and restores only the declared state into them.
- A Service per sandbox, so the harness reaches it by a stable name across attempts.
- A token per sandbox, in a Secret per subagent: a sandbox pod mounts its own and nothing else (no
  other token, no store credentials, no service account token); the harness mounts all of them.
- NetworkPolicies: everything of the session denied by default; a sandbox accepts traffic only from
  its own session's harness and reaches only what its network profile allows, never the stores;
  the harness reaches its sandboxes, the stores and the model endpoint.
- Every pod meets the "restricted" Pod Security profile and is owned by the AgentSession.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from belay.api.agentsession import AgentSessionSpec, SubagentSpec
from belay.api.resources import MIN_DISK_MIB, MIN_MEMORY_MIB, SandboxResources
from belay.controller import admission, names
from belay.controller.settings import ETCD_CREDENTIALS_MOUNT, EgressTarget, OperatorSettings
from belay.harness.attempt import FAULT_ENV
from belay.harness.git_input import GIT_CREDENTIALS_DIR
from belay.harness.stopping import DRAIN_ENV, STOP_MARGIN_S
from belay.sandbox import limits
from belay.sandbox.egress import GLOBAL_UNICAST_IPV6, SPECIAL_PURPOSE_IPV4, SPECIAL_PURPOSE_IPV6
from belay.stores.integrity import RECORD_KEY_ENV

# A sandbox pod's own token; the harness has every sandbox's, one file per subagent.
TOKEN_MOUNT = "/var/run/belay/sandbox-token"
# A sandbox pod's disk beyond its workspace figure: its log and what the kubelet counts besides.
EPHEMERAL_HEADROOM_MIB = 256
TOKEN_KEY = "token"
HARNESS_TOKENS_MOUNT = "/var/run/belay/sandbox-tokens"
# The claim key of each pool sandbox a harness claims (docs/operator.md#the-sandbox-pool), one file
# per subagent; the key is in a Secret of the pool pod's own.
HARNESS_CLAIMS_MOUNT = "/var/run/belay/sandbox-claims"
CLAIM_KEY = "key"
WORKSPACE = "/workspace"
HARNESS_MODULE = "belay.controller.harness_pod"

ENV_SESSION = "BELAY_SESSION"
ENV_NAMESPACE = "BELAY_NAMESPACE"
ENV_SESSION_UID = "BELAY_SESSION_UID"
ENV_HARNESS_INDEX = "BELAY_HARNESS_INDEX"
ENV_EVENT_STORE = "BELAY_EVENT_STORE"
ENV_ARTIFACT_STORE = "BELAY_ARTIFACT_STORE"
ENV_SESSION_SPEC = "BELAY_SESSION_SPEC"
ENV_SANDBOX_ENDPOINTS = "BELAY_SANDBOX_ENDPOINTS"
ENV_SANDBOX_TOKEN_DIR = "BELAY_SANDBOX_TOKEN_DIR"
ENV_SANDBOX_CLAIM_DIR = "BELAY_SANDBOX_CLAIM_DIR"
# What `executor.credentialsSecret` may give the harness pod: the provider SDK's standard variables,
# each from the key of the same name, and nothing else of the Secret.
PROVIDER_VARIABLES = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openai-agents": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "anthropic-managed": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}


@dataclass(frozen=True)
class SessionRef:
    """The identity of one AgentSession object."""

    name: str
    namespace: str
    uid: str
    generation: int = 1

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": names.API_VERSION,
            "kind": "AgentSession",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def _metadata(ref: SessionRef, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": {**names.session_labels(ref.name), **labels},
        "ownerReferences": [ref.owner_reference()],
    }


# --------------------------------------------------------------------------------------------------
# Pod Security "restricted"


def pod_security_context(settings: OperatorSettings) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_user,
        "fsGroup": settings.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def termination_grace_period_s(settings: OperatorSettings) -> int:
    """Enough for a harness told to stop to let its calls in flight finish (the drain), record its
    stop and exit (belay.harness.stopping); a sandbox drains its running requests as long."""
    return settings.stop_drain_s + math.ceil(STOP_MARGIN_S)


def pod_manifest(
    metadata: dict[str, Any],
    settings: OperatorSettings,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    service_account: str | None = None,
) -> dict[str, Any]:
    """A pod of the operator's: one container under the "restricted" profile, never restarted."""
    spec: dict[str, Any] = {
        # A failed pod is a lost attempt: the operator decides what replaces it.
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": termination_grace_period_s(settings),
        "serviceAccountName": service_account or settings.workload_service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(settings),
        "containers": [
            {
                **container,
                "imagePullPolicy": settings.image_pull_policy,
                "securityContext": container_security_context(),
            }
        ],
        "volumes": volumes,
    }
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _sandbox_token_volume(ref: SessionRef, subagent: str) -> dict[str, Any]:
    """One sandbox's own token and nothing else."""
    return {
        "name": "sandbox-token",
        "secret": {
            "secretName": names.sandbox_token_secret_name(ref.name, subagent, ref.uid),
            "defaultMode": 0o400,
        },
    }


def _harness_tokens_volume(ref: SessionRef, spec: AgentSessionSpec) -> dict[str, Any]:
    """Every sandbox's token, as `<subagent>` files in one directory."""
    sources = [
        {
            "secret": {
                "name": names.sandbox_token_secret_name(ref.name, sub.name, ref.uid),
                "items": [{"key": TOKEN_KEY, "path": sub.name}],
            }
        }
        for sub in spec.subagents
    ]
    return {"name": "sandbox-tokens", "projected": {"sources": sources, "defaultMode": 0o400}}


def _harness_claims_volume(claimed: Mapping[str, str]) -> dict[str, Any]:
    """The claim key of each pool pod the attempt claimed, as `<subagent>` files in one directory."""
    sources = [
        {
            "secret": {
                "name": names.claim_key_secret_name(pod),
                "items": [{"key": CLAIM_KEY, "path": subagent}],
            }
        }
        for subagent, pod in sorted(claimed.items())
    ]
    return {"name": "sandbox-claims", "projected": {"sources": sources, "defaultMode": 0o400}}


def _scratch(name: str, size_mib: int | None = None) -> dict[str, Any]:
    if size_mib is None:
        return {"name": name, "emptyDir": {}}
    return {"name": name, "emptyDir": {"sizeLimit": f"{size_mib + EPHEMERAL_HEADROOM_MIB}Mi"}}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in values.items()]


def sandbox_endpoint(ref: SessionRef, subagent: str, settings: OperatorSettings) -> str:
    service = names.sandbox_service_name(ref.name, subagent)
    return f"http://{service}.{ref.namespace}.svc:{settings.sandbox_port}"


def store_credentials(spec: AgentSessionSpec, settings: OperatorSettings) -> str | None:
    """The one Secret whose keys the harness gets as its environment: the session's own, for its
    own stores (`spec.stores.secretRef`), else the operator's store Secret. Never both: a session
    on its own stores never holds the fleet's credentials, and one on the fleet's stores gets no
    variables of its choosing beside them."""
    return spec.stores.secret_ref if admission.own_stores(spec) else settings.store_secret


def harness_pod(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    index: int,
    fault_point: str | None = None,
    claimed: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`claimed`: the pool pods this attempt claimed, by subagent; the harness gets their claim
    keys and hands each its subagent's token (belay.controller.harness_pod)."""
    env = {
        ENV_SESSION: ref.name,
        ENV_NAMESPACE: ref.namespace,
        ENV_SESSION_UID: ref.uid,
        ENV_HARNESS_INDEX: str(index),
        ENV_EVENT_STORE: spec.stores.events or settings.fleet_event_store(),
        ENV_ARTIFACT_STORE: spec.stores.artifacts or settings.artifact_store,
        ENV_SESSION_SPEC: json.dumps(spec.model_dump(mode="json", by_alias=True, exclude_none=True)),
        ENV_SANDBOX_ENDPOINTS: json.dumps(
            {s.name: sandbox_endpoint(ref, s.name, settings) for s in spec.subagents}, sort_keys=True
        ),
        ENV_SANDBOX_TOKEN_DIR: HARNESS_TOKENS_MOUNT,
        DRAIN_ENV: str(settings.stop_drain_s),
    }
    if fault_point:
        env[FAULT_ENV] = fault_point  # a drill copy's attempt stops itself there
    if claimed:
        env[ENV_SANDBOX_CLAIM_DIR] = HARNESS_CLAIMS_MOUNT
    container: dict[str, Any] = {
        "name": "harness",
        "image": admission.harness_image(spec, settings),
        "command": ["python", "-m", HARNESS_MODULE],
        "env": _env(env),
        "resources": settings.harness_resources.model_dump(exclude_defaults=True),
        "volumeMounts": [
            {"name": "sandbox-tokens", "mountPath": HARNESS_TOKENS_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    secret = store_credentials(spec, settings)
    if secret:
        container["envFrom"] = [{"secretRef": {"name": secret}}]
    if settings.record_key_secret and not admission.own_stores(spec):
        # The fleet's record key, for a session on the fleet's stores only; named here, it wins
        # over a BELAY_RECORD_KEY the store Secret may also hold.
        container["env"].append(
            {
                "name": RECORD_KEY_ENV,
                "valueFrom": {"secretKeyRef": {"name": settings.record_key_secret, "key": RECORD_KEY_ENV}},
            }
        )
    credentials = spec.executor.credentials_secret
    if credentials:  # the harness pod only: sandbox pods never see a provider's key
        container["env"] += [
            {
                "name": variable,
                "valueFrom": {"secretKeyRef": {"name": credentials, "key": variable, "optional": True}},
            }
            for variable in PROVIDER_VARIABLES.get(spec.executor.type, ())
        ]
    volumes = [_harness_tokens_volume(ref, spec), _scratch("tmp")]
    if settings.etcd_credentials_secret and not admission.own_stores(spec):
        # The fleet etcd's client certificate, for a session on the fleet's stores only.
        container["volumeMounts"].append(
            {"name": "etcd-credentials", "mountPath": ETCD_CREDENTIALS_MOUNT, "readOnly": True}
        )
        volumes.append(
            {"name": "etcd-credentials", "secret": {"secretName": settings.etcd_credentials_secret}}
        )
    git_secrets = sorted(
        {
            i.git.credentials_secret
            for s in spec.subagents
            for i in s.inputs
            if i.git and i.git.credentials_secret
        }
    )
    for n, git_secret in enumerate(git_secrets):
        # Git inputs' credentials, by Secret name (of the session's namespace: a volume names no
        # other), for the harness's fetch only (belay.harness.git_input); sandbox pods never see them.
        container["volumeMounts"].append(
            {
                "name": f"git-credentials-{n}",
                "mountPath": str(GIT_CREDENTIALS_DIR / git_secret),
                "readOnly": True,
            }
        )
        volumes.append({"name": f"git-credentials-{n}", "secret": {"secretName": git_secret}})
    if claimed:
        container["volumeMounts"].append(
            {"name": "sandbox-claims", "mountPath": HARNESS_CLAIMS_MOUNT, "readOnly": True}
        )
        volumes.append(_harness_claims_volume(claimed))
    labels = {**names.harness_selector(ref.name), names.LABEL_ATTEMPT: str(index)}
    return pod_manifest(
        _metadata(ref, names.harness_pod_name(ref.name, index), labels),
        settings,
        container,
        volumes,
        service_account=settings.harness_service_account,
    )


def sandbox_container(
    image: str,
    network_profile: str,
    resources: SandboxResources,
    settings: OperatorSettings,
    credential: list[str],
) -> dict[str, Any]:
    """The sandbox server's container. `credential`: how it learns its token, `--token-file` (a
    pod made for its subagent) or `--claim-key-sha256` (a pool pod, given its token at its claim)."""
    return {
        "name": "sandbox",
        "image": image,
        "command": [
            "python",
            "-m",
            "belay.sandbox.server",
            "--workspace",
            WORKSPACE,
            "--host",
            "0.0.0.0",
            "--port",
            str(settings.sandbox_port),
            *credential,
            "--network-profile",
            network_profile,
            "--drain-s",
            str(settings.stop_drain_s),
            # The container's cgroup (the kubelet's memory wall) is the server's to read; no rlimits:
            # RLIMIT_NPROC counts the uid's processes in every container of the node.
            *limits.server_arguments(
                resources, rlimits=False, cgroups=["/sys/fs/cgroup"], disk_paths=["/tmp"]
            ),
        ],
        "resources": container_resources(resources),
        "ports": [{"name": "http", "containerPort": settings.sandbox_port, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def sandbox_scratch(resources: SandboxResources) -> list[dict[str, Any]]:
    return [_scratch("workspace", resources.disk_mib), _scratch("tmp", resources.disk_mib)]


def sandbox_pod(
    ref: SessionRef, subagent: SubagentSpec, settings: OperatorSettings, index: int, replacement: int = 0
) -> dict[str, Any]:
    container = sandbox_container(
        admission.sandbox_image(subagent, settings),
        subagent.network_profile,
        subagent.resources,
        settings,
        ["--token-file", f"{TOKEN_MOUNT}/{TOKEN_KEY}"],
    )
    container["volumeMounts"].insert(0, {"name": "sandbox-token", "mountPath": TOKEN_MOUNT, "readOnly": True})
    labels = {
        **names.sandbox_selector(ref.name, subagent.name),
        names.LABEL_ATTEMPT: str(index),
        names.LABEL_REPLACEMENT: str(replacement),
    }
    name = names.sandbox_pod_name(ref.name, subagent.name, index, replacement)
    volumes = [_sandbox_token_volume(ref, subagent.name), *sandbox_scratch(subagent.resources)]
    pod = pod_manifest(_metadata(ref, name, labels), settings, container, volumes)
    pod["spec"].update(sandbox_placement(settings, admission.runtime_class(subagent, settings)))
    return pod


def sandbox_placement(settings: OperatorSettings, runtime_class: str | None) -> dict[str, Any]:
    """Where a sandbox pod runs, since it runs code a model chose: under its RuntimeClass (gVisor,
    Kata), on the nodes the chart sets aside for sandboxes, in a user namespace of its own when
    the chart asks for one (`hostUsers: false`: root in the pod is no user of the node)."""
    placement: dict[str, Any] = {}
    if runtime_class:
        placement["runtimeClassName"] = runtime_class
    if settings.sandbox_node_selector:
        placement["nodeSelector"] = dict(settings.sandbox_node_selector)
    if settings.sandbox_tolerations:
        placement["tolerations"] = [dict(t) for t in settings.sandbox_tolerations]
    if settings.sandbox_user_namespace:
        placement["hostUsers"] = False
    return placement


def container_resources(resources: SandboxResources) -> dict[str, Any]:
    """A sandbox container's limits: the kubelet's walls behind the server's own. Its disk limit
    leaves room above the workspace figure (the server stops a command at the figure; an eviction
    at the kubelet's would lose the sandbox). Requests are small, so a default session fits a small
    node; the limits are what the manifest allows."""
    return {
        "limits": {
            "cpu": f"{resources.cpu_millicores}m",
            "memory": f"{resources.memory_mib}Mi",
            "ephemeral-storage": f"{resources.disk_mib + EPHEMERAL_HEADROOM_MIB}Mi",
        },
        "requests": {
            "cpu": "100m",
            "memory": f"{MIN_MEMORY_MIB}Mi",
            "ephemeral-storage": f"{MIN_DISK_MIB}Mi",
        },
    }


def sandbox_service(
    ref: SessionRef,
    subagent: SubagentSpec,
    settings: OperatorSettings,
    attempt_index: int | None,
    replacement: int = 0,
) -> dict[str, Any]:
    """The stable name of a subagent's sandbox. It selects the current attempt's pod only: while
    the previous attempt's pod is still terminating, the new harness must never reach its
    workspace; likewise it selects only the newest replacement of a lost sandbox pod. Headless:
    the name resolves to the pod itself, so a fleet of sessions takes no addresses from the
    cluster's service range."""
    selector = names.sandbox_selector(ref.name, subagent.name)
    if attempt_index is not None:
        selector[names.LABEL_ATTEMPT] = str(attempt_index)
        # Only once a pod was replaced: pods created before the label existed still match.
        if replacement:
            selector[names.LABEL_REPLACEMENT] = str(replacement)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(
            ref,
            names.sandbox_service_name(ref.name, subagent.name),
            {names.LABEL_COMPONENT: names.COMPONENT_SANDBOX, names.LABEL_SUBAGENT: subagent.name},
        ),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "None",
            "selector": selector,
            "ports": [
                {"name": "http", "port": settings.sandbox_port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def sandbox_token_secret(ref: SessionRef, subagent: str, token: str) -> dict[str, Any]:
    """The token one subagent's sandbox requires, for every attempt and replacement of it; created
    once, never rewritten. Only that sandbox's pods and the harness mount it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(
            ref,
            names.sandbox_token_secret_name(ref.name, subagent, ref.uid),
            {names.LABEL_COMPONENT: names.COMPONENT_SANDBOX, names.LABEL_SUBAGENT: subagent},
        ),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


# --------------------------------------------------------------------------------------------------
# NetworkPolicies


def _peer(target: EgressTarget) -> dict[str, Any]:
    if target.cidr is not None:
        return {"ipBlock": {"cidr": target.cidr}}
    peer: dict[str, Any] = {}
    if target.namespace_labels is not None:
        peer["namespaceSelector"] = {"matchLabels": target.namespace_labels}
    if target.pod_labels is not None:
        peer["podSelector"] = {"matchLabels": target.pod_labels}
    return peer


def egress_rule(target: EgressTarget) -> dict[str, Any]:
    rule: dict[str, Any] = {"to": [_peer(target)]}
    if target.ports:
        rule["ports"] = [{"protocol": p, "port": port} for port in target.ports for p in target.protocols]
    return rule


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def store_networks(settings: OperatorSettings) -> list[Network]:
    """The store endpoints named by address: no sandbox egress may reach them. (A store named by
    pod labels runs in the cluster, whose private ranges `internet` egress never reaches.)"""
    return [ipaddress.ip_network(t.cidr, strict=False) for t in settings.store_egress if t.cidr is not None]


def _outside(network: Network, blocked: list[Network]) -> list[str]:
    """The blocked networks inside `network`, to cut out of it (CIDR ranges nest or are disjoint)."""
    return [
        str(b)
        for b in blocked
        if b.version == network.version and b != network and b.subnet_of(network)  # type: ignore[arg-type]
    ]


def internet_rules(stores: list[Network] | None = None) -> list[dict[str, Any]]:
    """The public internet: every IPv4 address but the special-purpose ranges, IPv6 global
    unicast but the special-purpose ranges inside it (belay.sandbox.egress), and never the
    stores."""
    blocks = []
    for everything, special in (
        (ipaddress.ip_network("0.0.0.0/0"), SPECIAL_PURPOSE_IPV4),
        (GLOBAL_UNICAST_IPV6, SPECIAL_PURPOSE_IPV6),
    ):
        ranges: list[Network] = list(special)
        extra = [
            n
            for n in stores or []
            if n.version == everything.version
            and n.subnet_of(everything)  # type: ignore[arg-type]
            and not any(n.subnet_of(r) for r in ranges)  # type: ignore[arg-type]
        ]
        excepted = [str(n) for n in [*ranges, *extra] if n != everything]
        blocks.append({"ipBlock": {"cidr": str(everything), "except": excepted}})
    return [{"to": blocks}]


def allowlist_rules(entries: list[str], stores: list[Network] | None = None) -> list[dict[str, Any]]:
    """Addresses and ranges from the allowlist, the stores cut out of any range that holds them
    (an entry inside one of them is dropped). The operator refuses a session whose allowlist
    holds a host name or a range wider than `internet` (belay.controller.admission) before it
    makes any object; should one reach here, it is left out, never opened."""
    blocked: list[Network] = list(stores or [])
    peers = []
    for entry in entries:
        if admission.allowlist_refusals([entry]):
            continue
        network = ipaddress.ip_network(entry.strip(), strict=False)
        if any(b.version == network.version and network.subnet_of(b) for b in blocked):  # type: ignore[arg-type]
            continue
        block: dict[str, Any] = {"cidr": str(network)}
        excluded = _outside(network, blocked)
        if excluded:
            block["except"] = excluded
        peers.append({"ipBlock": block})
    return [{"to": peers}] if peers else []


def sandbox_egress(subagent: SubagentSpec, settings: OperatorSettings) -> list[dict[str, Any]]:
    if subagent.network_profile == "none":
        return []
    dns = [egress_rule(settings.dns_egress)]
    if subagent.network_profile == "internet":
        return dns + internet_rules(store_networks(settings))
    return dns + allowlist_rules(subagent.allowlist, store_networks(settings))


def _policy(ref: SessionRef, name: str, selector: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(ref, name, {}),
        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"], **spec},
    }


def default_deny_policy(ref: SessionRef) -> dict[str, Any]:
    return _policy(ref, names.dns_label(ref.name, "default-deny"), {names.LABEL_SESSION: ref.name}, {})


def sandbox_policy(ref: SessionRef, subagent: SubagentSpec, settings: OperatorSettings) -> dict[str, Any]:
    from_harness = {
        "from": [{"podSelector": {"matchLabels": names.harness_selector(ref.name)}}],
        "ports": [{"protocol": "TCP", "port": settings.sandbox_port}],
    }
    return _policy(
        ref,
        names.dns_label(ref.name, "sbx", subagent.name),
        names.sandbox_selector(ref.name, subagent.name),
        {"ingress": [from_harness], "egress": sandbox_egress(subagent, settings)},
    )


def harness_policy(ref: SessionRef, settings: OperatorSettings) -> dict[str, Any]:
    to_sandboxes = {
        "to": [{"podSelector": {"matchLabels": names.sandbox_selector(ref.name)}}],
        "ports": [{"protocol": "TCP", "port": settings.sandbox_port}],
    }
    egress = [
        to_sandboxes,
        egress_rule(settings.dns_egress),
        *(egress_rule(t) for t in settings.store_egress),
        *(egress_rule(t) for t in settings.model_egress),
        *(egress_rule(t) for t in settings.git_egress),
    ]
    return _policy(
        ref,
        names.dns_label(ref.name, "harness"),
        names.harness_selector(ref.name),
        {"ingress": [], "egress": egress},
    )


# --------------------------------------------------------------------------------------------------
# The whole set


def desired_children(
    ref: SessionRef,
    spec: AgentSessionSpec,
    settings: OperatorSettings,
    attempt_index: int | None,
    replacements: Mapping[str, int] | None = None,
    fault_point: str | None = None,
    claimed: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Everything the operator applies for a session. With no attempt (the session has ended, or
    gave up) only the Services and NetworkPolicies remain: pods are not recreated. `replacements`
    counts, per subagent, the sandbox pods lost so far; each loss gives the sandbox pod a new name
    and moves its Service to it. `claimed`: the pool pods this attempt claimed, by subagent (they
    exist already, so no sandbox pod is made for those subagents, and the harness gets their claim
    keys)."""
    replaced = replacements or {}
    claims = claimed or {}
    objects: list[dict[str, Any]] = [default_deny_policy(ref), harness_policy(ref, settings)]
    for subagent in spec.subagents:
        objects.append(sandbox_policy(ref, subagent, settings))
        objects.append(
            sandbox_service(ref, subagent, settings, attempt_index, replaced.get(subagent.name, 0))
        )
    if attempt_index is not None:
        # Sandboxes first: the harness connects to them as soon as it starts.
        objects.extend(
            sandbox_pod(ref, s, settings, attempt_index, replaced.get(s.name, 0))
            for s in spec.subagents
            if s.name not in claims
        )
        objects.append(harness_pod(ref, spec, settings, attempt_index, fault_point, claims))
    return objects


def apply_stages(objects: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """`desired_children` in the stages they are applied in, each stage's objects at once (one
    round trip to the apiserver per stage, not per object): the policies and Services first, so
    no pod ever starts without its NetworkPolicies; then the sandbox pods; then the harness pod,
    which connects to them as soon as it starts. Within a stage, the order of the list."""

    def stage(obj: dict[str, Any]) -> int:
        if obj["kind"] != "Pod":
            return 0
        component = (obj["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT)
        return 2 if component == names.COMPONENT_HARNESS else 1

    stages: list[list[dict[str, Any]]] = [[], [], []]
    for obj in objects:
        stages[stage(obj)].append(obj)
    return [objs for objs in stages if objs]


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]
