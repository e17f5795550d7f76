"""A tracker's MCP server over stdio, written with the official `mcp` SDK: the tool server the MCP
tests run inside a subagent's sandbox, as `python tracker_server.py URL`.

It fronts a tracker (`tests.mcp.tracker_backend`, at URL), as a real server fronts a real one: the
sandbox's walls let it write nothing but its workspace, which a recovery replaces, so what it did
is kept where the world keeps it. `open_issue` is unsafe (no annotation says otherwise): the
tracker counts each call in its file before answering. `find_issues` (read-only) is its probe;
`label_issue` is idempotent. The tracker says which tools are offered, so a test can take one away
between two attempts.
"""

from __future__ import annotations

import json
import resource
import sys
import urllib.parse
import urllib.request
from typing import Any

from mcp.types import ToolAnnotations

from mcp.server import MCPServer

TRACKER = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:1"
# What a server says on stderr stays in its sandbox (a test looks for it on the host).
print("tracker-server-" + "stderr-marker " * 1000, file=sys.stderr, flush=True)
server = MCPServer("belay-test-tracker", version="1.4.2")


def tracker(path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(TRACKER + path, data=data, timeout=600) as answer:
        return json.loads(answer.read())


OFFERED = set(tracker("/offered"))

if "open_issue" in OFFERED:

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def open_issue(title: str, body: str = "") -> dict[str, str]:
        """Open an issue in the tracker. Not deduplicated: each call opens one more."""
        return dict(tracker("/open", {"title": title, "body": body}))


if "find_issues" in OFFERED:

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def find_issues(title: str) -> dict[str, list[dict[str, str]]]:
        """The issues whose title is the one given."""
        return {"issues": tracker("/find?" + urllib.parse.urlencode({"title": title}))}


if "label_issue" in OFFERED:

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    def label_issue(issue: str, label: str) -> dict[str, str]:
        """Set an issue's label (the same label twice changes nothing)."""
        return {"issue": issue, "label": label}


if "file_size_limit" in OFFERED:

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def file_size_limit() -> dict[str, int]:
        """The largest file this server may write (its RLIMIT_FSIZE; -1: none)."""
        return {"bytes": resource.getrlimit(resource.RLIMIT_FSIZE)[0]}


if __name__ == "__main__":
    server.run("stdio")
