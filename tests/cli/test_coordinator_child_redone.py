"""A child's deliverable redone after its coordinator collected it, on every executor: the
release-notes example (a coordinator over two child sessions) through the real command line as a
person runs it (the scripted executor, and both managed executors against each session's own local
stand-in, nothing configured).

- The person turns the child's note down, or amends the child itself, and resumes the child alone:
  it ends Succeeded with new bytes. Until the coordinator collected them, `belay objective` does
  not say every session succeeded, nor does the coordinator say Succeeded; the coordinator's next
  `belay resume` collects the new bytes.
- The child redoes its note after a rejection and the bytes come out the same: the step that made
  them is done, but the note still waits on the person ("the same bytes as rejected"): the child
  needs attention, the bytes are never ready for review again, and the coordinator neither
  collects them nor says Succeeded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from tests.belay_cli import run_belay, stop_session_standins

pytestmark = pytest.mark.slow

HANG_S = 400.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release-notes"
COORDINATOR, CHILD = "release-notes", "notes-parser"
SESSIONS = (COORDINATOR, CHILD, "notes-docs")
REASON = "say which versions the fix reaches"
VERSIONS_GOAL = "Write the release note for the parser fix, saying which versions it reaches."
EXECUTORS = ["scripted", "openai-agents", "anthropic-managed"]


def release_notes(directory: Path, executor: str, redone_the_same: bool = False) -> Path:
    """The example, its coordinator (and so its children) on `executor`; the parser's note
    written again for a goal that asks for versions, and after a rejection (the same bytes as
    before when `redone_the_same`)."""
    shutil.copytree(EXAMPLE, directory)
    plan_path = directory / "part-parser-plan.yaml"
    plan = yaml.safe_load(plan_path.read_text())
    [write] = plan["subagents"]["writer"]["steps"]
    [rejected] = write["variants"]
    if redone_the_same:
        rejected["actions"] = write["actions"]
    write["variants"] = [rejected, {"when": {"goal_contains": "versions"}, "actions": rejected["actions"]}]
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    manifest = directory / "session.yaml"
    data = yaml.safe_load(manifest.read_text())
    if executor != "scripted":
        data["spec"]["executor"] = {"type": executor, "model": "gpt-5", "plan": "coordinator-plan.yaml"}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def belay_ok(home: Path, *command: str) -> str:
    done = run_belay(home, *command, environment=NO_PROVIDER, timeout=HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def brief(home: Path, session_id: str) -> dict[str, Any]:
    return dict(json.loads(belay_ok(home, "brief", "--json", session_id)))


def collected(home: Path) -> dict[str, str]:
    """What the coordinator's page offers for review, by name: its sha256."""
    return {r["name"]: r["sha256"] for r in brief(home, COORDINATOR)["ready_for_review"]}


def child_note(home: Path) -> str:
    [ready] = [r for r in brief(home, CHILD)["ready_for_review"] if r["name"] == "parser.md"]
    return str(ready["sha256"])


def every_session_succeeded(home: Path) -> bool:
    return "every session succeeded" in belay_ok(home, "objective", COORDINATOR).lower()


def run_to_the_end(tmp_path: Path, executor: str, redone_the_same: bool = False) -> Path:
    home = tmp_path / "home"
    belay_ok(home, "run", "--quiet", str(release_notes(tmp_path / "example", executor, redone_the_same)))
    assert all(brief(home, s)["phase"] == "Succeeded" for s in SESSIONS)
    assert every_session_succeeded(home)
    return home


@pytest.mark.parametrize("change", ["reject", "amend"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_child_redone_on_its_own_is_collected_at_the_coordinators_next_resume(
    tmp_path: Path, executor: str, change: str
) -> None:
    home = tmp_path / "home"
    try:
        run_to_the_end(tmp_path, executor)
        first = child_note(home)
        if change == "reject":
            belay_ok(home, "reject", CHILD, "parser.md", "--reason", REASON)
        else:
            said = belay_ok(home, "amend", CHILD, "--goal", VERSIONS_GOAL)
            assert f"`belay resume {COORDINATOR}`" in said, said
        belay_ok(home, "resume", "--quiet", CHILD)
        again = child_note(home)
        assert again != first
        assert brief(home, CHILD)["phase"] == "Succeeded"
        # The coordinator holds the bytes it collected before: nothing says the objective is done.
        assert brief(home, COORDINATOR)["phase"] != "Succeeded"
        assert collected(home).get(f"{CHILD}/parser.md") != first
        assert not every_session_succeeded(home)

        belay_ok(home, "resume", "--quiet", COORDINATOR)
        for session in SESSIONS:
            assert brief(home, session)["phase"] == "Succeeded", session
        assert collected(home)[f"{CHILD}/parser.md"] == again
        assert every_session_succeeded(home)
    finally:
        stop_session_standins(home)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_rejected_deliverable_redone_to_the_same_bytes_still_waits_on_the_person(
    tmp_path: Path, executor: str
) -> None:
    home = tmp_path / "home"
    try:
        run_to_the_end(tmp_path, executor, redone_the_same=True)
        first = child_note(home)
        belay_ok(home, "reject", COORDINATOR, f"{CHILD}/parser.md", "--reason", REASON)
        resumed = run_belay(home, "resume", "--quiet", COORDINATOR, environment=NO_PROVIDER, timeout=HANG_S)
        assert resumed.returncode == 1, resumed.stdout + resumed.stderr
        assert f"child session {CHILD} ended NeedsAttention" in resumed.stderr, resumed.stderr

        child = brief(home, CHILD)
        assert child["phase"] == "NeedsAttention", child["phase"]
        [write] = [s for s in child["steps"] if s["task_id"] == "writer/write"]
        assert write["round"] == 2 and write["status"] in ("done", "verified"), write
        assert first not in json.dumps(child["ready_for_review"])
        attention = json.dumps(child["needs_attention"])
        assert "same bytes as rejected" in attention, attention
        text = belay_ok(home, "brief", CHILD)
        assert "same bytes as rejected" in text

        coordinator = brief(home, COORDINATOR)
        assert coordinator["phase"] != "Succeeded"
        assert f"{CHILD}/parser.md" not in collected(home)
        assert CHILD in json.dumps(coordinator["needs_attention"])
        assert not every_session_succeeded(home)
    finally:
        stop_session_standins(home)
