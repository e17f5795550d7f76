"""A scripted coordinator's child plans are checked at `belay run`, before anything starts: a
child plan with an unknown tool, or one that cannot be read, refuses the run with one line that
names the child, its plan and the problem, and the home stays as it was. Found only once the child
started, the cause was written to the coordinator's log alone and `belay brief CHILD` said
"unknown session"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from belay.local.cli_process import run_belay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release-notes"


@pytest.fixture
def coordinator(tmp_path: Path) -> Path:
    copy = tmp_path / "release-notes"
    shutil.copytree(EXAMPLE, copy)
    return copy


def test_an_unknown_tool_in_a_child_plan_refuses_the_run(coordinator: Path, tmp_path: Path) -> None:
    plan = coordinator / "part-docs-plan.yaml"
    plan.write_text(plan.read_text().replace("tool: publish_deliverable", "tool: publish_deliverables"))
    home = tmp_path / "home"
    refused = run_belay(home, "run", "--quiet", str(coordinator / "session.yaml"))
    assert refused.returncode != 0
    [line] = refused.stderr.splitlines()
    assert "child session 'notes-docs'" in line and "part-docs-plan.yaml" in line
    assert "unknown tool 'publish_deliverables'; did you mean 'publish_deliverable'?" in line
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


def test_a_child_plan_that_is_missing_refuses_the_run(coordinator: Path, tmp_path: Path) -> None:
    (coordinator / "part-parser-plan.yaml").unlink()
    refused = run_belay(tmp_path / "home", "run", "--quiet", str(coordinator / "session.yaml"))
    assert refused.returncode != 0
    assert "child session 'notes-parser'" in refused.stderr and "cannot read" in refused.stderr
