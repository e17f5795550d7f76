"""Model adapter for the OpenAI Responses API, on the official `openai` SDK (`belay[openai]`).

The harness rebuilds every request from the session record, so nothing is kept on the provider's
side (`store=False`, no `previous_response_id`): a new harness attempt sends the same input a lost
one would have sent.
"""

from __future__ import annotations

import json
from typing import Any

from openai import AsyncOpenAI

from belay.harness.models.base import ModelMessage, ModelRequest, ModelTurn, ToolCall, ToolSchema


class MalformedToolCall(ValueError):
    """The model returned a function call whose arguments are not a JSON object."""


def tool_definition(tool: ToolSchema) -> dict[str, Any]:
    # strict=False: strict mode would require every property to be listed as required.
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,
    }


def input_items(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The conversation as Responses API input items.

    A tool result whose call is not in the history (the record kept the result but not the call's
    id) becomes a plain user message, because the API refuses an output without its call.
    """
    items: list[dict[str, Any]] = []
    known_calls: set[str] = set()
    for message in messages:
        if message.role == "user":
            items.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            for call in message.tool_calls:
                known_calls.add(call.call_id)
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, sort_keys=True),
                    }
                )
        elif message.tool_call_id is not None and message.tool_call_id in known_calls:
            items.append(
                {"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}
            )
        else:
            items.append(
                {"role": "user", "content": f"Result of tool call {message.tool_call_id}:\n{message.content}"}
            )
    return items


def parse_arguments(name: str, raw: str) -> dict[str, Any]:
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as error:
        raise MalformedToolCall(f"call to {name} has arguments that are not JSON: {raw[:200]!r}") from error
    if not isinstance(arguments, dict):
        raise MalformedToolCall(f"call to {name} has arguments that are not an object: {raw[:200]!r}")
    return arguments


def turn_from_response(response: Any) -> ModelTurn:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            texts.extend(part.text for part in item.content if part.type == "output_text")
        elif item.type == "function_call":
            calls.append(
                ToolCall(
                    call_id=item.call_id, name=item.name, arguments=parse_arguments(item.name, item.arguments)
                )
            )
    usage = response.usage
    details = getattr(usage, "input_tokens_details", None)
    return ModelTurn(
        text="".join(texts),
        tool_calls=calls,
        model_id=response.model,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        cached_input_tokens=(getattr(details, "cached_tokens", 0) or 0) if details else 0,
    )


class OpenAIResponsesAdapter:
    """`ModelAdapter` over `POST {base_url}/responses`. SDK errors (`openai.APIError` and its
    subclasses) propagate after the SDK's own retries."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_output_tokens: int | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens
        # api_key None: the SDK reads OPENAI_API_KEY (a Secret reference in a cluster).
        self.client = AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
        )

    async def complete(self, request: ModelRequest) -> ModelTurn:
        options: dict[str, Any] = {}
        if request.tools:
            options["tools"] = [tool_definition(tool) for tool in request.tools]
        if self.max_output_tokens is not None:
            options["max_output_tokens"] = self.max_output_tokens
        response = await self.client.responses.create(
            model=self.model,
            instructions=request.system,
            input=input_items(request.messages),  # type: ignore[arg-type]
            store=False,
            **options,
        )
        return turn_from_response(response)

    async def close(self) -> None:
        await self.client.close()
