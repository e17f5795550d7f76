"""AgentSession specs and refs shared by the controller tests."""

from __future__ import annotations

from typing import Any

import yaml

from belay.api.agentsession import AgentSessionSpec
from belay.controller.desired import SessionRef
from tests.api.kubehelpers import REPO_ROOT

EXAMPLE_MANIFEST: dict[str, Any] = yaml.safe_load(
    (REPO_ROOT / "examples/parser-fix/session.yaml").read_text()
)
REF = SessionRef(
    name="parser-fix", namespace="team-a", uid="0b7c6a52-0000-4000-8000-000000000001", generation=3
)


def spec_with(**changes: Any) -> AgentSessionSpec:
    raw = dict(EXAMPLE_MANIFEST["spec"])
    if "subagents" in changes:
        # The example's approval rule names one of its own subagents; other subagents drop it.
        raw["approvalRequired"] = []
    raw.update(changes)
    return AgentSessionSpec.model_validate(raw)


def subagent(name: str, profile: str = "none", allowlist: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "networkProfile": profile, "allowlist": allowlist or []}


def pending_session(name: str, namespace: str, goal: str) -> dict[str, Any]:
    """A session with one subagent whose plan no harness ever reads: where no node runs its pods,
    it stays Pending, with its seven children and its request in the record."""
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "request": {"goal": goal},
            "executor": {"type": "scripted", "plan": "/nonexistent/plan.yaml"},
            "subagents": [{"name": "worker"}],
        },
    }
