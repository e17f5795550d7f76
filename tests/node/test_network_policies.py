"""The sessions' NetworkPolicies enforced on a real node (kube-router), tested with real connections
made from inside the pods' containers.

Two sessions' pods, exactly as the operator makes them (`desired_children`, owned by real
AgentSession objects; the harness containers listen on a port instead of running a session): session A has a
sandbox of each network profile, session B one sandbox with profile `none`. Servers the test runs:
one on the node's address (the host), and one in a network namespace of the test's own, reached
from the pods only (a routing rule for the pod range) at a private address listed in the
allowlist (a public address: an allowlist takes nothing `internet` does not reach), another
public address, a private address, a carrier-grade NAT address (100.64.0.0/10, which `internet`
never reaches either), and the cloud metadata address.

Each probe that the policies block is shown able to fail: with the policies removed (the switch:
deleting the namespace's NetworkPolicies), every probe of the matrix gets through.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from belay.api.agentsession import AgentSessionSpec
from belay.controller.desired import SessionRef, desired_children, sandbox_token_secret
from belay.controller.settings import EgressTarget, OperatorSettings
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import kubectl_json
from tests.controller.sessions import EXAMPLE_MANIFEST, subagent
from tests.node.cluster import GOT_THROUGH, RESTRICTED, NodeCluster, dns, tcp
from tests.testenv.node import DNS_SERVICE_IP, KUBERNETES_SERVICE_IP, NODE_IP, POD_CIDR
from tests.testenv.polling import wait_until
from tests.testenv.processes import ManagedProcess

pytestmark = [pytest.mark.testenv, pytest.mark.node]

NAMESPACE = "belay-policies"
OUTSIDE_NETNS = "belay-outside"
OUTSIDE_LINK = "belay-out0"
OUTSIDE_TABLE = "4242"
# The veth between the host and the outside namespace.
LINK_HOST, LINK_OUTSIDE = "192.168.78.1", "192.168.78.2"
# Public addresses, routed (from the pod range only) to the test's own namespace.
LISTED = "44.44.44.10"  # in the allowlist
PUBLIC = "44.44.45.10"  # not listed
UNLISTED = "192.168.77.11"  # private
SHARED = "100.64.77.10"  # carrier-grade NAT, a special-purpose range
METADATA = "169.254.169.254"
OUTSIDE_ADDRESSES = (LISTED, UNLISTED, PUBLIC, SHARED, METADATA)
OUTSIDE_PORT = 80
SANDBOX_PORT = 8080
ECHO_SERVER = (
    "import signal, socket, sys\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "server = socket.create_server(('0.0.0.0', int(sys.argv[1])))\n"
    "while True:\n"
    "    connection, _ = server.accept(); connection.sendall(b'ok'); connection.close()\n"
)
# What runs in the harness pods instead of a session: a listener, so that a probe can tell a
# connection the policies refuse from one nothing would answer.
HARNESS_STAND_IN = ["python3", "-c", ECHO_SERVER, str(SANDBOX_PORT)]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test's own network namespace holding the "outside" servers. Only traffic from the pod
    range is routed there, so the host's own routes (the metadata address among them) stay."""
    log = tmp_path_factory.mktemp("outside") / "server.log"
    ip("netns", "add", OUTSIDE_NETNS)
    server = ManagedProcess(
        "outside-server",
        ["ip", "netns", "exec", OUTSIDE_NETNS, "python3", "-c", ECHO_SERVER, str(OUTSIDE_PORT)],
        log,
    )
    try:
        ip("link", "add", OUTSIDE_LINK, "type", "veth", "peer", "name", "eth0", "netns", OUTSIDE_NETNS)
        ip("addr", "add", f"{LINK_HOST}/30", "dev", OUTSIDE_LINK)
        ip("link", "set", OUTSIDE_LINK, "up")
        inside = ["netns", "exec", OUTSIDE_NETNS, "ip"]
        ip(*inside, "addr", "add", f"{LINK_OUTSIDE}/30", "dev", "eth0")
        for address in OUTSIDE_ADDRESSES:
            ip(*inside, "addr", "add", f"{address}/32", "dev", "lo")
        ip(*inside, "link", "set", "lo", "up")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "route", "add", "default", "via", LINK_HOST)
        for address in OUTSIDE_ADDRESSES:
            ip("route", "add", f"{address}/32", "via", LINK_OUTSIDE, "table", OUTSIDE_TABLE)
        ip("rule", "add", "from", POD_CIDR, "lookup", OUTSIDE_TABLE, "priority", OUTSIDE_TABLE)
        server.start()
        yield
    finally:
        server.stop()
        subprocess.run(["ip", "rule", "del", "from", POD_CIDR, "lookup", OUTSIDE_TABLE], check=False)
        subprocess.run(["ip", "route", "flush", "table", OUTSIDE_TABLE], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", OUTSIDE_LINK], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", OUTSIDE_NETNS], check=False)


@pytest.fixture(scope="module")
def host_server() -> Iterator[int]:
    """A server on the node's own address: "the host" as a pod sees it."""
    listener = socket.create_server((NODE_IP, 0))
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                connection.sendall(b"ok")
                connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stopping.set()
        listener.close()
        thread.join(5)


