"""A one-subagent scripted session whose actions send what a hostile or careless model might, run
through the real `belay` command line, for the tests that content ends the step, never the attempt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from belay.journal.events import Event, Lifecycle, LifecycleKind, ToolResult
from tests.belay_cli import completed, read_events, run_belay

SESSION = "content"
PUBLISH = [
    {"tool": "write_file", "arguments": {"path": "out/result.txt", "content": "fine\n"}},
    {"tool": "publish_deliverable", "arguments": {"path": "out/result.txt"}},
]


def write_session(directory: Path, steps: list[dict[str, Any]], **spec: Any) -> Path:
    """The manifest of a session whose one subagent (`solo`) runs `steps`, owes result.txt and
    declares `out/`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plan.yaml").write_text(yaml.safe_dump({"subagents": {"solo": {"steps": steps}}}))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "Do what the plan says; publish out/result.txt."},
            "executor": {"type": "scripted", "plan": str(directory / "plan.yaml")},
            "subagents": [{"name": "solo", "deliverable": "result.txt", "declared": ["out/*"]}],
            **spec,
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def run_session(tmp_path: Path, steps: list[dict[str, Any]], proven: bool = True, **spec: Any) -> list[Event]:
    """Run the session to its end; its record. `proven=False`: the run ends without the record
    proving its work done (belay.journal.proof), and `belay run` says so with a non-zero exit."""
    home = tmp_path / "home"
    result = run_belay(home, "run", "--quiet", str(write_session(tmp_path / "manifest", steps, **spec)))
    events = read_events(home, SESSION)
    ends = [e.payload for e in events if isinstance(e.payload, Lifecycle) and e.payload.reason]
    if proven:
        assert completed(events), (result.returncode, result.stderr[-2000:], ends)
    else:
        assert result.returncode != 0 and "the record does not prove it done" in result.stderr, result.stderr
        assert any(e.kind == LifecycleKind.SESSION_COMPLETED for e in ends), ends
    return events


def result_of(events: list[Event], operation_id: str) -> ToolResult:
    [result] = [
        e.payload
        for e in events
        if isinstance(e.payload, ToolResult) and e.payload.operation_id == operation_id
    ]
    return result


def brief(tmp_path: Path) -> dict[str, Any]:
    shown = run_belay(tmp_path / "home", "brief", SESSION, "--json")
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def brief_text(tmp_path: Path) -> str:
    shown = run_belay(tmp_path / "home", "brief", SESSION)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout
