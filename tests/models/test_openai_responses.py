from __future__ import annotations

import json

import openai
import pytest

from belay.harness.models.base import ModelMessage, ModelRequest, ToolCall, ToolSchema
from belay.harness.models.openai import MalformedToolCall, OpenAIResponsesAdapter
from tests.models.conftest import ProviderStandIn

READ_FILE = ToolSchema(
    name="read_file",
    description="Read a file from the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def response_body(output: list[dict], model: str = "gpt-test-2026-01-01") -> dict:
    """A Responses API `response` object as the service returns it."""
    return {
        "id": "resp_0123456789",
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": "You fix parsers.",
        "max_output_tokens": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 321,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 45,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 366,
        },
        "user": None,
        "metadata": {},
    }


TEXT_AND_CALL = [
    {
        "type": "message",
        "id": "msg_01",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Reading the parser first.", "annotations": []}],
    },
    {
        "type": "function_call",
        "id": "fc_01",
        "call_id": "call_abc123",
        "name": "read_file",
        "arguments": '{"path": "confparse/parser.py"}',
        "status": "completed",
    },
]


async def test_request_shape_and_a_tool_call_in_the_reply(provider: ProviderStandIn) -> None:
    provider.replies.append((200, response_body(TEXT_AND_CALL)))
    adapter = OpenAIResponsesAdapter("gpt-test", base_url=f"{provider.url}/v1", api_key="sk-test")
    try:
        turn = await adapter.complete(
            ModelRequest(
                system="You fix parsers.",
                messages=[ModelMessage(role="user", content="Fix the crash on '='.")],
                tools=[READ_FILE],
            )
        )
    finally:
        await adapter.close()

    assert turn.text == "Reading the parser first."
    assert turn.tool_calls == [
        ToolCall(call_id="call_abc123", name="read_file", arguments={"path": "confparse/parser.py"})
    ]
    assert (turn.model_id, turn.input_tokens, turn.output_tokens) == ("gpt-test-2026-01-01", 321, 45)

    [sent] = provider.requests
    assert sent.path == "/v1/responses"
    assert sent.headers["Authorization"] == "Bearer sk-test"
    assert sent.body["model"] == "gpt-test"
    assert sent.body["instructions"] == "You fix parsers."
    assert sent.body["input"] == [{"role": "user", "content": "Fix the crash on '='."}]
    assert sent.body["store"] is False
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file from the workspace.",
            "parameters": READ_FILE.parameters,
            "strict": False,
        }
    ]


async def test_history_pairs_each_tool_output_with_its_call(provider: ProviderStandIn) -> None:
    final = [
        {
            "type": "message",
            "id": "msg_02",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        }
    ]
    provider.replies.append((200, response_body(final)))
    adapter = OpenAIResponsesAdapter("gpt-test", base_url=f"{provider.url}/v1", api_key="sk-test")
    call = ToolCall(call_id="call_abc123", name="read_file", arguments={"path": "a.txt"})
    try:
        turn = await adapter.complete(
            ModelRequest(
                system="s",
                messages=[
                    ModelMessage(role="user", content="go"),
                    ModelMessage(role="assistant", content="Reading.", tool_calls=[call]),
                    ModelMessage(role="tool", content='{"content": "A"}', tool_call_id="call_abc123"),
                    ModelMessage(role="tool", content="orphan result", tool_call_id="call_lost"),
                ],
                tools=[READ_FILE],
            )
        )
    finally:
        await adapter.close()
    assert turn.text == "Done."
    assert turn.tool_calls == []
    assert provider.requests[0].body["input"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Reading."},
        {
            "type": "function_call",
            "call_id": "call_abc123",
            "name": "read_file",
            "arguments": '{"path": "a.txt"}',
        },
        {"type": "function_call_output", "call_id": "call_abc123", "output": '{"content": "A"}'},
        {"role": "user", "content": "Result of tool call call_lost:\norphan result"},
    ]
    assert json.loads(provider.requests[0].body["input"][2]["arguments"]) == call.arguments


async def test_malformed_arguments_are_a_clear_error(provider: ProviderStandIn) -> None:
    broken = [dict(TEXT_AND_CALL[1], arguments='{"path": ')]
    provider.replies.append((200, response_body(broken)))
    adapter = OpenAIResponsesAdapter("gpt-test", base_url=f"{provider.url}/v1", api_key="sk-test")
    try:
        with pytest.raises(MalformedToolCall, match="read_file"):
            await adapter.complete(
                ModelRequest(system="s", messages=[ModelMessage(role="user", content="x")])
            )
    finally:
        await adapter.close()


async def test_provider_errors_surface_as_sdk_errors(provider: ProviderStandIn) -> None:
    error = {
        "error": {
            "message": "Incorrect API key provided",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    provider.replies.append((401, error))
    adapter = OpenAIResponsesAdapter(
        "gpt-test", base_url=f"{provider.url}/v1", api_key="sk-bad", max_retries=0
    )
    try:
        with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
            await adapter.complete(
                ModelRequest(system="s", messages=[ModelMessage(role="user", content="x")])
            )
    finally:
        await adapter.close()
    assert "tools" not in provider.requests[0].body
