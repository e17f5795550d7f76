"""A change of a child's part while the child waits on an external condition (CI), on every
executor: the release-notes coordinator, its parser child given a plan that writes a patch, waits
on CI, then publishes the patch (its verification `test -s` of the patch), through the real
command line as a person runs it (the scripted executor, and both managed executors against each
session's own local stand-in, nothing configured).

While the child waits on CI, `belay amend release-notes --part parser=...` reopens the child. The
reopened steps are redone in their new round (the patch written again), and CI is marked met by
the person. When the redone patch is good, the coordinator collects the new bytes and every
session ends Succeeded. When the redone patch is empty (the patch step writes nothing the second
time), the publish step's verification fails: the child's page shows the step failed under "Needs
attention" (never done), the empty patch is never ready for review, and the coordinator neither
collects it nor says Succeeded, and it ends rather than waiting on the child for ever.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event, ScopeChangeEvent, WaitEvent
from tests.belay_cli import kill_group, read_events, run_belay, start_belay, stop_session_standins
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

HANG_S = 400.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release-notes"
COORDINATOR, CHILD = "release-notes", "notes-parser"
SESSIONS = (COORDINATOR, CHILD, "notes-docs")
NEW_PART = "the parser fix, with its test"
PATCH = "the parser fix"


def child_plan(patch: str) -> dict[str, Any]:
    """Write the patch (`patch`, its bytes), wait on CI, publish the patch."""
    command = f"mkdir -p out && printf %s '{patch}' > out/fix.patch"
    return {
        "subagents": {
            "writer": {
                "steps": [
                    {
                        "id": "patch",
                        "title": "Write the parser's patch",
                        "actions": [{"tool": "run_command", "arguments": {"command": command}}],
                    },
                    {
                        "id": "ci",
                        "title": "Wait for CI",
                        "actions": [
                            {
                                "tool": "wait_on_external",
                                "arguments": {"reason": "CI must pass on the patch", "condition": "ci-green"},
                            }
                        ],
                    },
                    {
                        "id": "publish",
                        "title": "Publish the patch",
                        "verify": {"command": "test -s out/fix.patch", "exit_code": 0},
                        "actions": [
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": "out/fix.patch", "name": "parser.md"},
                            }
                        ],
                    },
                ]
            }
        }
    }


def objective(directory: Path, executor: str, patch: str) -> Path:
    """The example, its parser child on the CI plan, its coordinator (and so its children) on
    `executor`."""
    shutil.copytree(EXAMPLE, directory)
    (directory / "part-parser-plan.yaml").write_text(yaml.safe_dump(child_plan(patch), sort_keys=False))
    manifest = directory / "session.yaml"
    data = yaml.safe_load(manifest.read_text())
    if executor != "scripted":
        data["spec"]["executor"] = {"type": executor, "model": "gpt-5", "plan": "coordinator-plan.yaml"}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def brief(home: Path, session_id: str) -> dict[str, Any]:
    shown = run_belay(home, "brief", "--json", session_id)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def ci_waits(home: Path) -> list[str]:
    """The child's open waits on CI, by id."""
    if not (home / "sessions" / CHILD).exists():
        return []
    shown = run_belay(home, "brief", "--json", CHILD)
    if shown.returncode != 0:
        return []
    return [
        w["wait_id"] for w in json.loads(shown.stdout)["waiting_on_external"] if "approve" in w["command"]
    ]


def mark_ci_met_until_the_end(home: Path, run: subprocess.Popen[bytes]) -> None:
    """As the person: each time the child waits on CI, CI has passed; until the run ends."""

    def step() -> int | None:
        for wait_id in ci_waits(home):
            run_belay(home, "approve", CHILD, wait_id)
        return run.poll()

    wait_until(step, "the run to end", timeout=HANG_S, interval=0.5, until=lambda code: code is not None)


def step(shown: dict[str, Any], task_id: str) -> dict[str, Any]:
    [found] = [s for s in shown["steps"] if s["task_id"] == task_id]
    return found


def ci_waits_opened(events: list[Event]) -> list[str]:
    return [
        e.payload.wait_id for e in events if isinstance(e, WaitEvent) and e.payload.condition == "ci-green"
    ]


def amend_while_waiting_on_ci(tmp_path: Path, executor: str, patch: str) -> Path:
    """Run the objective, amend the child's part while it waits on CI, mark CI met each time it
    waits, until `belay run` ends; the home."""
    manifest = objective(tmp_path / "example", executor, patch)
    home = tmp_path / "home"
    run = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
    try:
        [first] = wait_until(
            lambda: ci_waits(home), "the child to wait on CI", timeout=HANG_S, while_running=run
        )
        amended = run_belay(home, "amend", COORDINATOR, "--part", f"parser={NEW_PART}")
        assert amended.returncode == 0, amended.stderr
        assert f"child sessions reopened: {CHILD}" in amended.stdout
        assert any(isinstance(e, ScopeChangeEvent) for e in read_events(home, CHILD))
        assert first not in ci_waits(home)  # CI on the old patch is no longer awaited
        mark_ci_met_until_the_end(home, run)
    finally:
        if run.poll() is None:
            kill_group(run)
    return home


EXECUTORS = ["scripted", "openai-agents", "anthropic-managed"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_amend_while_the_child_waits_on_ci_is_redone_and_collected(tmp_path: Path, executor: str) -> None:
    home = tmp_path / "home"
    try:
        amend_while_waiting_on_ci(tmp_path, executor, PATCH)
        for session in SESSIONS:
            assert brief(home, session)["phase"] == "Succeeded", session
        shown = brief(home, CHILD)
        # The steps the change reopened were done again, CI awaited again, on the new patch.
        assert step(shown, "writer/patch")["round"] == 2, shown["steps"]
        assert step(shown, "writer/ci")["round"] == 2, shown["steps"]
        assert len(set(ci_waits_opened(read_events(home, CHILD)))) == 2
        [ready] = [r for r in shown["ready_for_review"] if r["name"] == "parser.md"]
        assert ready["size"] == len(PATCH)
        collected = {r["name"]: r["sha256"] for r in brief(home, COORDINATOR)["ready_for_review"]}
        assert collected[f"{CHILD}/parser.md"] == ready["sha256"]
    finally:
        stop_session_standins(home)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_empty_patch_redone_while_waiting_on_ci_is_never_done_nor_collected(
    tmp_path: Path, executor: str
) -> None:
    home = tmp_path / "home"
    try:
        amend_while_waiting_on_ci(tmp_path, executor, "")
        shown = brief(home, CHILD)
        assert shown["phase"] == "NeedsAttention", shown["phase"]
        assert step(shown, "writer/patch")["round"] == 2, shown["steps"]
        publish = step(shown, "writer/publish")
        assert publish["status"] not in ("done", "verified") or publish["verification_failed"], publish
        attention = json.dumps(shown["needs_attention"])
        assert "writer/publish" in attention, attention
        assert all(r["size"] for r in shown["ready_for_review"]), shown["ready_for_review"]
        coordinator = brief(home, COORDINATOR)
        assert coordinator["phase"] != "Succeeded"
        assert f"{CHILD}/parser.md" not in {r["name"] for r in coordinator["ready_for_review"]}
        assert CHILD in json.dumps(coordinator["needs_attention"])
    finally:
        stop_session_standins(home)
