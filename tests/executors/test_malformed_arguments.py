"""A call whose arguments do not fit its tool's schema (missing, of the wrong type, not JSON, or for
a tool that does not exist) is never run: it is recorded as refused, answered with an error result
(`success: false` / `is_error: true`) naming what is wrong, and the session goes on to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from belay.harness.models.base import ToolCall
from belay.journal.events import RemoteEvent, ToolRequestEvent
from belay.local.runtime import LocalHome, run_local
from tests.executors.documented_servers import (
    RAW_ARGUMENTS,
    AnthropicManagedServer,
    OpenAIAgentsServer,
    serving,
)
from tests.executors.example import ENVIRONMENT, one_subagent_session

BAD = [
    (ToolCall(call_id="-", name="read_file", arguments={}), "missing required argument path"),
    (ToolCall(call_id="-", name="run_command", arguments={"command": 5}), "'command' must be of type string"),
    (ToolCall(call_id="-", name="drop_database", arguments={"name": "prod"}), "unknown tool 'drop_database'"),
    (
        ToolCall(call_id="-", name="record_note", arguments={"note_id": "n", "text": "t", "evidence": "x"}),
        "'evidence' must be of type array",
    ),
]
NOT_JSON = (ToolCall(call_id="-", name="read_file", arguments={RAW_ARGUMENTS: "{path: "}), "not valid JSON")
GOOD = ToolCall(call_id="-", name="write_file", arguments={"path": "out/ok.txt", "content": "fine\n"})


def manifest(executor: str) -> Any:
    return one_subagent_session(
        "malformed", executor, "Call tools with arguments that do not fit, then one that does."
    )


SERVERS = {"openai-agents": (OpenAIAgentsServer, "/v1"), "anthropic-managed": (AnthropicManagedServer, "")}


@pytest.mark.parametrize("executor", sorted(SERVERS))
async def test_a_call_that_does_not_fit_gets_an_error_result_and_the_session_goes_on(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anthropic sends arguments as an object: it cannot send text that is not JSON.
    bad = [*BAD, NOT_JSON] if executor == "openai-agents" else BAD
    server_class, path = SERVERS[executor]
    server = server_class([call for call, _ in bad] + [GOOD])
    base_url_variable, key_variable = ENVIRONMENT[executor]
    async with serving(server.app(), path) as base_url:
        monkeypatch.setenv(base_url_variable, base_url)
        monkeypatch.setenv(key_variable, "sk-test")
        recorded: list[Any] = []
        result = await run_local(LocalHome(tmp_path), manifest(executor), on_event=recorded.append)
    assert result.completed, result.detail

    refused = [e.payload for e in recorded if isinstance(e, RemoteEvent) and e.payload.kind == "call_refused"]
    assert [p.tool for p in refused] == [call.name for call, _ in bad]
    for payload, (_, why) in zip(refused, bad, strict=True):
        assert why in payload.detail, payload.detail
    requested = [e.payload for e in recorded if isinstance(e, ToolRequestEvent)]
    assert [r.tool for r in requested] == ["write_file"]  # only the call that fits ever ran

    [session] = server.sessions.values()
    answers = session.agent.received
    assert len(answers) == len(bad) + 1
    if executor == "openai-agents":
        assert [a["success"] for a in answers] == [False] * len(bad) + [True]
        texts = [a.get("error") or "" for a in answers[:-1]]
    else:
        assert [a["is_error"] for a in answers] == [True] * len(bad) + [False]
        texts = [a["content"][0]["text"] for a in answers[:-1]]
    for text, (_, why) in zip(texts, bad, strict=True):
        assert why in text
