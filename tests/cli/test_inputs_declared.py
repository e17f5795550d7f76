"""An input is restored or refused, never dropped: only declared files survive a sandbox's
restore, so `belay run` refuses a manifest whose input lies outside every declared pattern, naming
the subagent and the path, and records nothing; the same input under a declared pattern runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from belay.api.agentsession import AgentSession, covers_input
from belay.local.cli_process import read_events, run_belay
from belay.local.runtime import LocalHome

SESSION = "inputs"
COPY = "mkdir -p out && cp notes/todo.txt out/todo.txt"


def manifest_with(directory: Path, declared: list[str]) -> Path:
    (directory / "notes").mkdir()
    (directory / "notes" / "todo.txt").write_text("read me\n")
    plan = {
        "subagents": {
            "reader": {
                "steps": [
                    {
                        "id": "copy",
                        "title": "Copy the notes",
                        "verify": {"command": "test -s out/todo.txt", "exit_code": 0},
                        "actions": [
                            {
                                "tool": "run_command",
                                "arguments": {"command": COPY},
                            },
                            {"tool": "publish_deliverable", "arguments": {"path": "out/todo.txt"}},
                        ],
                    }
                ]
            }
        }
    }
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    subagent: dict[str, Any] = {
        "name": "reader",
        "networkProfile": "none",
        "deliverable": "todo.txt",
        "inputs": [{"source": "notes", "target": "notes"}],
        "declared": declared,
    }
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "copy the notes"},
            "executor": {"type": "scripted", "plan": str(directory / "plan.yaml")},
            "subagents": [subagent],
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_belay_run_refuses_an_input_outside_declared_and_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = run_belay(home, "run", "--quiet", str(manifest_with(tmp_path, ["out/*"])))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: ") and "only declared files survive a sandbox's restore" in line, line
    assert "subagent 'reader': input target 'notes' is outside declared ('out/*')" in line, line
    assert not LocalHome(home).session_dir(SESSION).exists()  # nothing installed, nothing recorded
    unknown = run_belay(home, "brief", SESSION)
    assert unknown.returncode != 0 and "unknown session 'inputs'" in unknown.stderr, unknown.stderr


def test_the_same_input_under_a_declared_pattern_runs_to_its_deliverable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(manifest_with(tmp_path, ["notes/*", "out/*"])))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    published = [e.payload for e in read_events(home, SESSION) if e.type == "artifact"]
    assert [a.name for a in published] == ["todo.txt"]  # type: ignore[union-attr]


def test_a_pattern_covers_an_input_when_it_keeps_every_file_under_it() -> None:
    assert covers_input("repo/*", "repo") and covers_input("*", "repo")
    assert not covers_input("repo/*.py", "repo")  # only some of its files would survive
    assert not covers_input("re?o/*", "repo") and not covers_input("repo/*", "repo/sub")
    assert not covers_input("repo", "repo") and not covers_input("out/*", "repo")
    assert not covers_input("repo/*", "repository")
    spec = {
        "request": {"goal": "g"},
        "executor": {"type": "scripted", "plan": "plan.yaml"},
        "subagents": [{"name": "a", "inputs": [{"source": "x", "target": "repo"}], "declared": ["repo/*"]}],
    }
    assert AgentSession.model_validate({"metadata": {"name": "ok"}, "spec": spec}).spec.subagents[0].declared
