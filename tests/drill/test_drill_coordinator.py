"""`belay drill` on a coordinator drills its children, whose records hold the work; and a drill
that killed and resumed nothing checked nothing, and never says it passed."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.belay_cli import RUN_TIMEOUT_S, failed_checks, run_belay
from tests.harness.example import ROOT

pytestmark = pytest.mark.slow

RELEASE_NOTES = ROOT / "examples" / "release-notes"
CHILDREN = ("notes-parser", "notes-docs")


def test_a_coordinator_drill_kills_in_each_child_and_checks_every_session(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "drill", str(RELEASE_NOTES / "session.yaml"), "--json", timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and result.returncode == 0
    # One kill per child, at a point of that child's record, each resumed and judged.
    assert [p["scenario"] for p in report["points"]] == [
        f"kill in a child session after a tool request ({child})" for child in CHILDREN
    ]
    assert all(p["passed"] and p["point"].startswith("tool_request:") for p in report["points"])
    checks = [
        c for c in report["checks"] if c["name"] == "the resumed coordinator and every child session complete"
    ]
    assert len(checks) == 2 and all(
        all(session in c["detail"] for session in ("release-notes", *CHILDREN)) for c in checks
    )
    owed = [c for c in report["checks"] if c["name"].startswith("every deliverable is there")]
    assert len(owed) == 2 and all("parser.md" in c["detail"] and "docs.md" in c["detail"] for c in owed)
    # The coordinator's own scenarios are named as skipped, saying the children were drilled instead.
    assert report["skipped"] and all(
        "child sessions (notes-parser, notes-docs)" in s["reason"] for s in report["skipped"]
    )


def single_step_session(directory: Path) -> Path:
    """A session of one step whose verification comes after its only sandbox call: nothing of any
    scenario's kind to interrupt."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "one-note"},
        "spec": {
            "request": {"goal": "Write the parser's release note."},
            "executor": {"type": "scripted", "plan": str(RELEASE_NOTES / "part-parser-plan.yaml")},
            "subagents": [
                {
                    "name": "writer",
                    "role": "Writes release notes.",
                    "networkProfile": "none",
                    "deliverable": "parser.md",
                }
            ],
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_a_drill_that_interrupted_nothing_never_passes(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "drill", str(single_step_session(tmp_path)), timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = " ".join(result.stdout.split())
    assert "drill passed" not in verdict and "drill failed:" in verdict, verdict
    [failed] = [line for line in result.stdout.splitlines() if line.startswith("FAIL ")]
    assert failed.startswith("FAIL the drill interrupted the session at least once: no scenario killed")
    # It says what it skipped, and why.
    skipped = [line for line in result.stderr.splitlines() if line.startswith("SKIP ")]
    assert len(skipped) == 4, skipped
    for line in skipped:
        scenario, reason = line.removeprefix("SKIP ").split(": ", 1)
        assert f"{scenario}: {reason}" in failed


def coordinator_with_a_waiting_child(directory: Path) -> Path:
    """The release-notes example copied, its docs child waiting on an external condition first."""
    shutil.copytree(RELEASE_NOTES, directory)
    plan_file = directory / "part-docs-plan.yaml"
    plan = yaml.safe_load(plan_file.read_text())
    step = plan["subagents"]["writer"]["steps"][0]
    wait = {
        "tool": "wait_on_external",
        "arguments": {"reason": "the docs site is published", "condition": "docs-up"},
    }
    step["actions"] = [wait, *step["actions"]]
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    return directory / "session.yaml"


def test_a_wait_in_a_child_stops_the_drill_at_once_naming_the_child_and_its_command(tmp_path: Path) -> None:
    manifest = coordinator_with_a_waiting_child(tmp_path / "release-notes")
    home = tmp_path / "home"
    started = time.monotonic()
    result = run_belay(home, "drill", str(manifest), "--json", timeout=600)
    assert time.monotonic() - started < RUN_TIMEOUT_S  # not at the run's limit
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["passed"] is False
    [check] = report["checks"]
    assert check["name"] == "uninterrupted run completes" and not check["passed"]
    wait = r"wait-writer\.write\.\d+"
    assert re.search(
        rf"waited on an external condition: external wait {wait}: the docs site is published "
        rf"\(condition docs-up\): `belay --home {home}/drill/\S+/reference approve notes-docs {wait}`",
        check["detail"],
    ), check["detail"]


def test_with_answer_waits_a_coordinator_drill_answers_its_children_waits(tmp_path: Path) -> None:
    manifest = coordinator_with_a_waiting_child(tmp_path / "release-notes")
    result = run_belay(tmp_path / "home", "drill", str(manifest), "--answer-waits", "--json", timeout=900)
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and len(report["points"]) == len(CHILDREN)
    # The reference run and each child's kill run met the docs child's condition, in their own homes.
    homes = sorted(line.split(":", 1)[0] for line in report["answered"])
    assert homes == ["kill-in-notes-docs", "kill-in-notes-parser", "reference"], report["answered"]
    assert all(" approve notes-docs wait-writer.write." in line for line in report["answered"])
