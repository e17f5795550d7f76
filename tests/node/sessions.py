"""The example session run by the operator on the real node: the stores on the node's address, a
ticket service there too, and the operator's settings that point the pods at them."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from belay.controller import names
from belay.controller.settings import EgressTarget, OperatorSettings
from belay.journal.events import Event
from belay.local.tickets import TicketService, load_tickets
from belay.stores.factory import normalize_spec, open_event_store
from tests.api.kubehelpers import REPO_ROOT, install_crds
from tests.controller.operator_process import OperatorProcess, agentsession_status, kubectl_json
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.node.cluster import RESTRICTED, NodeCluster
from tests.testenv.etcd import EtcdCluster
from tests.testenv.node import NODE_IP

SESSION = "parser-fix"
STORE_SECRET = "belay-stores"
# The TLS Secret with the client certificate of an etcd serving TLS (etcd_credentials_secret).
ETCD_CLIENT_SECRET = "belay-etcd-client"
# The example for a cluster: its plan and repository are read from the image.
CLUSTER_MANIFEST = REPO_ROOT / "examples/parser-fix/cluster-session.yaml"
GRANT = EXAMPLE_MANIFEST["spec"]["approvals"][0]
APPROVAL_ID = f"approve-{GRANT['operationId']}"


# The credential the ticket service takes, which the store Secret gives every harness.
TICKETS_TOKEN = "tickets-credential-" + secrets.token_hex(16)


@contextmanager
def ticket_service(state_file: Path) -> Iterator[TicketService]:
    """The ticket service the example's tools call, on the node's address (where the harness pod
    reaches it), on a loop of its own: the test's own loop waits on kubectl."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    starting = TicketService(state_file, TICKETS_TOKEN, host=NODE_IP).start()
    service = asyncio.run_coroutine_threadsafe(starting, loop).result(30)
    try:
        yield service
    finally:
        asyncio.run_coroutine_threadsafe(service.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class SessionSetup:
    """One session's namespace, stores and settings on the node."""

    cluster: NodeCluster
    namespace: str
    events_url: str
    bucket: str
    tickets: TicketService
    tickets_file: Path
    operator_log: Callable[[], str] = lambda: ""
    operator: OperatorProcess | None = None
    # The event store's etcd members, when not the environment's one (a three-member cluster).
    etcd_ports: list[int] = field(default_factory=list)
    sandbox_pool_size: int = 0
    # RuntimeClasses a subagent may name (`spec.subagents[].runtimeClassName`).
    runtime_classes: list[str] = field(default_factory=list)
    # The record key the session's record is written under, when there is one (the chart's).
    record_key: str = ""
    # Ports of git servers on the node's address that the harness may fetch git inputs from.
    git_ports: list[int] = field(default_factory=list)
    # The client certificate's folder (a TLS Secret's files) when the etcd serves TLS: named on
    # events_url for the test's own reads, given to the pods as ETCD_CLIENT_SECRET.
    etcd_client: Path | None = None

    @property
    def etcd_port(self) -> int:
        return int(self.cluster.env.etcd.endpoint.rsplit(":", 1)[1])

    def settings(self) -> OperatorSettings:
        node = f"{NODE_IP}/32"
        stores = [*(self.etcd_ports or [self.etcd_port]), self.cluster.env.s3.port]
        return OperatorSettings(
            harness_image=self.cluster.image,
            sandbox_image=self.cluster.image,
            image_pull_policy="Never",
            # The pods find the client certificate where the Secret is mounted, not at events_url's.
            event_store=self.events_url.split("?", 1)[0] if self.etcd_client else self.events_url,
            etcd_credentials_secret=ETCD_CLIENT_SECRET if self.etcd_client else None,
            artifact_store=f"s3://{self.bucket}",
            store_secret=STORE_SECRET,
            store_egress=[EgressTarget(cidr=node, ports=stores)],
            model_egress=[EgressTarget(cidr=node, ports=[self.tickets.port])],
            sandbox_pool_size=self.sandbox_pool_size,
            allowed_runtime_classes=self.runtime_classes,
            git_egress=[EgressTarget(cidr=node, ports=self.git_ports)] if self.git_ports else [],
        )

    def store_environment(self) -> dict[str, str]:
        """What the store Secret gives every harness (and the operator): S3 credentials and
        endpoint, and the ticket service's address."""
        s3 = self.cluster.env.s3
        return {
            "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            "AWS_ENDPOINT_URL": s3.endpoint_url,
            "AWS_DEFAULT_REGION": s3.region,
            "BELAY_TICKETS_URL": self.tickets.url,
            "BELAY_TICKETS_TOKEN": TICKETS_TOKEN,
        }

    def prepare(self) -> None:
        self.cluster.create_namespace(self.namespace, RESTRICTED)
        self.cluster.env.s3.client().create_bucket(Bucket=self.bucket)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": STORE_SECRET, "namespace": self.namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in self.store_environment().items()},
        }
        self.cluster.apply([secret])
        if self.etcd_client is not None:
            files = {f.name: base64.b64encode(f.read_bytes()).decode() for f in self.etcd_client.iterdir()}
            client = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {"name": ETCD_CLIENT_SECRET, "namespace": self.namespace},
                "data": files,
            }
            self.cluster.apply([client])

    def events(self) -> list[Event]:
        """The session's record as it is now, read from its event store."""

        async def read() -> list[Event]:
            spec = normalize_spec(self.events_url)
            if self.record_key:
                spec["record_key"] = self.record_key
            store = open_event_store(spec)
            try:
                return list(await store.read(names.record_id(self.namespace, SESSION)))
            finally:
                await store.close()

        return asyncio.run(read())

    def tickets_filed(self) -> int:
        return len(load_tickets(self.tickets_file)) if self.tickets_file.exists() else 0

    # ---- the session

    def manifest(self, approved: bool = False) -> dict[str, Any]:
        """examples/parser-fix/cluster-session.yaml in this namespace. Without its approval it
        stops before publishing the patch and waits, with its pods running, until it is given."""
        manifest: dict[str, Any] = yaml.safe_load(CLUSTER_MANIFEST.read_text())
        manifest["metadata"]["namespace"] = self.namespace
        if not approved:
            manifest["spec"].pop("approvals")
        return manifest

    def approve(self) -> None:
        """What `kubectl belay approve` writes."""
        patch = {"spec": {"approvals": [GRANT]}}
        self.cluster.kube.kubectl(
            "patch", "agentsession", SESSION, "-n", self.namespace, "--type=merge", "-p", json.dumps(patch)
        )

    def status(self) -> dict[str, Any]:
        return agentsession_status(self.cluster.kube, self.namespace, SESSION)

    def waiting_for_approval(self) -> dict[str, Any] | None:
        status = self.status()
        pending = [p.get("approvalId") for p in status.get("pendingApprovals") or []]
        return status if APPROVAL_ID in pending else None

    def pods(self) -> dict[str, dict[str, Any]]:
        listed = kubectl_json(
            self.cluster.kube, "get", "pods", "-n", self.namespace, "-l", f"{names.LABEL_SESSION}={SESSION}"
        )
        return {p["metadata"]["name"]: p for p in listed.get("items", [])}

    def running_pods(self) -> dict[str, dict[str, Any]]:
        return {
            n: p
            for n, p in self.pods().items()
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    def pool_pods(self) -> dict[str, dict[str, Any]]:
        """The namespace's idle pool pods, ready to be claimed (docs/operator.md#the-sandbox-pool)."""
        listed = kubectl_json(
            self.cluster.kube, "get", "pods", "-n", self.namespace, "-l",
            f"{names.LABEL_COMPONENT}={names.COMPONENT_POOL}",
        )  # fmt: skip
        return {
            p["metadata"]["name"]: p
            for p in listed.get("items", [])
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{"ready": False}])
        }

    def claimed_pods(self) -> dict[str, dict[str, Any]]:
        """The session's sandbox pods that came from the pool, by subagent."""
        return {
            pod["metadata"]["labels"][names.LABEL_SUBAGENT]: pod
            for pod in self.pods().values()
            if names.LABEL_TEMPLATE in pod["metadata"]["labels"]
            and not pod["metadata"].get("deletionTimestamp")
        }

    def describe(self) -> str:
        kube = self.cluster.kube
        return "\n".join(
            [
                kube.kubectl("get", "pods", "-n", self.namespace, "-o", "wide", check=False).stdout,
                json.dumps(self.status(), indent=1)[-3000:],
            ]
        )


