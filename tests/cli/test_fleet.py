"""`belay sessions` over five real records in five states (moving, waiting on the user, on an
external condition, ready for review, interrupted), read by the `belay` program itself through a
pipe: the JSON rows and the summary, the text table with every cell whole, label selectors, and
`--watch` printing again when a session moves on."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.local.liveness import this_holder
from belay.local.runtime import LocalHome
from tests.fleet_records import EXPECTED, SUMMARY, write_five_sessions

BELAY = str(Path(sys.executable).with_name("belay"))
# A pid no process can have (above the kernel's pid_max): the holder of an attempt that is gone.
GONE = "local:2147483647@1"


def belay(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BELAY, "--home", str(home), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    local = LocalHome(tmp_path / "home")

    async def write() -> None:
        store = local.open_event_store()
        try:
            await write_five_sessions(
                store, local.open_artifact_store(), lambda _, alive: this_holder() if alive else GONE
            )
        finally:
            await store.close()

    asyncio.run(write())
    return local.root


def test_five_sessions_each_with_what_it_waits_on_and_the_command_that_unblocks_it(home: Path) -> None:
    listed = belay(home, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    view = json.loads(listed.stdout)
    rows = {row["session"]: row for row in view["sessions"]}
    assert sorted(rows) == sorted(EXPECTED)
    for name, expected in EXPECTED.items():
        row = rows[name]
        assert (row["phase"], row["bucket"]) == (expected.phase, expected.bucket), row
        assert tuple(row["waits_on_user"]) == expected.user, row
        assert tuple(row["waits_on_external"]) == expected.external, row
        assert tuple(row["ready_for_review"]) == expected.review, row
        assert row["command"] == expected.command, row
        assert row["events"] > 0 and row["last_event_age_s"] is not None and row["last_event_age_s"] < 3600
    assert rows["fleet-review"]["deliverables"] == ["report.md"]
    assert view["summary"]["line"] == SUMMARY
    assert {k: v for k, v in view["summary"].items() if k != "line"} == {
        "sessions": 5,
        "moving": 1,
        "waiting_on_you": 1,
        "on_external": 1,
        "ready_for_review": 1,
        "interrupted": 1,
        "needs_attention": 0,
        "failed": 0,
        "succeeded": 0,
    }

    # The table through a pipe: one line per session, every cell whole, the summary last.
    table = belay(home, "sessions")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["SESSION", "OBJECTIVE", "PHASE"]
    assert lines[-1] == SUMMARY
    assert len(lines) == 2 + len(EXPECTED)
    for name, expected in EXPECTED.items():
        [line] = [line for line in lines if line.startswith(f"{name} ")]
        assert expected.phase in line.split()
        if expected.command:
            assert line.endswith(expected.command), line


def test_a_label_selector_picks_sessions_by_their_manifest_labels(home: Path, tmp_path: Path) -> None:
    manifest = yaml.safe_load((Path(__file__).parents[2] / "examples/parser-fix/session.yaml").read_text())
    session_dir = home / "sessions" / "fleet-approval"
    session_dir.mkdir(parents=True)
    manifest["metadata"] = {
        "name": "fleet-approval",
        "labels": {"belay.dev/objective": "release", "team": "a"},
    }
    manifest["spec"]["executor"]["plan"] = str(Path(__file__).parents[2] / "examples/parser-fix/plan.yaml")
    for sub in manifest["spec"]["subagents"]:
        sub["inputs"] = []
    (session_dir / "session.yaml").write_text(yaml.safe_dump(manifest))

    picked = json.loads(belay(home, "sessions", "--json", "-l", "team=a").stdout)
    assert [row["session"] for row in picked["sessions"]] == ["fleet-approval"]
    assert picked["sessions"][0]["objective"] == "release"
    others = json.loads(belay(home, "sessions", "--json", "-l", "team!=a").stdout)
    assert "fleet-approval" not in [row["session"] for row in others["sessions"]]
    assert others["summary"]["sessions"] == 4
    refused = belay(home, "sessions", "-l", "team in (a,b)")
    assert refused.returncode == 1 and refused.stderr.startswith("error: --selector: set-based")

    objective = belay(home, "objective", "release")
    assert objective.returncode == 0, objective.stderr
    assert objective.stdout.splitlines()[0].startswith(
        "Objective release: 1 session: 0 moving, 1 waiting on you"
    )
    assert (
        "approval approve-worker.publish.1 in fleet-approval: belay approve fleet-approval"
        in objective.stdout
    )


def test_watch_prints_again_when_a_session_moves_on(home: Path) -> None:
    watcher = subprocess.Popen(
        [BELAY, "--home", str(home), "sessions", "--watch", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        first: dict[str, Any] = json.loads(watcher.stdout.readline())
        assert first["summary"]["waiting_on_you"] == 1
        approved = belay(home, "approve", "fleet-approval", "approve-worker.publish.1")
        assert approved.returncode == 0, approved.stderr
        second: dict[str, Any] = json.loads(watcher.stdout.readline())
        row = next(r for r in second["sessions"] if r["session"] == "fleet-approval")
        # Approved, and its attempt (this test's process) alive: it is moving again.
        assert (row["phase"], row["waits_on_user"]) == ("Running", [])
        assert second["summary"]["waiting_on_you"] == 0 and second["summary"]["moving"] == 2
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
