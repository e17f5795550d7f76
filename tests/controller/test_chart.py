"""The Helm chart: its settings parse as the operator's settings, its schema refuses bad values,
and `helm install` into the test cluster gives the operator exactly the rights it needs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.controller.handlers import FOLLOW_INTERVAL_S, RESYNC_INTERVAL_S
from belay.controller.kube import KUBE_CALL_THREADS
from belay.controller.settings import OperatorSettings
from tests.api.kubehelpers import REPO_ROOT
from tests.testenv.kube import ControlPlane

CHART = REPO_ROOT / "charts/belay"
RELEASE, NAMESPACE = "belay", "belay-system"
PACE_ENVIRONMENT = ("BELAY_RESYNC_INTERVAL_S", "BELAY_FOLLOW_INTERVAL_S", "BELAY_KUBE_CALL_THREADS")
# The values the chart requires (it refuses to render without them).
REQUIRED = (
    "--set",
    "stores.events=etcd://belay-etcd.belay-system:2379",
    "--set",
    "stores.artifacts=s3://belay-artifacts",
)


def helm(helm_bin: Path, *args: str, kube: ControlPlane | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(helm_bin), *args]
    if kube is not None:
        argv.append(f"--kubeconfig={kube.kubeconfig}")
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def render(helm_bin: Path, *sets: str) -> list[dict[str, Any]]:
    result = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *REQUIRED, *sets)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_chart_settings_are_the_operators_settings(helm_bin: Path) -> None:
    objects = render(
        helm_bin,
        "--set",
        "stores.existingSecret=belay-stores",
        "--set-json",
        'sessions.modelEgress=[{"cidr": "203.0.113.10/32", "ports": [443]}]',
        "--set-json",
        'sessions.storeEgress=[{"podLabels": {"app": "etcd"}, "ports": [2379]}]',
        "--set-json",
        'sessions.gitEgress=[{"cidr": "198.51.100.7/32", "ports": [443]}]',
    )
    container = operator_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    settings = OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])
    assert settings.store_secret == "belay-stores"
    assert settings.model_egress[0].cidr == "203.0.113.10/32"
    assert settings.store_egress[-1].pod_labels == {"app": "etcd"}  # after the events host's own
    assert settings.git_egress[0].cidr == "198.51.100.7/32"
    assert container["envFrom"] == [{"secretRef": {"name": "belay-stores"}}]
    assert "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert not any(o["kind"] == "ServiceMonitor" for o in objects)
    monitored = render(helm_bin, "--set", "metrics.serviceMonitor.enabled=true")
    assert any(o["kind"] == "ServiceMonitor" for o in monitored)
    assert settings.stop_drain_s == 20
    drained = operator_container(render(helm_bin, "--set", "sessions.stopDrainSeconds=45"))
    env = {e["name"]: e.get("value") for e in drained["env"]}
    assert OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"]).stop_drain_s == 45


def test_the_fleet_etcds_client_certificate_is_mounted_and_named_on_the_events_url(helm_bin: Path) -> None:
    plain = operator_container(render(helm_bin))
    assert not any(m["name"] == "etcd-credentials" for m in plain["volumeMounts"])
    objects = render(helm_bin, "--set", "stores.etcdCredentialsSecret=belay-etcd-client")
    container = operator_container(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    settings = OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])
    assert settings.etcd_credentials_secret == "belay-etcd-client"
    assert settings.fleet_event_store() == "etcd://belay-etcd.belay-system:2379?credentials=/etc/belay/etcd"
    assert {"name": "etcd-credentials", "mountPath": "/etc/belay/etcd", "readOnly": True} in container[
        "volumeMounts"
    ]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "etcd-credentials", "secret": {"secretName": "belay-etcd-client"}} in volumes


def test_the_sandbox_pool_is_sized_in_the_chart(helm_bin: Path) -> None:
    def pool_size(*sets: str) -> int:
        env = {e["name"]: e.get("value") for e in operator_container(render(helm_bin, *sets))["env"]}
        return OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"]).sandbox_pool_size

    assert pool_size() == 2
    assert pool_size("--set", "sandboxPool.size=5") == 5
    assert pool_size("--set", "sandboxPool.size=0") == 0  # no pool


def test_the_operators_pace_comes_from_the_chart(helm_bin: Path) -> None:
    def pace(*sets: str) -> dict[str, str]:
        env = {e["name"]: e.get("value") for e in operator_container(render(helm_bin, *sets))["env"]}
        return {name: env[name] for name in PACE_ENVIRONMENT}

    # The chart's defaults are the operator's own (handlers.py, kube.py).
    assert pace() == {
        "BELAY_RESYNC_INTERVAL_S": str(int(RESYNC_INTERVAL_S)),
        "BELAY_FOLLOW_INTERVAL_S": str(int(FOLLOW_INTERVAL_S)),
        "BELAY_KUBE_CALL_THREADS": str(KUBE_CALL_THREADS),
    }
    assert pace("--set", "operator.resyncIntervalSeconds=600", "--set", "operator.kubeCallThreads=64") == {
        "BELAY_RESYNC_INTERVAL_S": "600",
        "BELAY_FOLLOW_INTERVAL_S": "300",
        "BELAY_KUBE_CALL_THREADS": "64",
    }


def test_namespaced_install_binds_roles_in_the_watched_namespaces_only(helm_bin: Path) -> None:
    objects = render(helm_bin, "--set-json", 'watchNamespaces=["team-a","team-b"]')
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "Role"}
    assert {("team-a", "belay"), ("team-b", "belay")} <= roles
    cluster_role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert {g for rule in cluster_role["rules"] for g in rule["resources"]} == {
        "customresourcedefinitions",
        "namespaces",
    }
    assert "--namespace=team-a" in operator_container(objects)["args"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("stores.events=http://etcd:2379", "/stores/events"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("unknownKey=1", "unknownKey"),
        ("operator.kubeCallThreads=0", "/operator/kubeCallThreads"),
        ("operator.followIntervalSeconds=0", "/operator/followIntervalSeconds"),
        ("sandboxPool.size=-1", "/sandboxPool/size"),
        ("sandboxPool.size=65", "/sandboxPool/size"),
        ("sandboxPool.warm=1", "warm"),
    ],
)
def test_values_schema_refuses_bad_values(helm_bin: Path, setting: str, complaint: str) -> None:
    result = helm(helm_bin, "template", RELEASE, str(CHART), "--set", setting)
    assert result.returncode != 0 and complaint in result.stderr


def can_i(kube: ControlPlane, *args: str) -> bool:
    result = kube.kubectl(
        "auth", "can-i", *args, f"--as=system:serviceaccount:{NAMESPACE}:{RELEASE}", check=False
    )
    return result.stdout.strip() == "yes"


@pytest.mark.testenv
def test_helm_install_gives_the_operator_least_privilege(helm_bin: Path, kube: ControlPlane) -> None:
    # The API server's address as the `kubernetes` Service's EndpointSlice gives it (this control
    # plane, on loopback, keeps none of its own).
    kube.kubectl("apply", "-f", "-", input=json.dumps(API_SERVER_SLICE))
    installed = helm(
        helm_bin,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        *REQUIRED,
        kube=kube,
    )
    assert installed.returncode == 0, installed.stderr
    try:
        crds = json.loads(kube.kubectl("get", "crd", "-o", "json").stdout)["items"]
        assert {"agentsessions.belay.dev", "checkpoints.belay.dev"} <= {c["metadata"]["name"] for c in crds}
        deployment = json.loads(
            kube.kubectl("get", "deployment", RELEASE, "-n", NAMESPACE, "-o", "json").stdout
        )
        assert deployment["spec"]["replicas"] == 2

        allowed = [
            ("create", "pods", "-n", "team-a"),
            ("delete", "pods", "-n", "team-a"),
            ("patch", "agentsessions.belay.dev", "--subresource=status", "-n", "team-a"),
            ("create", "agentsessions.belay.dev", "-n", "team-a"),  # a coordinator's child sessions
            ("create", "checkpoints.belay.dev", "-n", "team-a"),
            ("create", "networkpolicies.networking.k8s.io", "-n", "team-a"),
            ("create", "secrets", "-n", "team-a"),
            ("get", "secrets", "-n", "team-a"),  # the one a session names for its own stores
            ("get", "serviceaccounts", "-n", "team-a"),  # what a session's pods load, looked for
            ("update", "leases.coordination.k8s.io/belay-operator", "-n", NAMESPACE),
        ]
        refused = [
            ("list", "secrets", "-n", "team-a"),
            ("watch", "secrets", "-n", "team-a"),
            ("create", "serviceaccounts", "-n", "team-a"),
            ("delete", "services", "-n", "team-a"),
            ("delete", "agentsessions.belay.dev", "-n", "team-a"),
            ("create", "deployments.apps", "-n", "team-a"),
            ("get", "nodes"),
            ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", NAMESPACE),
            ("create", "pods", "--subresource=exec", "-n", "team-a"),
        ]
        assert [a for a in allowed if not can_i(kube, *a)] == []
        assert [r for r in refused if can_i(kube, *r)] == []

        # The operator's NetworkPolicy lets it reach the API server where the cluster says it is
        # (the `kubernetes` Service's endpoints, read at install), not any address.
        policy = json.loads(
            kube.kubectl("get", "networkpolicy", RELEASE, "-n", NAMESPACE, "-o", "json").stdout
        )
        assert api_server_peers(policy) == {("203.0.113.7/32", 16443)}, policy
    finally:
        helm(helm_bin, "uninstall", RELEASE, "--namespace", NAMESPACE, kube=kube)
        kube.kubectl("delete", "endpointslice", "kubernetes-test", "-n", "default", check=False)


API_SERVER_SLICE = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {
        "name": "kubernetes-test",
        "namespace": "default",
        "labels": {"kubernetes.io/service-name": "kubernetes"},
    },
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["203.0.113.7"]}],
    "ports": [{"name": "https", "port": 16443, "protocol": "TCP"}],
}


def api_server_peers(policy: dict[str, Any]) -> set[tuple[str, int]]:
    """The address blocks the policy lets out to, with their ports."""
    return {
        (peer["ipBlock"]["cidr"], port["port"])
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
        for port in rule["ports"]
    }


def test_the_chart_names_the_images_sessions_may_pick_and_where_sandboxes_run(helm_bin: Path) -> None:
    sandbox = {
        "runtimeClassName": "gvisor",
        "runtimeClassNames": {"internet": "kata"},
        "allowedRuntimeClassNames": ["runc-tight"],
        "nodeSelector": {"belay.dev/sandboxes": "true"},
        "tolerations": [{"key": "sandboxes", "operator": "Exists", "effect": "NoSchedule"}],
        "hostUsers": False,
    }
    objects = render(
        helm_bin,
        "--set-json",
        'sessions.harnessImages={"gpu": "registry.example/harness-gpu:1"}',
        "--set-json",
        'sessions.sandboxImages={"python-3-12": "registry.example/python:3.12"}',
        "--set-json",
        f"sessions.sandbox={json.dumps(sandbox)}",
    )
    env = {e["name"]: e.get("value") for e in operator_container(objects)["env"]}
    settings = OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])
    assert settings.harness_images == {"gpu": "registry.example/harness-gpu:1"}
    assert settings.sandbox_images == {"python-3-12": "registry.example/python:3.12"}
    assert (settings.sandbox_runtime_class, settings.sandbox_runtime_classes) == (
        "gvisor",
        {"internet": "kata"},
    )
    assert settings.runtime_classes() == {"gvisor", "kata", "runc-tight"}
    assert settings.sandbox_node_selector == {"belay.dev/sandboxes": "true"}
    assert settings.sandbox_tolerations == sandbox["tolerations"]
    assert settings.sandbox_user_namespace is True
    # By default: no image but the chart's own, the node's runtime, the host's users.
    env = {e["name"]: e.get("value") for e in operator_container(render(helm_bin))["env"]}
    default = OperatorSettings.model_validate_json(env["BELAY_OPERATOR_SETTINGS"])
    assert (default.harness_images, default.sandbox_images, default.runtime_classes()) == ({}, {}, set())
    assert default.sandbox_user_namespace is False
    # An image's name is what a session writes in its spec: the schema refuses one it could not.
    wrong = helm(
        helm_bin,
        "template",
        RELEASE,
        str(CHART),
        *REQUIRED,
        "--set-json",
        'sessions.harnessImages={"Not A Name": "registry.example/x:1"}',
    )
    assert wrong.returncode != 0 and "invalid propertyName 'Not A Name'" in wrong.stderr


def documented_rbac() -> set[tuple[str, str, str, str]]:
    """docs/operator.md's RBAC table: (where, API group, resource, verbs) rows; a resource
    "named X" is a rule with resourceNames."""
    text = (REPO_ROOT / "docs/operator.md").read_text()
    section = text.split("### RBAC\n", 1)[1].split("\n#", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("Where", "---"):
            continue
        where, groups, resource, verbs = cells
        for group in groups.split(", "):
            group = "" if group == "core" else group.strip("`")
            rows.add((where, group, resource.replace("` named `", " named "), verbs))
    return rows


def rendered_rbac(objects: list[dict[str, Any]], lease: str) -> set[tuple[str, str, str, str]]:
    rows = set()
    for role in (o for o in objects if o["kind"] in ("Role", "ClusterRole")):
        if role["kind"] == "ClusterRole":
            where = "cluster"
        elif role["metadata"]["namespace"] == NAMESPACE and role["metadata"]["name"].endswith("-leader"):
            where = "operator's namespace"
        else:
            where = "sessions"
        for rule in role["rules"]:
            session_rule = rule["resources"][0] not in ("customresourcedefinitions", "namespaces")
            scope = "sessions" if where == "cluster" and session_rule else where
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    named = rule.get("resourceNames")
                    if named:
                        assert named == [lease]
                        resource = f"{resource} named leaderElection.leaseName"
                    rows.add((scope, group, resource, ", ".join(rule["verbs"])))
    return rows


@pytest.mark.parametrize("watch", ["", '["team-a","team-b"]'])
def test_the_documented_rbac_is_the_rendered_chart(helm_bin: Path, watch: str) -> None:
    objects = render(helm_bin, *(("--set-json", f"watchNamespaces={watch}") if watch else ()))
    assert rendered_rbac(objects, "belay-operator") == documented_rbac()
    # Namespaced: the session rules in a Role of each watched namespace and nowhere else.
    roles = [o for o in objects if o["kind"] == "Role" and not o["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == (["team-a", "team-b"] if watch else [])
