"""The chart's ordinary knobs, rendered: it refuses to install without the settings no session can
run without (saying what to write), prints the next commands, and carries each knob to the object it
is for: the operator's pods (pull secrets, ServiceAccount annotations, pod annotations and labels,
priority class, topology spread), a PodDisruptionBudget, a NetworkPolicy, and the harness pods the
operator makes from its settings (requests and limits, their own ServiceAccount, pull secrets, the
record key, the way to the stores)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from belay.api.agentsession import AgentSession
from belay.controller import desired
from belay.controller.settings import HarnessResources, OperatorSettings
from belay.stores.integrity import MIN_KEY_BYTES, RECORD_KEY_ENV
from tests.api.kubehelpers import REPO_ROOT
from tests.controller.test_chart import CHART, NAMESPACE, RELEASE, helm, operator_container, render
from tests.testenv.kube import ControlPlane

EXAMPLE = REPO_ROOT / "examples/parser-fix/session.yaml"
EVERY_KNOB = CHART / "ci/every-knob-values.yaml"


def settings_of(objects: list[dict[str, Any]]) -> OperatorSettings:
    env = {e["name"]: e.get("value") for e in operator_container(objects)["env"]}
    return OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return dict(deployment["spec"]["template"]["spec"])


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def example_pods(settings: OperatorSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The harness pod and a sandbox pod the operator makes for the example session."""
    session = AgentSession.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    ref = desired.SessionRef(namespace="team-a", name=session.metadata.name, uid="u-1")
    children = desired.desired_children(ref, session.spec, settings, attempt_index=0)
    pods = [o for o in children if o["kind"] == "Pod"]
    harness = next(p for p in pods if p["metadata"]["name"].endswith("-harness-0"))
    sandbox = next(p for p in pods if p is not harness)
    return harness, sandbox


def template(helm_bin: Path, *args: str) -> tuple[int, str]:
    result = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    return result.returncode, result.stderr


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ((), "stores.events is required: the session record's etcd, e.g. --set stores.events="),
        (("--set", "stores.events=etcd://belay-etcd.belay-system:2379"), "stores.artifacts is required"),
        (
            ("--set", "stores.events=etcd://belay-etcd:2379/belay", "--set", "stores.artifacts=s3://b"),
            'stores.events names the etcd host "belay-etcd" without its namespace',
        ),
    ],
)
def test_the_chart_refuses_to_install_without_its_stores_and_says_what_to_write(
    helm_bin: Path, values: tuple[str, ...], complaint: str
) -> None:
    code, stderr = template(helm_bin, *values)
    assert code != 0 and complaint in stderr, stderr
    assert len([line for line in stderr.splitlines() if line.startswith("Error:")]) == 1


@pytest.mark.parametrize(
    "events",
    [
        "etcd://belay-etcd.belay-system:2379",
        "etcd://belay-etcd.belay-system.svc.cluster.local:2379/belay",
        "etcd://10.0.0.5:2379",
        "etcd://[fd00::5]:2379",
        "etcd://etcd.example.com:2379",
    ],
)
def test_an_etcd_named_so_every_namespace_finds_it_is_accepted(helm_bin: Path, events: str) -> None:
    code, stderr = template(helm_bin, "--set", f"stores.events={events}", "--set", "stores.artifacts=s3://b")
    assert code == 0, stderr


def test_the_harness_reaches_the_etcd_stores_events_names_without_more_values(helm_bin: Path) -> None:
    def egress(events: str) -> list[dict[str, Any]]:
        settings = settings_of(render(helm_bin, "--set", f"stores.events={events}"))
        return [t.model_dump(exclude_defaults=True) for t in settings.store_egress]

    in_cluster = {"namespace_labels": {"kubernetes.io/metadata.name": "belay-system"}, "ports": [2379]}
    assert egress("etcd://belay-etcd.belay-system:2379/belay") == [in_cluster]
    assert egress("etcd://etcd-0.etcd.data.svc.cluster.local:2380") == []  # no Service name.ns
    assert egress(r"etcd://10.0.0.5:32379\,10.0.0.6/belay") == [
        {"cidr": "10.0.0.5/32", "ports": [32379]},
        {"cidr": "10.0.0.6/32", "ports": [2379]},
    ]
    assert egress("etcd://[fd00::5]:2379") == [{"cidr": "fd00::5/128", "ports": [2379]}]
    assert egress("etcd://etcd.example.com:2379") == []  # outside: sessions.storeEgress names it
    # What sessions.storeEgress adds comes with it, and the harness's NetworkPolicy allows both.
    objects = render(
        helm_bin, "--set-json", 'sessions.storeEgress=[{"cidr": "203.0.113.20/32", "ports": [443]}]'
    )
    settings = settings_of(objects)
    assert [t.cidr for t in settings.store_egress] == [None, "203.0.113.20/32"]
    policy = desired.harness_policy(desired.SessionRef(name="s", namespace="team-a", uid="u-1"), settings)
    peers = [peer for rule in policy["spec"]["egress"] for peer in rule["to"]]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "belay-system"}}} in peers
    assert {"ipBlock": {"cidr": "203.0.113.20/32"}} in peers