def new_setup(
    cluster: NodeCluster,
    namespace: str,
    tickets: TicketService,
    tickets_file: Path,
    etcd: EtcdCluster | None = None,
    sandbox_pool_size: int = 0,
    runtime_classes: Sequence[str] = (),
) -> SessionSetup:
    """With `etcd`, the record goes to that cluster (its members on the node's address) instead
    of the environment's one etcd."""
    prefix = f"/{namespace}-{secrets.token_hex(4)}"
    if etcd is None:
        events_url = f"etcd://{cluster.env.etcd.endpoint.removeprefix('http://')}{prefix}"
        ports = []
    else:
        events_url = etcd.events_url(prefix)
        ports = [int(url.rsplit(":", 1)[1]) for url in etcd.endpoints]
    setup = SessionSetup(
        cluster=cluster,
        namespace=namespace,
        events_url=events_url,
        bucket=f"{namespace}-{secrets.token_hex(4)}",
        tickets=tickets,
        tickets_file=tickets_file,
        etcd_ports=ports,
        sandbox_pool_size=sandbox_pool_size,
        runtime_classes=list(runtime_classes),
        etcd_client=etcd.tls.client_dir if etcd is not None and etcd.tls is not None else None,
    )
    setup.prepare()
    return setup


@contextmanager
def operated_session(
    cluster: NodeCluster,
    name_prefix: str,
    work: Path,
    set_env: Callable[[str, str], None],
    etcd: EtcdCluster | None = None,
    sandbox_pool_size: int = 0,
    wait_for_namespace: bool = False,
    runtime_classes: Sequence[str] = (),
    git_ports: list[int] | None = None,
) -> Iterator[SessionSetup]:
    """A namespace of its own with the stores' Secret, and the operator (a process on the host, as
    in tests/controller) watching it. The sessions are deleted afterwards, so their pods go; with
    `wait_for_namespace`, the namespace too before this returns (what belongs to no session, a
    pool's pods, goes with it)."""
    install_crds(cluster.kube)
    namespace = f"{name_prefix}-{secrets.token_hex(3)}"
    tickets_file = work / "tickets.json"
    with ticket_service(tickets_file) as tickets:
        setup = new_setup(
            cluster,
            namespace,
            tickets,
            tickets_file,
            etcd=etcd,
            sandbox_pool_size=sandbox_pool_size,
            runtime_classes=runtime_classes,
        )
        setup.git_ports = list(git_ports or [])
        for key, value in setup.store_environment().items():
            set_env(key, value)
        settings, log = setup.settings(), work / "operator.log"
        operator = OperatorProcess(cluster.kube, namespace, settings, log, etcd_credentials=setup.etcd_client)
        operator.start()
        setup.operator_log = operator.log
        setup.operator = operator
        try:
            yield setup
        finally:
            cluster.kube.kubectl(
                "delete", "agentsession", "--all", "-n", namespace, "--timeout=120s", check=False
            )
            operator.stop()
            waiting = "--timeout=180s" if wait_for_namespace else "--wait=false"
            cluster.kube.kubectl("delete", "namespace", namespace, waiting, check=False)
