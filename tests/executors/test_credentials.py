"""A provider's key never reaches a sandbox, the record, a log, the briefing or the status.

A key is planted in the environment `belay run` gets (with the base URL of a documented-wire-format
server), and the remote agent has the sandbox print its whole environment. The key reaches the
provider, and nowhere in the session's home (the record, the harness log, the sandboxes, the
artifacts) nor in the briefing or the status. The same run with the sandbox's clean environment
removed (the wall) finds the key in the record: the test can fail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import belay.sandbox.local
from belay.api.agentsession import AgentSession
from belay.harness.models.base import ToolCall
from belay.harness.redaction import REDACTION_ENV
from belay.journal.state import fold
from belay.local.runtime import LocalHome, read_state, run_local
from belay.sandbox.protocol import INSTANCE_ENV
from belay.sandbox.walls import WALLS_ENV
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_json, render_text
from belay.views.status.build import session_status
from tests.executors.documented_servers import OpenAIAgentsServer, serving
from tests.executors.example import one_subagent_session

PLANTED = "sk-planted-" + "0123456789abcdef" * 2
CALLS = [
    ToolCall(
        call_id="-", name="run_command", arguments={"command": "env; tr '\\0' '\\n' < /proc/self/environ"}
    ),
    ToolCall(call_id="-", name="write_file", arguments={"path": "out/env-seen.txt", "content": "done\n"}),
    ToolCall(
        call_id="-", name="publish_deliverable", arguments={"path": "out/env-seen.txt", "name": "env.txt"}
    ),
]
SESSION = one_subagent_session("planted-key", "openai-agents", "Print the sandbox's environment.", "env.txt")


def where_the_key_is(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and PLANTED.encode() in path.read_bytes():
            found.append(str(path.relative_to(root)))
    return found


async def run_with_planted_key(
    home: LocalHome, monkeypatch: pytest.MonkeyPatch, session: AgentSession = SESSION
) -> OpenAIAgentsServer:
    server = OpenAIAgentsServer(list(CALLS))
    async with serving(server.app(), "/v1") as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
        result = await run_local(home, session)
    assert result.completed, result.detail
    return server


async def test_the_key_reaches_the_provider_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = LocalHome(tmp_path / "home")
    server = await run_with_planted_key(home, monkeypatch)
    assert PLANTED in server.keys_seen  # it was in use
    state, events = await read_state(home, SESSION.session_id)
    printed = [e for e in events if e.type == "tool_result" and "PATH=" in str(e.payload.output)]
    assert printed, "the sandbox printed its environment into the record"
    assert where_the_key_is(home.root) == []
    brief = briefing(fold(events))
    assert PLANTED not in render_text(brief) + render_json(brief)
    assert PLANTED not in session_status(state).model_dump_json()


async def test_without_the_walls_the_key_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The walls removed: no bubblewrap (whose clean environment would hold), a sandbox that
    # inherits the harness's whole environment, and tool results recorded as they are.
    monkeypatch.setenv(WALLS_ENV, "off")
    monkeypatch.setenv(REDACTION_ENV, "off")
    monkeypatch.setattr(
        belay.sandbox.local, "sandbox_environment", lambda instance: {**os.environ, INSTANCE_ENV: instance}
    )
    unwalled = one_subagent_session(
        "planted-key", "openai-agents", "Print the sandbox's environment.", "env.txt", isolation="best-effort"
    )
    home = LocalHome(tmp_path / "home")
    await run_with_planted_key(home, monkeypatch, unwalled)
    assert "events.db" in " ".join(where_the_key_is(home.root))