@pytest.mark.testenv
def test_notes_print_the_next_commands(helm_bin: Path, kube: ControlPlane) -> None:
    def notes(*values: str) -> str:
        # helm asks the cluster its version even for a dry run; nothing is installed.
        result = helm(
            helm_bin, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
            "--set", "stores.events=etcd://belay-etcd.belay-system:2379", "--set", "stores.artifacts=s3://b",
            *values, kube=kube,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    watched = notes(
        "--set-json", 'watchNamespaces=["team-a"]', "--set", "stores.existingSecret=belay-stores",
        "--set-json", 'sessions.modelEgress=[{"cidr": "203.0.113.10/32", "ports": [443]}]',
    )  # fmt: skip
    assert "kubectl -n belay-system rollout status deployment/belay" in watched
    assert "for sessions in team-a" in watched
    assert "the Secret belay-stores (store credentials)" in watched
    assert "the Secret belay-record-key (record key)" in watched
    assert "the ServiceAccount belay-harness" in watched
    assert "kubectl belay brief parser-fix -n SESSION_NAMESPACE" in watched
    assert "reaches no store and no model" not in watched
    everywhere = notes()
    assert "for sessions in every namespace" in everywhere
    assert "Copy them into each session namespace" in everywhere
    assert "reaches no store and no model" in everywhere


def test_the_operators_pods_take_the_ordinary_knobs(helm_bin: Path) -> None:
    objects = render(helm_bin, "-f", str(EVERY_KNOB))
    spec = pod_spec(objects)
    deployment = of_kind(objects, "Deployment")[0]
    metadata = deployment["spec"]["template"]["metadata"]
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert metadata["annotations"]["example.com/owner"] == "platform"
    assert metadata["labels"]["example.com/team"] == "platform"
    # The selector's labels stay: the Deployment still owns its pods.
    assert deployment["spec"]["selector"]["matchLabels"].items() <= metadata["labels"].items()
    # A spread constraint without a selector spreads the operator's own pods.
    [spread] = spec["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    # The operator's ServiceAccount carries the workload identity annotation; RBAC binds that one.
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in of_kind(objects, "ServiceAccount")
    }
    operator_account = accounts[(NAMESPACE, spec["serviceAccountName"])]
    assert operator_account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/belay-operator"
    }
    bindings = of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding")
    assert {s["name"] for b in bindings for s in b["subjects"]} == {spec["serviceAccountName"]}
    renamed = pod_spec(render(helm_bin, "--set", "serviceAccount.name=platform-belay"))
    assert renamed["serviceAccountName"] == "platform-belay"
    # None of it is there unless asked for.
    plain = pod_spec(render(helm_bin))
    assert not {"imagePullSecrets", "priorityClassName", "topologySpreadConstraints"} & set(plain)


