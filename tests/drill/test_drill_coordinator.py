"""`belay drill` on a coordinator drills its children, whose records hold the work; and a drill
that killed and resumed nothing checked nothing, and never says it passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.belay_cli import run_belay
from tests.harness.example import ROOT

pytestmark = pytest.mark.slow

RELEASE_NOTES = ROOT / "examples" / "release-notes"
CHILDREN = ("notes-parser", "notes-docs")


def test_a_coordinator_drill_kills_in_each_child_and_checks_every_session(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "drill", str(RELEASE_NOTES / "session.yaml"), "--json", timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed
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
