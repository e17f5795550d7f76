"""A scripted session whose subagent works through the test tracker's MCP server in its sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.scripted import write_scripted_session

SERVER = Path(__file__).with_name("server")  # holds tracker_server.py
SESSION = "mcp-tracker"
# The operation ids the harness derives for the plan's calls (belay.journal.operations).
FIND, OPEN, LABEL = "worker.file.1", "worker.file.2", "worker.file.3"


def tracker_session(
    directory: Path,
    tracker_url: str,
    actions: list[dict[str, Any]] | None = None,
    resources: dict[str, Any] | None = None,
    **server: Any,
) -> Path:
    """The session's manifest: one subagent, the tracker's MCP server (its script an input of the
    workspace) with `find_issues` as its probe, and one step that searches, opens and labels
    (or does `actions`)."""
    step = {
        "id": "file",
        "title": "File the crash in the tracker",
        "actions": actions
        or [
            {"tool": "tracker.find_issues", "arguments": {"title": "parser crash"}},
            {"tool": "tracker.open_issue", "arguments": {"title": "parser crash", "body": "values with '='"}},
            {"tool": "tracker.label_issue", "arguments": {"issue": "ISSUE-1", "label": "bug"}},
        ],
    }
    tool_server = {
        "name": "tracker",
        "command": ["python", "tools/tracker_server.py", tracker_url],
        "probe": "find_issues",
        **server,
    }
    subagent = {
        "name": "worker",
        # The tracker is outside the sandbox, on loopback: reached through the host's network.
        "networkProfile": "internet",
        "inputs": [{"source": str(SERVER), "target": "tools", "hostPath": True}],
        "toolServers": [tool_server],
        **({"resources": resources} if resources else {}),
    }
    return write_scripted_session(directory, SESSION, "file the parser crash", [subagent], {"worker": [step]})
