"""Operator settings: images, store locations, where pods may reach and run. The chart sets them as
environment variables (`BELAY_OPERATOR_SETTINGS`, one JSON document); store credentials stay in
a Secret that pods load with `envFrom`, so no credential ever appears in an object the operator
writes.

Images are the operator's to choose: a session runs the default harness and sandbox images, or
names one of the images listed here (`spec.executor.image`, `spec.subagents[].image` hold a name,
never a reference), so whoever may create a session cannot run code of their choosing in a pod
that holds the fleet's store credentials."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SETTINGS_ENV = "BELAY_OPERATOR_SETTINGS"
# Where a pod finds the fleet etcd's TLS Secret, mounted as a volume.
ETCD_CREDENTIALS_MOUNT = "/etc/belay/etcd"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HarnessResources(Settings):
    """The harness container's requests and limits. Requests of CPU and memory are required: a pod
    without them is BestEffort, the first evicted under pressure and refused in a namespace whose
    ResourceQuota asks for them."""

    requests: dict[Literal["cpu", "memory", "ephemeral-storage"], str]
    limits: dict[Literal["cpu", "memory", "ephemeral-storage"], str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _never_best_effort(self) -> HarnessResources:
        missing = [name for name in ("cpu", "memory") if not self.requests.get(name)]
        if missing:
            raise ValueError(
                f"the harness's resources request no {' or '.join(missing)}: it would be BestEffort"
            )
        return self


class EgressTarget(Settings):
    """One destination a pod may reach: an address range, or pods chosen by labels."""

    cidr: str | None = None
    namespace_labels: dict[str, str] | None = None
    pod_labels: dict[str, str] | None = None
    ports: list[int] = Field(default_factory=list)
    protocols: tuple[Literal["TCP", "UDP"], ...] = ("TCP",)

    @model_validator(mode="after")
    def _one_kind_of_peer(self) -> EgressTarget:
        by_labels = self.namespace_labels is not None or self.pod_labels is not None
        if (self.cidr is None) == (not by_labels):
            raise ValueError("an egress target has either cidr or namespace/pod labels")
        return self


NetworkProfile = Literal["none", "allowlist", "internet"]


class OperatorSettings(Settings):
    # The images a session runs when it names none.
    harness_image: str = "belay-harness:latest"
    sandbox_image: str = "belay-harness:latest"
    # The images a session may name instead, name -> image reference. A name not listed here is
    # refused by the operator (status NotAllowed, nothing created).
    harness_images: dict[str, str] = Field(default_factory=dict)
    sandbox_images: dict[str, str] = Field(default_factory=dict)
    # Where sandbox pods run (they run code a model chose): the RuntimeClass (gVisor, Kata) for
    # every sandbox, or per network profile; the RuntimeClasses a subagent may name instead
    # (`spec.subagents[].runtimeClassName`; the ones named here are always allowed); the nodes
    # (node selector, tolerations) and whether the pod gets a user namespace of its own
    # (`hostUsers: false`, where the nodes support it).
    sandbox_runtime_class: str | None = None
    sandbox_runtime_classes: dict[NetworkProfile, str] = Field(default_factory=dict)
    allowed_runtime_classes: list[str] = Field(default_factory=list)
    sandbox_node_selector: dict[str, str] = Field(default_factory=dict)
    sandbox_tolerations: list[dict[str, Any]] = Field(default_factory=list)
    sandbox_user_namespace: bool = False
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    event_store: str = "etcd://belay-etcd:2379"
    artifact_store: str = "s3://belay-artifacts"
    # A Secret with store credentials (AWS_ACCESS_KEY_ID, ...), loaded into the harness with envFrom.
    store_secret: str | None = None
    # A TLS Secret (ca.crt, tls.crt, tls.key) for the fleet's etcd: mounted at ETCD_CREDENTIALS_MOUNT
    # in the operator and in the harness of every session on the fleet's stores, and named on the
    # event store's URL (`?credentials=`), so the record is reached over TLS with a client
    # certificate, or an etcd user's `username` and `password` beside `ca.crt`
    # (belay.stores.etcd.credentials). It must exist in each session namespace too.
    etcd_credentials_secret: str | None = None

    def fleet_event_store(self) -> str:
        """The fleet's event store URL as the operator and the harnesses open it: with the mounted
        etcd credentials named when there are some."""
        if not self.etcd_credentials_secret or not self.event_store.startswith("etcd://"):
            return self.event_store
        joiner = "&" if "?" in self.event_store else "?"
        return f"{self.event_store}{joiner}credentials={ETCD_CREDENTIALS_MOUNT}"

    # Where the stores and the model endpoint are: the harness's only egress besides its sandboxes.
    store_egress: list[EgressTarget] = Field(default_factory=list)
    model_egress: list[EgressTarget] = Field(default_factory=list)
    # The git servers git inputs are fetched from (belay.harness.git_input): the harness fetches.
    git_egress: list[EgressTarget] = Field(default_factory=list)
    # The cluster DNS, for pods whose egress names hosts.
    dns_egress: EgressTarget = EgressTarget(
        namespace_labels={"kubernetes.io/metadata.name": "kube-system"},
        pod_labels={"k8s-app": "kube-dns"},
        ports=[53],
        protocols=("UDP", "TCP"),
    )
    sandbox_port: int = 8080
    # How long a harness told to stop (its pod deleted, evicted, its node drained) lets the tool
    # calls in flight finish, and a sandbox the requests it is running: harness and sandbox pods get
    # this plus belay.harness.stopping.STOP_MARGIN_S as their terminationGracePeriodSeconds.
    stop_drain_s: int = Field(default=20, ge=0, le=3600)
    run_as_user: int = 65532
    # How long the next harness attempt waits after two attempts in a row ended the same way at the
    # same point (doubled for each further one, until the third stalls the session).
    failure_backoff_s: float = Field(default=10.0, ge=0, le=600)
    # A harness pod still Pending this long after it was made (an image it cannot pull, a Secret it
    # loads that is missing, no node for it) ends its attempt, recorded lost with the reason.
    harness_start_deadline_s: float = Field(default=300.0, gt=0, le=86400)
    workload_service_account: str = "default"
    # The harness pod's own ServiceAccount (it mounts no token of it; workload identity, IRSA, may
    # still give it cloud credentials): the chart makes one in each watched namespace.
    harness_service_account: str = "default"
    harness_resources: HarnessResources = HarnessResources(
        requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "1Gi"}
    )
    # Secrets (of the session's namespace) the kubelet pulls harness and sandbox images with.
    image_pull_secrets: list[str] = Field(default_factory=list)
    # A Secret whose BELAY_RECORD_KEY is the record key (belay.stores.integrity): given to the
    # harness of every session on the fleet's stores, never to a sandbox. It must exist in each
    # session namespace (the chart makes it in each watched one).
    record_key_secret: str | None = None
    # Idle sandbox pods kept ready per sandbox template in use in a namespace, for new and
    # recovering attempts to claim (docs/operator.md#the-sandbox-pool); 0: no pool. The chart sets
    # `sandboxPool.size`.
    sandbox_pool_size: int = Field(default=0, ge=0, le=64)
    # After a claim, how long the pool waits before making the pods that replace the ones taken:
    # pods started beside the claiming attempt's harness pod compete with it for the node while it
    # starts, and that start is what a recovery waits for. The chart sets
    # `sandboxPool.refillDelaySeconds`.
    sandbox_pool_refill_delay_s: float = Field(default=3.0, ge=0, le=300)

    def runtime_classes(self) -> set[str]:
        """Every RuntimeClass a sandbox of this operator may run under."""
        named = {self.sandbox_runtime_class, *self.sandbox_runtime_classes.values()}
        return {name for name in named if name} | set(self.allowed_runtime_classes)


def settings_from_environment() -> OperatorSettings:
    raw = os.environ.get(SETTINGS_ENV)
    return OperatorSettings.model_validate_json(raw) if raw else OperatorSettings()
