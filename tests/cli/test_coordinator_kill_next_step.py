"""After a `kill -9` of a coordinator whose children were running, the person is given one next
step: every interrupted session of the objective names the coordinator's resume (`belay sessions`,
`belay objective`), "the whole waits on" lists that one command, saying it resumes the children,
and running it as printed finishes the whole objective. The real command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.journal.events import ToolRequestEvent
from tests.belay_cli import kill_group, read_events, run_belay, start_belay
from tests.cli.test_children import REPO_ROOT, run_as_printed
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

COORDINATOR = "release-notes"
CHILDREN = ("notes-docs", "notes-parser")
HANG_S = 300.0  # a guard against a hang, never a timing


def slow_children(directory: Path) -> Path:
    """examples/release-notes, each child running a command of a few seconds before it publishes:
    long enough to be killed under."""
    shutil.copytree(REPO_ROOT / "examples/release-notes", directory)
    for plan_file in directory.glob("part-*-plan.yaml"):
        plan = yaml.safe_load(plan_file.read_text())
        [step] = plan["subagents"]["writer"]["steps"]
        step["actions"].insert(1, {"tool": "run_command", "arguments": {"command": ["sleep", "4"]}})
        plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    return directory / "session.yaml"


def running_the_command(home: Path, child: str) -> bool:
    return any(
        isinstance(e, ToolRequestEvent) and e.payload.tool == "run_command" for e in read_events(home, child)
    )


def objective(home: Path) -> dict[str, Any]:
    shown = run_belay(home, "objective", COORDINATOR, "--json")
    assert shown.returncode == 0, shown.stderr
    view: dict[str, Any] = json.loads(shown.stdout)
    return view


def test_a_killed_coordinator_and_its_children_have_one_next_step(tmp_path: Path) -> None:
    manifest = slow_children(tmp_path / "example")
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", "--quiet", str(manifest))
    try:
        wait_until(
            lambda: all(running_the_command(home, child) for child in CHILDREN),
            "both children to run their command",
            timeout=HANG_S,
            while_running=coordinator,
        )
        os.kill(coordinator.pid, signal.SIGKILL)  # the coordinator alone, as `kill -9 PID` does
        coordinator.wait()
    finally:
        if coordinator.poll() is None:
            kill_group(coordinator)
    wait_until(
        lambda: all(row["bucket"] == "interrupted" for row in objective(home)["sessions"]),
        "every session of the objective to be interrupted (the children stop with their coordinator)",
        timeout=HANG_S,
    )

    resume = f"belay resume {COORDINATOR}"
    listed = json.loads(run_belay(home, "sessions", "--json").stdout)
    assert {row["session"]: row["command"] for row in listed["sessions"]} == dict.fromkeys(
        (COORDINATOR, *CHILDREN), resume
    )
    view = objective(home)
    [wait] = view["waits_on"]
    assert (wait["session"], wait["kind"], wait["command"]) == (COORDINATOR, "interrupted", resume)
    assert all(child in wait["what"] for child in CHILDREN), wait
    page = run_belay(home, "objective", COORDINATOR).stdout
    assert page.count(resume) == len(view["sessions"]) + 1, page  # the table's rows and one wait
    assert all(f"belay resume {child}" not in page for child in CHILDREN), page

    resumed = run_as_printed(home, wait["command"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    wait_until(lambda: objective(home)["done"], "the whole objective to be done", timeout=HANG_S)
