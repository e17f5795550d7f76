"""A session of one call followed by a step that must still run: what the security tests of a
single hostile argument share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from belay.journal.events import Event, ToolResult
from tests.belay_cli import completed, read_events, run_belay
from tests.scripted import write_scripted_session


def run_one_call(
    tmp_path: Path, session: str, goal: str, tool: str, arguments: dict[str, Any]
) -> tuple[Path, list[Event], ToolResult]:
    """Run subagent `a`'s step `call` (the one call) then its step `after` to the end; returns the
    home, the record and the call's one result. The session must have completed."""
    after = {"tool": "run_command", "arguments": {"command": "true"}}
    steps = [
        {"id": "call", "title": "call", "actions": [{"tool": tool, "arguments": arguments}]},
        {"id": "after", "title": "after", "actions": [after]},
    ]
    manifest = write_scripted_session(tmp_path / "session", session, goal, [{"name": "a"}], {"a": steps})
    home = tmp_path / "home"
    result = run_belay(home, "run", "--quiet", str(manifest))
    events = read_events(home, session)
    assert result.returncode == 0, result.stderr
    assert completed(events)
    [answer] = [
        e.payload
        for e in events
        if isinstance(e.payload, ToolResult) and e.payload.operation_id == "a.call.1"
    ]
    return home, events, answer
