"""The harness with the OpenAI Responses adapter (official SDK) against a loopback stand-in that
speaks the Responses wire format: tool calls are recorded and dispatched, and each later request
pairs every function_call with its function_call_output."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from belay.api.agentsession import parse_manifest
from belay.local.runtime import LocalHome, run_local
from tests.models.test_openai_responses import response_body

MODEL = "gpt-test-2026-01-01"


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


REPLIES = [
    [
        message("Writing the answer."),
        call("call_1", "write_file", {"path": "out/answer.txt", "content": "42\n"}),
    ],
    [call("call_2", "publish_deliverable", {"path": "out/answer.txt", "name": "answer.txt"})],
    [message("Published answer.txt.")],
]


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


async def test_a_session_on_the_openai_adapter(
    provider: tuple[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, received = provider
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "answer"},
            "spec": {
                "request": {"goal": "Write the answer to out/answer.txt and publish it."},
                "executor": {"type": "openai", "model": "gpt-test", "baseURL": base_url},
                "subagents": [{"name": "solo", "deliverable": "answer.txt", "declared": ["out/*"]}],
            },
        }
    )
    result = await run_local(LocalHome(tmp_path), session, with_ticket_service=False)
    assert result.completed, result.detail

    assert [r["model"] for r in received] == ["gpt-test"] * 3
    assert "Write the answer" in received[0]["instructions"] + json.dumps(received[0]["input"])
    assert {t["name"] for t in received[0]["tools"]} >= {"write_file", "publish_deliverable", "create_ticket"}
    third = received[2]["input"]
    calls = [i["call_id"] for i in third if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in third if i.get("type") == "function_call_output"]
    assert calls == outputs == ["call_1", "call_2"]  # the provider's own ids, as it gave them

    store = LocalHome(tmp_path).open_event_store()
    events = await store.read("answer")
    await store.close()
    requests = [e.payload for e in events if e.type == "tool_request"]
    # Outside any step (the model framed none): `<subagent>.<k>`, the provider's id beside it.
    assert [(r.operation_id, r.provider_call_id, r.tool) for r in requests] == [
        ("solo.1", "call_1", "write_file"),
        ("solo.2", "call_2", "publish_deliverable"),
    ]
    [artifact] = [e.payload for e in events if e.type == "artifact"]
    assert artifact.name == "answer.txt" and artifact.deliverable
    assert LocalHome(tmp_path).open_artifact_store().get(artifact.ref.sha256) == b"42\n"
    assert {e.actor.model_id for e in events if e.type == "tool_result"} == {MODEL}
