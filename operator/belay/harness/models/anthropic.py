"""Model adapter for the Anthropic Messages API, on the official `anthropic` SDK
(`belay[anthropic]`)."""

from __future__ import annotations

from typing import Any

from anthropic import AsyncAnthropic

from belay.harness.models.base import ModelMessage, ModelRequest, ModelTurn, ToolCall, ToolSchema

DEFAULT_MAX_TOKENS = 4096


class MalformedToolCall(ValueError):
    """The model returned a tool_use block whose input is not a JSON object."""


def tool_definition(tool: ToolSchema) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def message_blocks(message: ModelMessage, known_calls: set[str]) -> tuple[str, list[dict[str, Any]]]:
    """One message as (role, content blocks)."""
    if message.role == "user":
        return "user", [{"type": "text", "text": message.content}] if message.content else []
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
        for call in message.tool_calls:
            known_calls.add(call.call_id)
            blocks.append(
                {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}
            )
        return "assistant", blocks
    if message.tool_call_id is not None and message.tool_call_id in known_calls:
        return "user", [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
        ]
    # A result whose call is not in the history: the API refuses a tool_result without its tool_use.
    return "user", [
        {"type": "text", "text": f"Result of tool call {message.tool_call_id}:\n{message.content}"}
    ]


def wire_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The conversation as Messages API messages. Roles must alternate, so consecutive messages of
    one role (several tool results after one turn) are merged into one message's blocks."""
    merged: list[dict[str, Any]] = []
    known_calls: set[str] = set()
    for message in messages:
        role, blocks = message_blocks(message, known_calls)
        if not blocks:
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    return merged


def turn_from_message(message: Any) -> ModelTurn:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            if not isinstance(block.input, dict):
                raise MalformedToolCall(
                    f"tool_use {block.name} has input that is not an object: {block.input!r}"
                )
            calls.append(ToolCall(call_id=block.id, name=block.name, arguments=block.input))
    usage = message.usage
    # The Messages API counts the prompt in three parts: read from its cache, written to it, and
    # neither (`input_tokens`); the turn's input is their sum, as the Responses API counts it.
    cached = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return ModelTurn(
        text="".join(texts),
        tool_calls=calls,
        model_id=message.model,
        input_tokens=usage.input_tokens + cached + written,
        output_tokens=usage.output_tokens,
        cached_input_tokens=cached,
    )


class AnthropicMessagesAdapter:
    """`ModelAdapter` over `POST {base_url}/v1/messages`. SDK errors (`anthropic.APIError` and its
    subclasses) propagate after the SDK's own retries."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout_s: float = 300.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        # api_key None: the SDK reads ANTHROPIC_API_KEY (a Secret reference in a cluster).
        self.client = AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
        )

    async def complete(self, request: ModelRequest) -> ModelTurn:
        options: dict[str, Any] = {}
        if request.tools:
            options["tools"] = [tool_definition(tool) for tool in request.tools]
        if request.system:
            options["system"] = request.system
        message = await self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            messages=wire_messages(request.messages),  # type: ignore[arg-type]
            **options,
        )
        return turn_from_message(message)

    async def close(self) -> None:
        await self.client.close()
