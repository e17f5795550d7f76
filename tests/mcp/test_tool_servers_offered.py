"""A self-hosted model (the OpenAI Responses adapter, against a loopback stand-in of the API) is
offered the tools of its subagent's MCP server beside the built-ins, under names the API takes,
and its call of one runs as `<server>.<tool>` under the tool's class."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from belay.api.agentsession import parse_manifest
from belay.harness.models.base import ToolSchema
from belay.harness.tools import WIRE_NAME, offered, wire_name
from belay.journal.events import EffectClass
from belay.local.runtime import LocalHome, run_local
from tests.harness.test_openai_executor import call, message
from tests.mcp.session import SESSION, tracker_session
from tests.mcp.tracker_backend import running_tracker
from tests.models.test_openai_responses import response_body

MODEL = "gpt-test-2026-01-01"
OPEN = wire_name("tracker.open_issue")
REPLIES = [
    [call("call_1", OPEN, {"title": "parser crash", "body": "values with '='"})],
    [message("Filed it.")],
]


def test_a_server_tool_has_a_name_both_apis_take_and_no_two_share_one() -> None:
    assert wire_name("tracker.open_issue") == "tracker__open_issue"
    assert wire_name("run_command") == "run_command"
    names = [
        "tracker.open_issue",
        "tracker.open.issue",
        "tracker.open-issue",
        "t.a_2e_b",
        "t.a.b",
        "x." + "y" * 100,
    ]
    _, named = offered([ToolSchema(name=name, description="") for name in names])
    assert all(WIRE_NAME.match(wire) for wire in named)
    assert sorted(named.values()) == sorted(names)  # one name each, none shared


@pytest.fixture
async def provider() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    replies = [response_body(output, model=MODEL) for output in REPLIES]

    async def answer(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response(replies.pop(0))

    application = web.Application()
    application.router.add_post("/v1/responses", answer)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", received
    await runner.cleanup()


async def test_the_model_is_offered_the_servers_tools_and_its_call_runs_under_the_tools_class(
    provider: tuple[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, received = provider
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with running_tracker(tmp_path / "calls.log") as tracker:
        manifest = yaml.safe_load(tracker_session(tmp_path / "session", tracker.url).read_text())
        manifest["spec"]["executor"] = {"type": "openai", "model": "gpt-test", "baseURL": base_url}
        result = await run_local(
            LocalHome(tmp_path / "home"), parse_manifest(manifest), with_ticket_service=False
        )
        assert result.completed, result.detail
        assert tracker.opened == 1
    tools = {tool["name"]: tool for tool in received[0]["tools"]}
    assert {"write_file", OPEN, wire_name("tracker.find_issues"), wire_name("tracker.label_issue")} <= set(
        tools
    )
    assert tools[OPEN]["parameters"]["required"] == ["title"]
    # The call is shown to the model again under the name it was offered.
    assert [i["name"] for i in received[1]["input"] if i.get("type") == "function_call"] == [OPEN]
    store = LocalHome(tmp_path / "home").open_event_store()
    events = await store.read(SESSION)
    await store.close()
    [request] = [e.payload for e in events if e.type == "tool_request"]
    assert (request.tool, request.effect, request.provider_call_id) == (
        "tracker.open_issue",
        EffectClass.UNSAFE,
        "call_1",
    )
