"""The parser-review example (a managed executor reviews the parser change), shared by the tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import AgentSession, parse_manifest
from belay.executors.standins import anthropic_managed, openai_agents
from belay.harness.models.scripted import ScriptedPlan, load_plan
from tests.belay_cli import manifest_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "parser-review"
MANIFEST = EXAMPLE / "session.yaml"
PLAN = EXAMPLE / "plan.yaml"
SESSION = "parser-review"
SUBAGENT = "repository-reviewer"
ENVIRONMENT = {
    "openai-agents": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "anthropic-managed": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
}
STANDINS = {"openai-agents": openai_agents, "anthropic-managed": anthropic_managed}


@contextlib.asynccontextmanager
async def standin_for(
    executor: str, plan: ScriptedPlan, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[Any]:
    """The executor's stand-in running `plan`, with the SDK's variables pointing at it."""
    async with STANDINS[executor].running(plan, **options) as standin:
        base_url_variable, key_variable = ENVIRONMENT[executor]
        monkeypatch.setenv(base_url_variable, standin.base_url)
        monkeypatch.setenv(key_variable, "sk-test")
        yield standin


def example_manifest(directory: Path, executor: str = "openai-agents", **spec_changes: Any) -> Path:
    """The example on `executor`, paths absolute, some spec fields replaced."""
    data = manifest_for(yaml.safe_load(MANIFEST.read_text()), MANIFEST, executor)
    data["spec"].update(spec_changes)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def example_plan() -> ScriptedPlan:
    return load_plan(PLAN)


def review_sha256() -> str:
    """The review the plan writes and publishes, as bytes: every executor must deliver exactly it."""
    import hashlib

    for step in example_plan().subagents[SUBAGENT].steps:
        for action in step.actions:
            if action.tool == "write_file" and action.arguments["path"] == "out/review.md":
                return hashlib.sha256(action.arguments["content"].encode()).hexdigest()
    raise AssertionError("the plan writes no review")


def one_subagent_session(
    name: str, executor: str, goal: str, deliverable: str | None = None, isolation: str = "required"
) -> AgentSession:
    """A session of one subagent, `worker`, with no inputs, on a managed executor."""
    worker: dict[str, Any] = {"name": "worker", "networkProfile": "none", "isolation": isolation}
    if deliverable is not None:
        worker["deliverable"] = deliverable
    return parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": name},
            "spec": {
                "request": {"goal": goal},
                "executor": {"type": executor, "model": "any"},
                "subagents": [worker],
            },
        }
    )
