"""A coordinator and its child sessions on one machine, no cluster, driven as a person drives them:
`belay run` of the coordinator starts each child in the same home, in a harness process of its
own, and collects their deliverables as its own artifacts; `belay objective` shows each child as
it stands; a child whose harness is killed is shown interrupted while the others move on, and
`belay resume` of it goes on from its record without repeating a completed step of any child."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from belay.local.liveness import holder_process
from belay.local.runtime import LocalHome
from tests.belay_cli import read_events, run_belay, start_belay, steps_run_twice
from tests.testenv.polling import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASE_NOTES = REPO_ROOT / "examples/release-notes/session.yaml"


def lease_holder(home: Path, session_id: str) -> str | None:
    async def read() -> str | None:
        store = LocalHome(home).open_event_store()
        try:
            lease = await store.current_lease(session_id)
        finally:
            await store.close()
        return lease.holder if lease is not None else None

    return asyncio.run(read())


def objective(home: Path, name: str) -> dict[str, Any]:
    shown = run_belay(home, "objective", name, "--json")
    assert shown.returncode == 0, shown.stderr
    view: dict[str, Any] = json.loads(shown.stdout)
    return view


def rows(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["session"]: row for row in view["sessions"]}


def test_the_release_notes_run_on_one_machine_with_both_childrens_deliverables(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Session release-notes: Succeeded" in ran.stdout
    assert "child session notes-parser started" in ran.stdout

    # Each child ran in a harness process of its own, none of them the coordinator's.
    holders = {name: lease_holder(home, name) for name in ("release-notes", "notes-parser", "notes-docs")}
    assert len({holder_process(h or "") for h in holders.values()}) == 3, holders

    for child, name, text in (
        ("notes-parser", "parser.md", "## Parser"),
        ("notes-docs", "docs.md", "## Documentation"),
    ):
        fetched = run_belay(
            home, "artifacts", "get", "release-notes", f"{child}/{name}", "-o", str(tmp_path / name)
        )
        assert fetched.returncode == 0, fetched.stderr
        assert (tmp_path / name).read_text().startswith(text)
        assert steps_run_twice(read_events(home, child)) == []

    view = objective(home, "release-notes")
    assert view["done"] is True
    assert {r["session"]: (r["part"], r["parent"]) for r in view["sessions"]} == {
        "release-notes": (None, None),
        "notes-parser": ("parser", "release-notes"),
        "notes-docs": ("docs", "release-notes"),
    }


# Three children under one coordinator; each writes a first file, then decides its second through a
# slow model call (`latency_s`): `fast` is killed there, the others are still deciding.
def part_plan(name: str, latency_s: float) -> dict[str, Any]:
    return {
        "subagents": {
            "writer": {
                "steps": [
                    {
                        "id": "first",
                        "title": f"The first half of {name}",
                        "actions": [
                            {"tool": "write_file", "arguments": {"path": "out/a.md", "content": name}}
                        ],
                    },
                    {
                        "id": "second",
                        "title": f"The second half of {name}",
                        "actions": [
                            {
                                "tool": "write_file",
                                "latency_s": latency_s,
                                "arguments": {"path": f"out/{name}.md", "content": f"{name}\n"},
                            },
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": f"out/{name}.md", "name": f"{name}.md"},
                            },
                        ],
                    },
                ]
            }
        }
    }


CHILDREN = {"fast": 2.0, "slow-a": 8.0, "slow-b": 8.0}


def write_coordinator(directory: Path) -> Path:
    directory.mkdir(parents=True)
    starts = []
    for name, latency in CHILDREN.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(part_plan(name, latency)))
        starts.append(
            {
                "tool": "start_session",
                "arguments": {
                    "name": name,
                    "part": name,
                    "goal": f"Write {name}.md.",
                    "plan": f"{name}.yaml",
                    "deliverable": f"{name}.md",
                },
            }
        )
    awaits = [{"tool": "await_session", "arguments": {"name": name}} for name in CHILDREN]
    plan = {
        "subagents": {
            "writer": {
                "steps": [
                    {"id": "delegate", "title": "Start the parts", "actions": starts},
                    {"id": "collect", "title": "Wait for the parts", "actions": awaits},
                ]
            }
        }
    }
    (directory / "coordinator.yaml").write_text(yaml.safe_dump(plan))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "trio", "labels": {"belay.dev/objective": "trio"}},
        "spec": {
            "request": {"goal": "Three parts, one child session each."},
            "executor": {"type": "scripted", "plan": "coordinator.yaml"},
            "subagents": [{"name": "writer", "networkProfile": "none"}],
        },
    }
    (directory / "session.yaml").write_text(yaml.safe_dump(manifest))
    return directory / "session.yaml"


def step_done(home: Path, session_id: str, task: str) -> bool:
    return any(
        e.type == "task" and e.payload.task_id == task and e.payload.status in ("done", "verified")
        for e in read_events(home, session_id)
    )


def test_a_killed_child_is_interrupted_while_the_others_move_and_its_resume_repeats_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", str(write_coordinator(tmp_path / "trio")))
    try:
        wait_until(
            lambda: step_done(home, "fast", "writer/first"),
            "the fast child's first step",
            timeout=60,
            while_running=coordinator,
        )
        holder = lease_holder(home, "fast")
        process = holder_process(holder or "")
        assert process is not None, holder
        subprocess.run(["kill", "-9", str(process[0])], check=True)
        wait_until(
            lambda: rows(objective(home, "trio"))["fast"]["bucket"] == "interrupted",
            "the killed child shown interrupted",
            timeout=30,
        )
        shown = rows(objective(home, "trio"))
        assert shown["fast"]["command"] == "belay resume fast", shown["fast"]
        assert {shown[n]["bucket"] for n in ("slow-a", "slow-b")} == {"moving"}, shown
        assert shown["trio"]["bucket"] == "on_external", shown["trio"]  # on its children
        text = run_belay(home, "objective", "trio").stdout
        assert "interrupted Interrupted in fast: belay resume fast" in text, text

        resumed = run_belay(home, "resume", "fast")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert coordinator.wait(timeout=120) == 0
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    for session_id in ("trio", *CHILDREN):
        assert steps_run_twice(read_events(home, session_id)) == [], session_id
    view = objective(home, "trio")
    assert view["done"] is True, view
    assert sorted(rows(view)["trio"]["deliverables"]) == sorted(f"{n}/{n}.md" for n in CHILDREN)


def test_an_amend_of_the_coordinators_request_reopens_exactly_the_child_whose_part_changed(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    docs_before = read_events(home, "notes-docs")

    new_part = "the parser fix, with its regression test"
    amended = run_belay(home, "amend", "release-notes", "--part", f"parser={new_part}")
    assert amended.returncode == 0, amended.stderr
    assert "child sessions reopened: notes-parser (part parser); the other children stand" in amended.stdout
    shown = rows(objective(home, "release-notes"))
    assert shown["notes-docs"]["bucket"] == "succeeded", shown["notes-docs"]
    assert shown["notes-parser"]["bucket"] != "succeeded" and shown["notes-parser"]["deliverables"] == []
    [change] = [e.payload for e in read_events(home, "notes-parser") if e.type == "scope_change"]
    assert change.changed_parts == {"parser": new_part}, change

    resumed = run_belay(home, "resume", "--quiet", "release-notes")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert read_events(home, "notes-docs") == docs_before  # it stood: not a single event more
    parser = read_events(home, "notes-parser")
    rounds = [
        e
        for e in parser
        if e.type == "task" and e.payload.task_id == "writer/write" and e.payload.status == "verified"
    ]
    assert len(rounds) == 2, rounds  # its step, done again for the changed part
    view = objective(home, "release-notes")
    assert view["done"] is True, view
    assert sorted(rows(view)["release-notes"]["deliverables"]) == [
        "notes-docs/docs.md",
        "notes-parser/parser.md",
    ]