@dataclass
class Sessions:
    a: SessionRef
    b: SessionRef
    pod_ips: dict[str, str]  # pod name -> address
    policies: list[dict[str, Any]]
    store_ports: tuple[int, int]

    def pod(self, ref: SessionRef, sub: str | None = None) -> str:
        return f"{ref.name}-harness-0" if sub is None else f"{ref.name}-sbx-{sub}-0"


def session_spec(subagents: list[dict[str, Any]]) -> AgentSessionSpec:
    raw = json.loads(json.dumps(EXAMPLE_MANIFEST["spec"]))
    template = raw["subagents"][0]
    raw["subagents"] = [{**template, **sub} for sub in subagents]
    # The example gates its implementer's publish; these sessions name their own subagents.
    raw.pop("approvalRequired", None)
    return AgentSessionSpec.model_validate(raw)


def create_session_object(cluster: NodeCluster, name: str, spec: AgentSessionSpec) -> SessionRef:
    """A real AgentSession (no operator watches it here), so the children's owner exists."""
    body = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    cluster.apply([body])
    uid = kubectl_json(cluster.kube, "get", "agentsession", "-n", NAMESPACE, name)["metadata"]["uid"]
    return SessionRef(name=name, namespace=NAMESPACE, uid=uid)


@pytest.fixture(scope="module")
def sessions(node_cluster: NodeCluster, outside: None) -> Sessions:
    cluster = node_cluster
    install_crds(cluster.kube)
    cluster.create_namespace(NAMESPACE, RESTRICTED)
    etcd_port = int(cluster.env.etcd.endpoint.rsplit(":", 1)[1])
    store_ports = (etcd_port, cluster.env.s3.port)
    settings = OperatorSettings(
        harness_image=cluster.image,
        sandbox_image=cluster.image,
        image_pull_policy="Never",
        store_egress=[EgressTarget(cidr=f"{NODE_IP}/32", ports=list(store_ports))],
    )
    spec_a = session_spec(
        [subagent("closed"), subagent("listed", "allowlist", [LISTED]), subagent("open", "internet")]
    )
    spec_b = session_spec([subagent("closed")])
    refs, objects = [], []
    for name, spec in (("np-a", spec_a), ("np-b", spec_b)):
        ref = create_session_object(cluster, name, spec)
        refs.append(ref)
        objects += [sandbox_token_secret(ref, sub.name, secrets.token_hex(16)) for sub in spec.subagents]
        for obj in desired_children(ref, spec, settings, attempt_index=0):
            if obj["kind"] == "Pod" and obj["spec"]["containers"][0]["name"] == "harness":
                obj["spec"]["containers"][0]["command"] = HARNESS_STAND_IN
            objects.append(obj)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    cluster.apply([o for o in objects if o["kind"] != "NetworkPolicy"])
    pods = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
    running = cluster.wait_ready(NAMESPACE, pods)
    return Sessions(
        a=refs[0],
        b=refs[1],
        pod_ips={name: pod["status"]["podIP"] for name, pod in running.items()},
        policies=policies,
        store_ports=store_ports,
    )


