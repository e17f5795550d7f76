"""The session the drill runs: the manifest moved to the executor asked for, its paths made
absolute so it runs from any home."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

from belay.api.agentsession import MANAGED_EXECUTORS, SELF_HOSTED_EXECUTORS, is_workspace_relative
from belay.harness.attempt import HARNESS_VERSION

DEFAULT_MANIFEST = Path(__file__).resolve().parents[4] / "examples" / "parser-fix" / "session.yaml"
EXECUTORS = ("self-hosted", *MANAGED_EXECUTORS)
# The model a managed executor names when the drill moves a manifest to it from another type; the
# stand-in does not read it.
DRILL_MODELS = {"openai-agents": "gpt-5", "anthropic-managed": "claude-sonnet-4-5"}


def drill_executor(executor_type: str) -> str:
    """The drill's name (one of EXECUTORS) for a manifest's `spec.executor.type`."""
    return "self-hosted" if executor_type in SELF_HOSTED_EXECUTORS else executor_type


def executor_kind(manifest: Mapping[str, Any]) -> str:
    return drill_executor(str(manifest["spec"]["executor"]["type"]))


def manifest_for(manifest: Mapping[str, Any], source: Path, executor: str) -> dict[str, Any]:
    """The manifest with paths made absolute and `executor` deciding: `self-hosted` runs the plan
    as a scripted model; a managed executor asks its stand-in, whose remote agent follows it."""
    copy: dict[str, Any] = json.loads(json.dumps(manifest))
    spec = copy["spec"]
    plan = spec["executor"].get("plan")
    if plan:
        plan = str((source.parent / plan).resolve())
    own = executor_kind(manifest)
    if executor != own:
        if not plan:
            raise ValueError(f"the manifest has no executor.plan to run on the {executor} executor")
        if executor == "self-hosted":
            spec["executor"] = {"type": "scripted", "plan": plan}
        else:
            spec["executor"] = {"type": executor, "model": DRILL_MODELS[executor], "plan": plan}
    elif plan:
        spec["executor"]["plan"] = plan
    for sub in spec["subagents"]:
        for item in sub.get("inputs", []):
            if "git" in item:
                continue  # a URL, the same from anywhere
            # Absolute from here on, which the manifest allows only of a host path: a source beside
            # the manifest is one now; one the manifest did not mark and that leaves its directory
            # stays unmarked, and is refused.
            marked = bool(item.get("hostPath")) or is_workspace_relative(str(item["source"]))
            item["source"], item["hostPath"] = str((source.parent / item["source"]).resolve()), marked
    return copy


def executor_version(executor: str) -> str:
    if executor == "openai-agents":
        return f"openai-agents (openai {version('openai')})"
    if executor == "anthropic-managed":
        return f"anthropic-managed (anthropic {version('anthropic')})"
    return f"self-hosted ({HARNESS_VERSION})"


def handover_refusal(executor: str, handover_to: str | None) -> str | None:
    """Why `--executor executor --handover-to handover_to` cannot run, or None."""
    if handover_to is None:
        return None
    if handover_to not in EXECUTORS:
        return f"--handover-to must be one of {', '.join(EXECUTORS)}, got {handover_to!r}"
    if handover_to == executor:
        return f"--handover-to {handover_to} is the executor the run starts on: name another one"
    return None


def recorded_type(executor: str) -> str:
    """The `spec.executor.type` the record names for one of the drill's executors."""
    return "scripted" if executor == "self-hosted" else executor


def move_options(executor: str) -> list[str]:
    """What a person adds to `belay resume` to move the session to `executor`."""
    model = DRILL_MODELS.get(executor)
    return ["--executor", executor] + (["--model", model] if model else [])
