"""A scripted session written to a directory: its plan and its AgentSession manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_scripted_session(
    directory: Path, name: str, goal: str, subagents: list[dict[str, Any]], steps: dict[str, list[Any]]
) -> Path:
    """`steps` maps each subagent to its plan steps; returns the manifest's path."""
    directory.mkdir(parents=True, exist_ok=True)
    plan = {"subagents": {sub: {"steps": sub_steps} for sub, sub_steps in steps.items()}}
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": {
            "request": {"goal": goal},
            "executor": {"type": "scripted", "plan": str(directory / "plan.yaml")},
            "subagents": subagents,
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path
