"""The chart's evaluation etcd on the node (`etcd.deploy=true`, docs/operator.md#try-it-on-the-charts-etcd):
`helm install` with no etcd of one's own deploys three members (the etcd the tests build, as an
image, on PersistentVolumes the test provides, in namespaces under Pod Security `restricted`); the
operator and the harness find it with no store setting, and the example session runs to Succeeded
with its record in that etcd. A plaintext client, and a TLS client without the client
certificate, are refused by every member."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from belay.journal.state import fold
from belay.stores.etcd.credentials import EtcdCredentials
from tests.belay_cli import steps_run_twice
from tests.controller.operator_process import kubectl_json, wait_for_session_end
from tests.controller.test_chart import CHART, helm
from tests.node.cluster import RESTRICTED, NodeCluster
from tests.node.sessions import SESSION, STORE_SECRET, SessionSetup, ticket_service
from tests.testenv.etcd import refuses_a_write
from tests.testenv.images import NONROOT, etcd_image
from tests.testenv.network import LOOPBACK
from tests.testenv.node import NODE_IP

pytestmark = [pytest.mark.testenv, pytest.mark.node]

RELEASE = "eval"
ETCD = f"{RELEASE}-etcd"
MEMBERS = [f"{ETCD}-{i}" for i in range(3)]


@pytest.fixture
def setup(node_cluster: NodeCluster, helm_bin: Path, tmp_path: Path) -> Iterator[SessionSetup]:
    """A namespace for the operator and its etcd, one for sessions, a bucket, the store Secret in
    both, and a PersistentVolume for each member (a folder of the node; no provisioner runs here)."""
    kube = node_cluster.kube
    suffix = secrets.token_hex(3)
    operator_namespace, namespace = f"eval-{suffix}", f"team-{suffix}"
    volumes = [f"eval-etcd-{suffix}-{i}" for i in range(3)]
    tickets_file = tmp_path / "tickets.json"
    with ticket_service(tickets_file) as tickets:
        found = SessionSetup(
            cluster=node_cluster,
            namespace=namespace,
            events_url="",  # known once the chart's etcd runs
            bucket=f"{namespace}-{secrets.token_hex(4)}",
            tickets=tickets,
            tickets_file=tickets_file,
        )
        found.prepare()
        node_cluster.create_namespace(operator_namespace, RESTRICTED)
        secret = kubectl_json(kube, "get", "secret", STORE_SECRET, "-n", namespace)
        node_cluster.apply([{**secret, "metadata": {"name": STORE_SECRET, "namespace": operator_namespace}}])
        node_cluster.apply([persistent_volume(name, tmp_path / name) for name in volumes])
        try:
            yield found
        finally:
            kube.kubectl("delete", "agentsession", SESSION, "-n", namespace, "--timeout=120s", check=False)
            helm(helm_bin, "uninstall", RELEASE, "--namespace", operator_namespace, kube=kube)
            for name in (namespace, operator_namespace):
                kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
            kube.kubectl("delete", "pv", *volumes, "--wait=false", check=False)


def persistent_volume(name: str, folder: Path) -> dict[str, object]:
    folder.mkdir()
    os.chown(folder, NONROOT, NONROOT)  # a hostPath volume is not given the pod's fsGroup
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(folder), "type": "Directory"},
        },
    }


def test_the_charts_etcd_holds_the_record_of_a_session_and_refuses_plaintext(
    node_cluster: NodeCluster, setup: SessionSetup, helm_bin: Path, tmp_path: Path
) -> None:
    kube = node_cluster.kube
    operator_namespace = f"eval-{setup.namespace.removeprefix('team-')}"
    image, image_tag = node_cluster.image.rsplit(":", 1)
    etcd, etcd_tag = etcd_image().reference.rsplit(":", 1)
    s3_port = node_cluster.env.s3.port
    installed = helm(
        helm_bin, "install", RELEASE, str(CHART), "--namespace", operator_namespace, "--wait", "--timeout=5m",
        "--set", f"image.repository={image}", "--set", f"image.tag={image_tag}",
        "--set", "image.pullPolicy=Never", "--set", "replicaCount=1", "--set", "sandboxPool.size=0",
        "--set", "etcd.deploy=true",
        "--set", f"etcd.image.repository={etcd}", "--set", f"etcd.image.tag={etcd_tag}",
        "--set", "etcd.image.pullPolicy=Never",
        "--set", f"stores.artifacts=s3://{setup.bucket}", "--set", f"stores.existingSecret={STORE_SECRET}",
        "--set-json", f'watchNamespaces=["{setup.namespace}"]',
        "--set-json", f'sessions.storeEgress=[{{"cidr": "{NODE_IP}/32", "ports": [{s3_port}]}}]',
        "--set-json", f'sessions.modelEgress=[{{"cidr": "{NODE_IP}/32", "ports": [{setup.tickets.port}]}}]',
        kube=kube,
    )  # fmt: skip

    def describe() -> str:
        pods = kube.kubectl("get", "pods,pvc", "-n", operator_namespace, "-o", "wide", check=False).stdout
        logs = kube.kubectl(
            "logs", "-n", operator_namespace, f"deployment/{RELEASE}", "--tail=40", check=False
        ).stdout
        etcd_log = kube.kubectl("logs", "-n", operator_namespace, MEMBERS[0], "--tail=20", check=False).stdout
        return f"{installed.stderr[-2000:]}\n{pods}\n{setup.describe()}\noperator:\n{logs}\netcd:\n{etcd_log}"

    assert installed.returncode == 0, describe()
    # Three members, each on its own claim of the volumes given, admitted under `restricted`.
    members = {name: node_cluster.pod(operator_namespace, name) for name in MEMBERS}
    claims = {p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for p in members.values()}
    assert claims == {f"data-{name}" for name in MEMBERS}, describe()

    setup.cluster.apply([setup.manifest(approved=True)])
    status = wait_for_session_end(kube, setup.namespace, SESSION, timeout=600, describe=describe)
    assert status["phase"] == "Succeeded", describe()

    # The record is in the chart's etcd: read over TLS with the client certificate the chart made
    # in the session namespace (through a local port: the members' certificate names 127.0.0.1).
    client = tmp_path / "etcd-client"
    client.mkdir()
    secret = kubectl_json(kube, "get", "secret", f"{ETCD}-client", "-n", setup.namespace)
    for file, value in secret["data"].items():
        (client / file).write_bytes(base64.b64decode(value))
    key = kubectl_json(kube, "get", "secret", f"{RELEASE}-record-key", "-n", setup.namespace)
    setup.record_key = base64.b64decode(key["data"]["BELAY_RECORD_KEY"]).decode()
    with forwarded(members[MEMBERS[0]]["status"]["podIP"], 2379) as port:
        setup.events_url = f"etcd://{LOOPBACK}:{port}/belay?credentials={client}"
        events = setup.events()
    assert {"fix.patch", "report.md"} <= set(fold(events).deliverables)
    assert steps_run_twice(events) == []
    assert setup.tickets_filed() == 1

    # Each member answers that certificate, and refuses a client without it, or in plaintext.
    credentials = EtcdCredentials.from_directory(client)
    for name, pod in members.items():
        address = pod["status"]["podIP"]
        with forwarded(address, 2379) as port:
            over_tls = [f"https://{LOOPBACK}:{port}"]
            assert not asyncio.run(refuses_a_write(over_tls, credentials)), name
            assert asyncio.run(refuses_a_write(over_tls, EtcdCredentials(ca=credentials.ca))), name
        assert asyncio.run(refuses_a_write([f"http://{address}:2379"], None)), name


@contextmanager
def forwarded(host: str, port: int) -> Iterator[int]:
    """A port on loopback whose connections go on to host:port, byte for byte."""
    listener = socket.create_server((LOOPBACK, 0))
    listener.settimeout(0.5)  # so that it sees when to stop
    stopping = threading.Event()

    def pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        while not stopping.is_set():
            try:
                incoming, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            incoming.settimeout(None)
            outgoing = socket.create_connection((host, port), timeout=10)
            outgoing.settimeout(None)
            for source, target in ((incoming, outgoing), (outgoing, incoming)):
                threading.Thread(target=pipe, args=(source, target), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stopping.set()
        thread.join(5)
        listener.close()
