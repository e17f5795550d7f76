"""What the harness asks a model and what it gets back, independent of any provider.

Every adapter (scripted, OpenAI Responses, Anthropic Messages) turns a `ModelRequest` into one
`ModelTurn`. The request is built from the session record, never from a live conversation object,
so a new harness attempt can rebuild it exactly.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class ModelMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_call_id: str | None = None
    # On an assistant message: the calls it made. Provider APIs pair each tool result with the
    # call it answers, so adapters need the ids here, not only in the later "tool" message.
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ToolSchema(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    call_id: str  # the executor's own id of the call (a provider's call id)
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # The operation id the call was recorded under already, by the executor (a managed executor
    # records the remote call before its request); None: the harness derives it from the record
    # (belay.journal.operations), as for every other call.
    operation_id: str | None = None


class ModelRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    system: str
    messages: list[ModelMessage] = Field(default_factory=list)
    tools: list[ToolSchema] = Field(default_factory=list)


class ModelTurn(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model_id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    # Of the input tokens, those the provider read from its prompt cache, when it says so.
    cached_input_tokens: int = 0


@runtime_checkable
class ModelAdapter(Protocol):
    async def complete(self, request: ModelRequest) -> ModelTurn: ...
