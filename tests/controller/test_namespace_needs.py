"""What the operator looks for in a session's namespace before it makes a pod is what the pods it
makes load from there: every ServiceAccount and Secret the desired pods name, except what the
operator makes itself (the sandbox tokens), what the session names itself (its provider credentials,
its own stores) and Kubernetes' own `default` ServiceAccount."""

from __future__ import annotations

from typing import Any

from belay.controller import names
from belay.controller.desired import desired_children
from belay.controller.namespace_needs import missing_problem, pod_needs
from belay.controller.settings import OperatorSettings
from tests.controller.sessions import REF, spec_with

SETTINGS = OperatorSettings(
    harness_service_account="belay-harness",
    store_secret="belay-stores",
    etcd_credentials_secret="belay-etcd-client",
    record_key_secret="belay-record-key",
    image_pull_secrets=["registry-login"],
)


def loaded(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (kind, name) of the session's namespace a pod loads."""
    spec = pod["spec"]
    found = {("ServiceAccount", spec.get("serviceAccountName", "default"))}
    found |= {("Secret", s["name"]) for s in spec.get("imagePullSecrets", [])}
    found |= {("Secret", v["secret"]["secretName"]) for v in spec.get("volumes", []) if "secret" in v}
    for container in spec["containers"]:
        found |= {
            ("Secret", e["secretRef"]["name"]) for e in container.get("envFrom", []) if "secretRef" in e
        }
        found |= {
            ("Secret", e["valueFrom"]["secretKeyRef"]["name"])
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }
    return found


def test_the_needs_are_what_the_pods_load_that_nobody_else_makes() -> None:
    spec = spec_with(executor={"type": "openai-agents", "model": "m", "credentialsSecret": "provider-keys"})
    pods = [o for o in desired_children(REF, spec, SETTINGS, attempt_index=1) if o["kind"] == "Pod"]
    everything = set().union(*(loaded(pod) for pod in pods))
    operators_own = {
        ("Secret", names.sandbox_token_secret_name(REF.name, sub.name, REF.uid)) for sub in spec.subagents
    }
    sessions_own = {("Secret", "provider-keys")}
    kubernetes_own = {("ServiceAccount", "default")}
    needs = {(need.kind, need.name) for need in pod_needs(spec, SETTINGS)}
    assert needs == everything - operators_own - sessions_own - kubernetes_own
    assert ("ServiceAccount", "belay-harness") in needs and ("Secret", "belay-record-key") in needs


def test_a_session_on_its_own_stores_needs_none_of_the_fleets_secrets() -> None:
    spec = spec_with(
        stores={"events": "etcd://etcd.team-a:2379", "artifacts": "s3://team-a", "secretRef": "mine"}
    )
    needs = {(need.kind, need.name) for need in pod_needs(spec, SETTINGS)}
    assert needs == {("ServiceAccount", "belay-harness"), ("Secret", "registry-login")}


def test_the_message_is_one_line_with_the_command_for_each() -> None:
    missing = pod_needs(spec_with(), SETTINGS)
    reason, message = missing_problem(missing, "team-a", "belay-system")
    assert reason == "MissingInNamespace" and "\n" not in message
    assert "kubectl create serviceaccount belay-harness -n team-a" in message
    for secret in ("belay-stores", "belay-etcd-client", "belay-record-key", "registry-login"):
        assert f"kubectl get secret {secret} -n belay-system -o json" in message
