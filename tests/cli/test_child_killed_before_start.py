"""A child session killed before its first attempt (its coordinator's process group killed right
after it linked the child, before the child's own `belay resume` recorded anything) is not counted
as moving while no process runs it: its phase is Interrupted, its page says its coordinator
stopped before it started and names the command that starts it, and `belay sessions` counts none
moving. Running the coordinator's resume, as the objective prints it, finishes the whole. The real
command line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.belay_cli import kill_group, read_events, run_belay, start_belay
from tests.cli.test_children import RELEASE_NOTES, run_as_printed
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

COORDINATOR = "release-notes"
CHILD = "notes-parser"
HANG_S = 300.0  # a guard against a hang, never a timing


def shown(home: Path, *args: str) -> Any:
    result = run_belay(home, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_child_killed_before_its_first_attempt_is_interrupted_with_the_command_to_start_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", "--quiet", str(RELEASE_NOTES))
    try:
        while not read_events(home, CHILD):  # linked by its coordinator, nothing of its own yet
            assert coordinator.poll() is None, "the coordinator ended before it linked its child"
            time.sleep(0.005)
    finally:
        kill_group(coordinator)  # the coordinator and every process it started
    assert [e.type for e in read_events(home, CHILD)] == ["session_link"]

    page = shown(home, "brief", CHILD)
    assert page["phase"] == "Interrupted", page["phase"]
    assert page["interruption"]["command"] == f"belay resume {CHILD}"
    assert f"its coordinator {COORDINATOR} stopped before it did" in page["interruption"]["why"]
    text = run_belay(home, "brief", CHILD).stdout
    assert f"run: belay resume {CHILD}" in text, text

    fleet = shown(home, "sessions")
    assert fleet["summary"]["moving"] == 0, fleet["summary"]["line"]
    assert all(row["command"] for row in fleet["sessions"]), fleet["sessions"]

    [wait] = shown(home, "objective", COORDINATOR)["waits_on"]
    resumed = run_as_printed(home, wait["command"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    wait_until(
        lambda: shown(home, "objective", COORDINATOR)["done"], "the objective to be done", timeout=HANG_S
    )