def test_a_pod_disruption_budget_keeps_a_replica_through_a_drain(helm_bin: Path) -> None:
    objects = render(helm_bin)
    [budget] = of_kind(objects, "PodDisruptionBudget")
    deployment = of_kind(objects, "Deployment")[0]
    assert budget["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    # One replica: a budget would only block the drain.
    assert of_kind(render(helm_bin, "--set", "replicaCount=1"), "PodDisruptionBudget") == []
    assert (
        of_kind(render(helm_bin, "--set", "podDisruptionBudget.enabled=false"), "PodDisruptionBudget") == []
    )


def test_the_operators_network_policy_lets_in_metrics_and_out_dns_the_api_and_the_stores(
    helm_bin: Path,
) -> None:
    objects = render(helm_bin, "-f", str(EVERY_KNOB))
    [policy] = of_kind(objects, "NetworkPolicy")
    deployment = of_kind(objects, "Deployment")[0]
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == {8080, 8081}
    metrics_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8080)
    assert metrics_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    egress = [
        (json.dumps(rule["to"], sort_keys=True), {p["port"] for p in rule["ports"]})
        for rule in policy["spec"]["egress"]
    ]
    assert (json.dumps([{"ipBlock": {"cidr": "0.0.0.0/0"}}]), {443, 6443}) in egress  # the API
    assert any('"k8s-app": "kube-dns"' in to and ports == {53} for to, ports in egress)
    assert (json.dumps([{"ipBlock": {"cidr": "203.0.113.20/32"}}]), {443}) in egress  # storeEgress
    events_namespace = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "belay-system"}}}
    assert (json.dumps([events_namespace], sort_keys=True), {2379}) in egress
    assert len(egress) == 4  # nothing else: not the model, not the sessions' pods
    assert of_kind(render(helm_bin, "--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []


def test_harness_pods_have_resources_their_own_account_pull_secrets_and_the_record_key(
    helm_bin: Path,
) -> None:
    objects = render(helm_bin, "-f", str(EVERY_KNOB))
    settings = settings_of(objects)
    harness, sandbox = example_pods(settings)
    container = harness["spec"]["containers"][0]
    # Requests of CPU and memory: Burstable, never BestEffort.
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    assert harness["spec"]["serviceAccountName"] == "belay-harness"
    assert harness["spec"]["automountServiceAccountToken"] is False
    assert sandbox["spec"]["serviceAccountName"] == "default"  # never the harness's identity
    for pod in (harness, sandbox):
        assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    key_ref = {"secretKeyRef": {"name": "belay-record-key", "key": RECORD_KEY_ENV}}
    assert {"name": RECORD_KEY_ENV, "valueFrom": key_ref} in container["env"]
    assert RECORD_KEY_ENV not in json.dumps(sandbox)
    # The chart makes the harness's ServiceAccount in each watched namespace, with its annotations.
    harness_accounts = [
        o for o in of_kind(objects, "ServiceAccount") if o["metadata"]["name"] == "belay-harness"
    ]
    assert sorted(o["metadata"]["namespace"] for o in harness_accounts) == ["team-a", "team-b"]
    for account in harness_accounts:
        assert account["automountServiceAccountToken"] is False
        assert account["metadata"]["annotations"] == {
            "iam.gke.io/gcp-service-account": "belay-harness@example.iam.gserviceaccount.com"
        }
    # By default too: a harness pod is never BestEffort.
    default_harness, _ = example_pods(settings_of(render(helm_bin)))
    requests = default_harness["spec"]["containers"][0]["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]


def test_a_harness_without_requests_is_refused(helm_bin: Path) -> None:
    code, stderr = template(
        helm_bin, "--set", "stores.events=etcd://e.ns:2379", "--set", "stores.artifacts=s3://b",
        "--set", "sessions.harnessResources.requests.cpu=null",  # null removes the chart's default
    )  # fmt: skip
    assert code != 0 and "/sessions/harnessResources/requests" in stderr and "cpu" in stderr
    with pytest.raises(ValidationError, match="request no cpu or memory: it would be BestEffort"):
        HarnessResources(requests={}, limits={"memory": "1Gi"})


def test_the_record_key_is_on_by_default_the_same_key_in_every_namespace(helm_bin: Path) -> None:
    objects = render(helm_bin, "--set-json", 'watchNamespaces=["team-a", "team-b"]')
    keys = {
        o["metadata"]["namespace"]: base64.b64decode(o["data"][RECORD_KEY_ENV])
        for o in of_kind(objects, "Secret")
        if o["metadata"]["name"] == "belay-record-key"
    }
    assert set(keys) == {NAMESPACE, "team-a", "team-b"}
    assert len(set(keys.values())) == 1 and len(keys[NAMESPACE]) >= MIN_KEY_BYTES
    secret = next(o for o in of_kind(objects, "Secret") if o["metadata"]["name"] == "belay-record-key")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    operator_env = operator_container(objects)["env"]
    key_ref = {"secretKeyRef": {"name": "belay-record-key", "key": RECORD_KEY_ENV}}
    assert {"name": RECORD_KEY_ENV, "valueFrom": key_ref} in operator_env
    assert settings_of(objects).record_key_secret == "belay-record-key"
    # Another render is another key: an install makes its own (an upgrade keeps it, with lookup).
    again = render(helm_bin)
    other = next(o for o in of_kind(again, "Secret") if o["metadata"]["name"] == "belay-record-key")
    assert base64.b64decode(other["data"][RECORD_KEY_ENV]) != keys[NAMESPACE]
    # One's own Secret instead: nothing made, that one named.
    own = render(helm_bin, "--set", "stores.recordKey.existingSecret=platform-record-key")
    assert not [o for o in of_kind(own, "Secret") if o["metadata"]["name"] == "belay-record-key"]
    assert settings_of(own).record_key_secret == "platform-record-key"
    # Off: no key anywhere.
    off = render(helm_bin, "--set", "stores.recordKey.enabled=false")
    assert of_kind(off, "Secret") == [] and settings_of(off).record_key_secret is None
    assert RECORD_KEY_ENV not in json.dumps(operator_container(off))
    harness, _ = example_pods(settings_of(off))
    assert RECORD_KEY_ENV not in json.dumps(harness)


def test_the_harness_start_deadline_comes_from_the_chart(helm_bin: Path) -> None:
    assert settings_of(render(helm_bin)).harness_start_deadline_s == 300
    later = render(helm_bin, "--set", "sessions.harnessStartDeadlineSeconds=900")
    assert settings_of(later).harness_start_deadline_s == 900
    code, stderr = template(
        helm_bin, "--set", "stores.events=etcd://e.ns:2379", "--set", "stores.artifacts=s3://b",
        "--set", "sessions.harnessStartDeadlineSeconds=0",
    )  # fmt: skip
    assert code != 0 and "/sessions/harnessStartDeadlineSeconds" in stderr
