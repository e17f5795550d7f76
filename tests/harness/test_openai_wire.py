"""What Belay sends a self-hosted model server on the `openai` executor, and how it reads the
answers, as a real model once showed them wrong (issue 44): the tool schemas, a call that does not
fit, the prompt's stable prefix, the cached tokens, the output cap and a keyless local server.

The model server here is a loopback stand-in answering in the Responses wire shape a llama.cpp
`llama-server` answers with (docs in /v1/responses; usage with input_tokens_details.cached_tokens).
It decides nothing: it checks only what Belay sends and how Belay reads the answers, never what a
model would do with them."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from belay.api.agentsession import parse_manifest
from belay.harness.context import RECORD_HEADING
from belay.local.runtime import LocalHome, run_local
from tests.belay_cli import run_belay
from tests.harness.test_openai_executor import call, message
from tests.models.test_openai_responses import response_body


@dataclass
class ModelServer:
    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    replies: list[list[dict[str, Any]]] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # cached_tokens reported per reply


@pytest.fixture
async def model_server() -> AsyncIterator[ModelServer]:
    server = ModelServer()

    async def answer(request: web.Request) -> web.Response:
        server.received.append(await request.json())
        server.headers.append(dict(request.headers))
        body = response_body(server.replies.pop(0))
        if server.cached:
            body["usage"]["input_tokens_details"]["cached_tokens"] = server.cached.pop(0)
        return web.json_response(body)

    application = web.Application()
    application.router.add_post("/v1/responses", answer)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    yield server
    await runner.cleanup()


def session(base_url: str, **executor: Any) -> Any:
    return parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "answer"},
            "spec": {
                "request": {"goal": "Write the answer to out/answer.txt and publish it."},
                "executor": {"type": "openai", "model": "local", "baseURL": base_url, **executor},
                "subagents": [{"name": "solo", "deliverable": "answer.txt", "declared": ["out/*"]}],
            },
        }
    )


WORK = [
    [call("call_2", "write_file", {"path": "out/answer.txt", "content": "42\n"})],
    [call("call_3", "publish_deliverable", {"path": "out/answer.txt", "name": "answer.txt"})],
    [message("Published answer.txt.")],
]


async def test_a_call_that_does_not_fit_the_schema_shown_is_an_error_result_the_model_reads(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    # What the real model did: it copied the schema's own words into its arguments.
    bad = {"path": "out/answer.txt", "additionalProperties": True}
    model_server.replies = [[call("call_1", "read_file", bad)], *WORK]
    result = await run_local(LocalHome(tmp_path), session(model_server.url), with_ticket_service=False)
    assert result.completed, result.detail

    for tool in model_server.received[0]["tools"]:
        assert tool["parameters"]["additionalProperties"] is False, tool
    [output] = [i for i in model_server.received[1]["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == "call_1"
    assert "read_file: unexpected argument 'additionalProperties' (it takes only: path)" in output["output"]


async def test_a_call_of_a_tool_that_does_not_exist_is_its_error_result_and_the_session_goes_on(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that makes up a tool's name (or sends a server tool's wire name that decodes to
    nothing) costs that call, never the attempt: before, the harness stopped on a KeyError."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model_server.replies = [
        [call("call_1", "drop_database", {"name": "prod"}), call("call_0", "x__y", {})],
        *WORK,
    ]
    result = await run_local(LocalHome(tmp_path), session(model_server.url), with_ticket_service=False)
    assert result.completed, result.detail

    outputs = {
        i["call_id"]: i["output"]
        for i in model_server.received[1]["input"]
        if i.get("type") == "function_call_output"
    }
    assert "unknown tool 'drop_database'" in outputs["call_1"], outputs
    assert "unknown tool 'x__y'" in outputs["call_0"], outputs


async def test_each_request_begins_with_the_one_before_it_and_what_changes_is_at_the_end(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model_server.replies = [
        [message("Writing it."), call("call_1", "write_file", {"path": "out/answer.txt", "content": "42\n"})],
        *WORK[1:],
    ]
    result = await run_local(LocalHome(tmp_path), session(model_server.url), with_ticket_service=False)
    assert result.completed, result.detail

    sent = model_server.received
    assert len(sent) == 3
    for before, after in itertools.pairwise(sent):
        # Byte for byte: the instructions and the tools, then the history up to what changes.
        assert json.dumps(after["instructions"]) == json.dumps(before["instructions"])
        assert json.dumps(after["tools"]) == json.dumps(before["tools"])
        kept = before["input"][:-1]
        assert json.dumps(after["input"][: len(kept)]) == json.dumps(kept)
        assert len(after["input"]) > len(before["input"])
    for request in sent:
        last = request["input"][-1]
        assert last["role"] == "user" and last["content"].startswith(RECORD_HEADING), last
        assert RECORD_HEADING not in request["instructions"]
        assert sum(RECORD_HEADING in str(item.get("content", "")) for item in request["input"]) == 1


async def test_the_cached_input_tokens_are_recorded_per_turn_and_shown_by_belay_brief(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model_server.replies = [
        [call("call_1", "write_file", {"path": "out/answer.txt", "content": "42\n"})],
        *WORK[1:],
    ]
    model_server.cached = [0, 300, 320]  # of 321 input tokens each (response_body's usage)
    result = await run_local(LocalHome(tmp_path), session(model_server.url), with_ticket_service=False)
    assert result.completed, result.detail

    store = LocalHome(tmp_path).open_event_store()
    events = await store.read("answer")
    await store.close()
    turns = [e.payload for e in events if e.type == "model_output"]
    assert [(t.input_tokens, t.cached_input_tokens) for t in turns] == [(321, 0), (321, 300), (321, 320)]

    shown = run_belay(tmp_path, "brief", "answer", "--json")
    assert shown.returncode == 0, shown.stderr
    usage = json.loads(shown.stdout)["usage"]
    assert (usage["input_tokens"], usage["cached_input_tokens"]) == (963, 620)
    page = run_belay(tmp_path, "brief", "answer")
    assert (
        "963 input tokens" in page.stdout
        and "620 input tokens (64%) read from the provider's prompt cache" in page.stdout
    )


async def test_executor_max_output_tokens_is_sent_with_every_request(
    model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local server's own default is no limit at all (llama-server's `-n -1`).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model_server.replies = [
        [call("call_1", "write_file", {"path": "out/answer.txt", "content": "42\n"})],
        *WORK[1:],
    ]
    manifest = session(model_server.url, maxOutputTokens=256)
    result = await run_local(LocalHome(tmp_path), manifest, with_ticket_service=False)
    assert result.completed, result.detail
    assert [r.get("max_output_tokens") for r in model_server.received] == [256, 256, 256]
