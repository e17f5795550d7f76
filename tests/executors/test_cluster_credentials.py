"""In a cluster a managed executor's credentials come from the Secret named in
`executor.credentialsSecret`: only the provider SDK's standard variables, only into the harness
pod's environment, never into a sandbox pod, the spec the harness reads, or anything else."""

from __future__ import annotations

import json
from typing import Any

from belay.controller.desired import ENV_SESSION_SPEC, desired_children
from belay.controller.settings import OperatorSettings
from tests.controller.sessions import REF, spec_with

SETTINGS = OperatorSettings(store_secret="belay-stores")


def pods(executor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    objects = desired_children(REF, spec_with(executor=executor), SETTINGS, attempt_index=1)
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}


def from_secrets(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [container] = pod["spec"]["containers"]
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e}


def test_the_provider_variables_reach_the_harness_pod_only() -> None:
    for executor_type, prefix in (("openai-agents", "OPENAI"), ("anthropic-managed", "ANTHROPIC")):
        found = pods({"type": executor_type, "model": "m", "credentialsSecret": "provider-keys"})
        harness = found.pop("parser-fix-harness-1")
        assert from_secrets(harness) == {
            f"{prefix}_API_KEY": {"name": "provider-keys", "key": f"{prefix}_API_KEY", "optional": True},
            f"{prefix}_BASE_URL": {"name": "provider-keys", "key": f"{prefix}_BASE_URL", "optional": True},
        }
        [container] = harness["spec"]["containers"]
        assert {"secretRef": {"name": "provider-keys"}} not in container.get("envFrom", [])
        spec = json.loads(next(e["value"] for e in container["env"] if e["name"] == ENV_SESSION_SPEC))
        assert spec["executor"]["credentialsSecret"] == "provider-keys"  # its name, nothing of it
        assert found and all("provider-keys" not in json.dumps(pod) for pod in found.values())


def test_without_a_credentials_secret_no_provider_variable_is_set() -> None:
    found = pods({"type": "openai-agents", "model": "m"})
    assert all(from_secrets(pod) == {} for pod in found.values())
