from __future__ import annotations

import anthropic
import pytest

from belay.harness.models.anthropic import AnthropicMessagesAdapter
from belay.harness.models.base import ModelMessage, ModelRequest, ToolCall, ToolSchema
from tests.models.conftest import ProviderStandIn

RUN_COMMAND = ToolSchema(
    name="run_command",
    description="Run a command in the sandbox.",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer"}},
        "required": ["command"],
    },
)


def message_body(content: list[dict], stop_reason: str = "tool_use") -> dict:
    """A Messages API `message` object as the service returns it."""
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-20260101",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 512,
            "output_tokens": 64,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


async def test_request_shape_and_a_tool_call_in_the_reply(provider: ProviderStandIn) -> None:
    provider.replies.append(
        (
            200,
            message_body(
                [
                    {"type": "text", "text": "Let me reproduce it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A09q90qw90lq917835lq9",
                        "name": "run_command",
                        "input": {"command": "python -m unittest", "timeout_s": 60},
                    },
                ]
            ),
        )
    )
    adapter = AnthropicMessagesAdapter(
        "claude-test", base_url=provider.url, api_key="sk-ant-test", max_tokens=1024
    )
    try:
        turn = await adapter.complete(
            ModelRequest(
                system="You fix parsers.",
                messages=[ModelMessage(role="user", content="Fix the crash on '='.")],
                tools=[RUN_COMMAND],
            )
        )
    finally:
        await adapter.close()

    assert turn.text == "Let me reproduce it."
    assert turn.tool_calls == [
        ToolCall(
            call_id="toolu_01A09q90qw90lq917835lq9",
            name="run_command",
            arguments={"command": "python -m unittest", "timeout_s": 60},
        )
    ]
    assert (turn.model_id, turn.input_tokens, turn.output_tokens) == ("claude-test-20260101", 512, 64)

    [sent] = provider.requests
    assert sent.path == "/v1/messages"
    # The SDK sends the key as x-api-key or, in recent versions, as a bearer token.
    assert "sk-ant-test" in (
        sent.headers.get("x-api-key"),
        sent.headers.get("Authorization", "").removeprefix("Bearer "),
    )
    assert sent.headers["anthropic-version"]
    assert sent.body["model"] == "claude-test"
    assert sent.body["max_tokens"] == 1024
    assert sent.body["system"] == "You fix parsers."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Fix the crash on '='."}]}
    ]
    assert sent.body["tools"] == [
        {
            "name": "run_command",
            "description": "Run a command in the sandbox.",
            "input_schema": RUN_COMMAND.parameters,
        }
    ]


async def test_history_alternates_roles_and_pairs_tool_results(provider: ProviderStandIn) -> None:
    provider.replies.append(
        (200, message_body([{"type": "text", "text": "Both ran."}], stop_reason="end_turn"))
    )
    adapter = AnthropicMessagesAdapter("claude-test", base_url=provider.url, api_key="sk-ant-test")
    first = ToolCall(call_id="toolu_1", name="run_command", arguments={"command": "ls"})
    second = ToolCall(call_id="toolu_2", name="run_command", arguments={"command": "pwd"})
    try:
        turn = await adapter.complete(
            ModelRequest(
                system="s",
                messages=[
                    ModelMessage(role="user", content="go"),
                    ModelMessage(role="assistant", content="", tool_calls=[first, second]),
                    ModelMessage(role="tool", content="a.txt", tool_call_id="toolu_1"),
                    ModelMessage(role="tool", content="/ws", tool_call_id="toolu_2"),
                    ModelMessage(role="tool", content="lost", tool_call_id="toolu_gone"),
                    ModelMessage(role="user", content="continue"),
                ],
                tools=[RUN_COMMAND],
            )
        )
    finally:
        await adapter.close()
    assert (turn.text, turn.tool_calls) == ("Both ran.", [])
    assert provider.requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "run_command", "input": {"command": "pwd"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "/ws"},
                {"type": "text", "text": "Result of tool call toolu_gone:\nlost"},
                {"type": "text", "text": "continue"},
            ],
        },
    ]


async def test_provider_errors_surface_as_sdk_errors(provider: ProviderStandIn) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    provider.replies.append((529, error))
    adapter = AnthropicMessagesAdapter(
        "claude-test", base_url=provider.url, api_key="sk-ant-test", max_retries=0
    )
    try:
        with pytest.raises(anthropic.APIStatusError, match="Overloaded") as caught:
            await adapter.complete(ModelRequest(system="", messages=[ModelMessage(role="user", content="x")]))
    finally:
        await adapter.close()
    assert caught.value.status_code == 529
    assert "system" not in provider.requests[0].body


async def test_the_prompt_cache_counts_are_read_into_the_turn(provider: ProviderStandIn) -> None:
    # The Messages API counts what its cache read and wrote apart from `input_tokens`.
    body = message_body([{"type": "text", "text": "Done."}], stop_reason="end_turn")
    body["usage"].update(
        {"input_tokens": 12, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 400}
    )
    provider.replies.append((200, body))
    adapter = AnthropicMessagesAdapter("claude-test", base_url=provider.url, api_key="sk-ant-test")
    try:
        turn = await adapter.complete(
            ModelRequest(system="s", messages=[ModelMessage(role="user", content="go")])
        )
    finally:
        await adapter.close()
    assert (turn.input_tokens, turn.cached_input_tokens, turn.output_tokens) == (512, 400, 64)


async def test_executor_max_output_tokens_is_the_max_tokens_sent(
    provider: ProviderStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    from belay.api.agentsession import parse_manifest
    from belay.executors.self_hosted import model_factory_for

    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "capped"},
            "spec": {
                "request": {"goal": "Say done."},
                "executor": {
                    "type": "anthropic",
                    "model": "claude-test",
                    "baseURL": provider.url,
                    "maxOutputTokens": 300,
                },
                "subagents": [{"name": "solo"}],
            },
        }
    )
    provider.replies.append((200, message_body([{"type": "text", "text": "Done."}], stop_reason="end_turn")))
    adapter = model_factory_for(session)(None)  # type: ignore[arg-type]  # the adapter needs no context
    try:
        await adapter.complete(ModelRequest(system="s", messages=[ModelMessage(role="user", content="go")]))
    finally:
        await adapter.close()  # type: ignore[attr-defined]
    assert provider.requests[0].body["max_tokens"] == 300
