"""The chart's evaluation etcd (`etcd.deploy`), rendered: three members behind a headless Service,
peers and clients on TLS only with certificates the chart makes (the peers' CA apart from the
clients'), kept across an upgrade; the operator and the harnesses pointed at it with nothing more
to set; pods Pod Security `restricted` admits; a PodDisruptionBudget that keeps the quorum; and a
clear refusal when an etcd of one's own is named too. tests/node/test_chart_etcd_on_node.py runs it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from belay.controller import desired
from belay.controller.settings import OperatorSettings
from tests.controller.test_chart import CHART, NAMESPACE, RELEASE, helm, operator_container
from tests.testenv.kube import ControlPlane

ETCD = f"{RELEASE}-etcd"
RESTRICTED = "pod-security.kubernetes.io/enforce"
EVALUATION = ("--set", "etcd.deploy=true", "--set", "stores.artifacts=s3://belay-artifacts")


def render(helm_bin: Path, *sets: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    result = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", namespace, *EVALUATION, *sets)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str = ETCD) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def secrets_named(objects: list[dict[str, Any]], name: str) -> dict[str, dict[str, bytes]]:
    """The Secrets of that name, by namespace: their files."""
    return {
        o["metadata"]["namespace"]: {k: base64.b64decode(v) for k, v in o["data"].items()}
        for o in objects
        if o["kind"] == "Secret" and o["metadata"]["name"] == name
    }


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def signed_by(cert: bytes, ca: bytes) -> bool:
    try:
        certificate(cert).verify_directly_issued_by(certificate(ca))
    except (InvalidSignature, ValueError):
        return False
    return True


def test_three_members_serve_peers_and_clients_over_tls_only(helm_bin: Path) -> None:
    objects = render(helm_bin)
    members = one(objects, "StatefulSet")
    service = one(objects, "Service")
    assert members["spec"]["replicas"] == 3
    assert members["spec"]["podManagementPolicy"] == "Parallel"  # a member is ready with a quorum
    assert members["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == members["spec"]["selector"]["matchLabels"]
    [container] = members["spec"]["template"]["spec"]["containers"]
    flags = dict(arg.removeprefix("--").partition("=")[::2] for arg in container["args"])
    assert container["image"] == "quay.io/coreos/etcd:v3.6.16"  # pinned
    assert flags["listen-client-urls"].startswith("https://")
    assert flags["listen-peer-urls"].startswith("https://")
    assert all(url.split("=", 1)[1].startswith("https://") for url in flags["initial-cluster"].split(","))
    assert "client-cert-auth" in flags and "peer-client-cert-auth" in flags
    # Only health and metrics in plain HTTP, on a port of their own.
    assert flags["listen-metrics-urls"] == "http://0.0.0.0:2381"
    assert {p["containerPort"] for p in container["ports"]} == {2379, 2380, 2381}

    # The clients' CA signs the members' serving certificate and the client's; the peers' CA only
    # the peers' certificate, so a client certificate is no peer's.
    server, peer = secrets_named(objects, f"{ETCD}-server")[NAMESPACE], secrets_named(objects, f"{ETCD}-peer")
    client = secrets_named(objects, f"{ETCD}-client")[NAMESPACE]
    peer = peer[NAMESPACE]
    assert server["ca.crt"] == client["ca.crt"] != peer["ca.crt"]
    assert signed_by(server["tls.crt"], client["ca.crt"]) and signed_by(client["tls.crt"], client["ca.crt"])
    assert signed_by(peer["tls.crt"], peer["ca.crt"])
    assert not signed_by(client["tls.crt"], peer["ca.crt"])
    names = certificate(server["tls.crt"]).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    dns = names.value.get_values_for_type(x509.DNSName)
    assert f"{ETCD}.{NAMESPACE}" in dns  # the name the events URL gives
    assert f"*.{ETCD}.{NAMESPACE}.svc" in dns  # each member's, as the peers call it
    mounted = {v["name"]: v["secret"]["secretName"] for v in members["spec"]["template"]["spec"]["volumes"]}
    assert mounted == {"peer": f"{ETCD}-peer", "server": f"{ETCD}-server"}  # never the client's

    # A drain takes one member at a time; the operator's own objects do not select the members.
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == members["spec"]["selector"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    operator_labels = deployment["spec"]["selector"]["matchLabels"].items()
    assert not operator_labels <= members["spec"]["template"]["metadata"]["labels"].items()
    # Data on a claim per member, or an emptyDir when persistence is off.
    [claim] = members["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    ephemeral = one(render(helm_bin, "--set", "etcd.persistence.enabled=false"), "StatefulSet")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    assert {"name": "data", "emptyDir": {}} in ephemeral["spec"]["template"]["spec"]["volumes"]


def test_the_operator_and_the_harness_are_pointed_at_it(helm_bin: Path) -> None:
    objects = render(helm_bin, "--set-json", 'watchNamespaces=["team-a", "team-b"]')
    container = operator_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    settings = OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])
    assert settings.event_store == f"etcd://{ETCD}.{NAMESPACE}:2379/belay"
    assert settings.etcd_credentials_secret == f"{ETCD}-client"
    assert settings.fleet_event_store().endswith("?credentials=/etc/belay/etcd")
    assert {"name": "etcd-credentials", "mountPath": "/etc/belay/etcd", "readOnly": True} in container[
        "volumeMounts"
    ]
    # The client's Secret, the same in the operator's namespace and each watched one.
    clients = secrets_named(objects, f"{ETCD}-client")
    assert set(clients) == {NAMESPACE, "team-a", "team-b"}
    assert (
        len({json.dumps({k: v.decode() for k, v in c.items()}, sort_keys=True) for c in clients.values()})
        == 1
    )
    # The harness reaches the members (their namespace, the client port).
    policy = desired.harness_policy(desired.SessionRef(name="s", namespace="team-a", uid="u-1"), settings)
    rules = [(rule["to"], rule.get("ports")) for rule in policy["spec"]["egress"]]
    members = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}]
    assert (members, [{"protocol": "TCP", "port": 2379}]) in rules, rules
    # Off (the default): none of it.
    plain = helm(helm_bin, "template", RELEASE, str(CHART), "--set", "stores.events=etcd://e.ns:2379",
                 "--set", "stores.artifacts=s3://b")  # fmt: skip
    assert (
        plain.returncode == 0 and "StatefulSet" not in plain.stdout and f"{ETCD}-client" not in plain.stdout
    )


@pytest.mark.parametrize(
    "own", ["stores.events=etcd://etcd.data:2379", "stores.etcdCredentialsSecret=platform-etcd-client"]
)
def test_an_etcd_of_ones_own_named_with_it_is_refused_saying_why(helm_bin: Path, own: str) -> None:
    result = helm(helm_bin, "template", RELEASE, str(CHART), *EVALUATION, "--set", own)
    assert result.returncode != 0
    assert "etcd.deploy and stores.events (or stores.etcdCredentialsSecret) are both set" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("Error:")]) == 1


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("etcd.deploy=yes", "/etcd/deploy"),
        ("etcd.image.tag=", "/etcd/image/tag"),
        ("etcd.persistence.size=lots", "/etcd/persistence/size"),
        ("etcd.members=5", "members"),
    ],
)
def test_the_schema_refuses_bad_etcd_values(helm_bin: Path, setting: str, complaint: str) -> None:
    result = helm(helm_bin, "template", RELEASE, str(CHART), *EVALUATION, "--set", setting)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr


@pytest.mark.testenv
def test_pod_security_restricted_admits_the_members(helm_bin: Path, kube: ControlPlane) -> None:
    """The apiserver's own Pod Security admission judges a member's pod (a server-side dry run)."""
    namespace = "belay-etcd-restricted"
    kube.kubectl("create", "namespace", namespace, check=False)
    kube.kubectl(
        "label", "--overwrite", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    template = one(render(helm_bin, namespace=namespace), "StatefulSet")["spec"]["template"]
    spec = {**template["spec"], "volumes": [*template["spec"]["volumes"], {"name": "data", "emptyDir": {}}]}
    metadata = {**template["metadata"], "name": "member", "namespace": namespace}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    judged = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert judged.returncode == 0, judged.stderr


@pytest.mark.testenv
def test_an_upgrade_keeps_the_certificates(helm_bin: Path, kube: ControlPlane) -> None:
    namespace = "belay-etcd-upgrade"
    install = ("--namespace", namespace, *EVALUATION)
    installed = helm(helm_bin, "install", RELEASE, str(CHART), "--create-namespace", *install, kube=kube)
    try:
        assert installed.returncode == 0, installed.stderr
        assert "chart's evaluation etcd" in installed.stdout  # NOTES

        def certificates() -> dict[str, Any]:
            return {
                part: kube.kubectl(
                    "get", "secret", f"{ETCD}-{part}", "-n", namespace, "-o", "jsonpath={.data}"
                ).stdout
                for part in ("peer", "server", "client")
            }

        before = certificates()
        upgraded = helm(helm_bin, "upgrade", RELEASE, str(CHART), *install, kube=kube)
        assert upgraded.returncode == 0, upgraded.stderr
        assert certificates() == before
    finally:
        helm(helm_bin, "uninstall", RELEASE, "--namespace", namespace, kube=kube)
        kube.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