def matrix(
    s: Sessions, host_port: int, apiserver_port: int
) -> dict[str, dict[str, tuple[dict[str, Any], bool]]]:
    """Per source pod: target name -> (target, whether the policies let it through)."""
    a, b = s.a, s.b
    ip_of = s.pod_ips.__getitem__
    service_name = f"sbx-{a.name}-closed.{NAMESPACE}.svc.cluster.local"
    etcd_port, s3_port = s.store_ports
    return {
        s.pod(a, "closed"): {
            "DNS (kube-dns Service)": (dns(DNS_SERVICE_IP), False),
            "apiserver (kubernetes Service)": (tcp(KUBERNETES_SERVICE_IP, 443), False),
            "apiserver (node address)": (tcp(NODE_IP, apiserver_port), False),
            "host server": (tcp(NODE_IP, host_port), False),
            "own session's other sandbox": (tcp(ip_of(s.pod(a, "listed")), SANDBOX_PORT), False),
            "own session's harness pod": (tcp(ip_of(s.pod(a)), SANDBOX_PORT), False),
            "other session's sandbox": (tcp(ip_of(s.pod(b, "closed")), SANDBOX_PORT), False),
            "public address": (tcp(PUBLIC, OUTSIDE_PORT), False),
        },
        s.pod(a, "listed"): {
            "listed address": (tcp(LISTED, OUTSIDE_PORT), True),
            "DNS (kube-dns Service)": (dns(DNS_SERVICE_IP), True),
            "private address": (tcp(UNLISTED, OUTSIDE_PORT), False),
            "unlisted public address": (tcp(PUBLIC, OUTSIDE_PORT), False),
            "carrier-grade NAT address": (tcp(SHARED, OUTSIDE_PORT), False),
            "metadata address": (tcp(METADATA, OUTSIDE_PORT), False),
            "host server": (tcp(NODE_IP, host_port), False),
            "other session's sandbox": (tcp(ip_of(s.pod(b, "closed")), SANDBOX_PORT), False),
        },
        s.pod(a, "open"): {
            "public address": (tcp(PUBLIC, OUTSIDE_PORT), True),
            "DNS (kube-dns Service)": (dns(DNS_SERVICE_IP), True),
            "metadata address": (tcp(METADATA, OUTSIDE_PORT), False),
            "private address": (tcp(UNLISTED, OUTSIDE_PORT), False),
            "carrier-grade NAT address": (tcp(SHARED, OUTSIDE_PORT), False),
            "host server": (tcp(NODE_IP, host_port), False),
            "apiserver (kubernetes Service)": (tcp(KUBERNETES_SERVICE_IP, 443), False),
            "own session's other sandbox": (tcp(ip_of(s.pod(a, "closed")), SANDBOX_PORT), False),
            "other session's sandbox": (tcp(ip_of(s.pod(b, "closed")), SANDBOX_PORT), False),
        },
        s.pod(a): {
            "own sandbox by its Service name": (tcp(service_name, SANDBOX_PORT), True),
            "own sandbox (listed)": (tcp(ip_of(s.pod(a, "listed")), SANDBOX_PORT), True),
            "own sandbox (open)": (tcp(ip_of(s.pod(a, "open")), SANDBOX_PORT), True),
            "DNS (kube-dns Service)": (dns(DNS_SERVICE_IP), True),
            "event store (etcd)": (tcp(NODE_IP, etcd_port), True),
            "artifact store (S3)": (tcp(NODE_IP, s3_port), True),
            "apiserver (node address)": (tcp(NODE_IP, apiserver_port), False),
            "host server": (tcp(NODE_IP, host_port), False),
            "other session's sandbox": (tcp(ip_of(s.pod(b, "closed")), SANDBOX_PORT), False),
            "public address": (tcp(PUBLIC, OUTSIDE_PORT), False),
        },
        s.pod(b): {
            "own sandbox": (tcp(ip_of(s.pod(b, "closed")), SANDBOX_PORT), True),
            "other session's sandbox": (tcp(ip_of(s.pod(a, "closed")), SANDBOX_PORT), False),
        },
    }


def run_matrix(
    cluster: NodeCluster, plan: dict[str, dict[str, tuple[dict[str, Any], bool]]]
) -> dict[str, dict[str, str]]:
    return {
        pod: cluster.probe(NAMESPACE, pod, {name: target for name, (target, _) in targets.items()})
        for pod, targets in plan.items()
    }


def unexpected(
    plan: dict[str, dict[str, tuple[dict[str, Any], bool]]], seen: dict[str, dict[str, str]], walls: bool
) -> list[str]:
    """Probes whose outcome is not what the policies (walls=True) or their absence would give."""
    wrong = []
    for pod, targets in plan.items():
        for name, (_, allowed) in targets.items():
            through = seen[pod][name] in GOT_THROUGH
            expected = allowed if walls else True
            if through != expected:
                wrong.append(
                    f"{pod} -> {name}: {seen[pod][name]} (expected {'through' if expected else 'blocked'})"
                )
    return wrong


def apply_policies(cluster: NodeCluster, s: Sessions) -> None:
    cluster.apply(s.policies)


def remove_policies(cluster: NodeCluster) -> None:
    cluster.kube.kubectl("delete", "networkpolicies", "--all", "-n", NAMESPACE)


def closed_sandbox_reaches_other_session(cluster: NodeCluster, s: Sessions) -> bool:
    target = {"t": tcp(s.pod_ips[s.pod(s.b, "closed")], SANDBOX_PORT)}
    return cluster.probe(NAMESPACE, s.pod(s.a, "closed"), target)["t"] in GOT_THROUGH


def test_without_the_policies_every_probe_of_the_matrix_gets_through(
    node_cluster: NodeCluster, sessions: Sessions, host_server: int
) -> None:
    """The switch that removes the wall: the same probes as below, with no NetworkPolicy in the
    namespace. Every one gets through, so each "blocked" below is the policies' doing."""
    remove_policies(node_cluster)
    wait_until(
        lambda: closed_sandbox_reaches_other_session(node_cluster, sessions),
        "kube-router to drop the policies",
        timeout=120,
        interval=0.5,
    )
    plan = matrix(sessions, host_server, node_cluster.kube.apiserver_port)
    seen = run_matrix(node_cluster, plan)
    assert unexpected(plan, seen, walls=False) == []


def test_the_policies_allow_exactly_what_each_profile_and_the_harness_need(
    node_cluster: NodeCluster, sessions: Sessions, host_server: int
) -> None:
    apply_policies(node_cluster, sessions)
    wait_until(
        lambda: not closed_sandbox_reaches_other_session(node_cluster, sessions),
        "kube-router to enforce the policies",
        timeout=120,
        interval=0.5,
    )
    plan = matrix(sessions, host_server, node_cluster.kube.apiserver_port)
    seen = run_matrix(node_cluster, plan)
    assert unexpected(plan, seen, walls=True) == []
