"""The `self-hosted` executor: Belay's own model loop.

Each turn rebuilds the model's context from the record (the journal's context projection plus the
subagent's own recent calls and results), asks one model adapter (a scripted plan, OpenAI
Responses, Anthropic Messages), and returns its calls. It holds nothing remotely and nothing in
memory the record does not hold, so starting and resuming are the same thing, and results need no
delivery: the next context is read from the record that holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from belay.api.agentsession import AgentSession
from belay.executors.base import Decision, ExecutorContext, RemoteResource, ToolOutcome
from belay.harness.context import build_model_request
from belay.harness.models.base import ModelAdapter
from belay.journal.context import build_context
from belay.journal.state import SessionState

KIND = "self-hosted"
SELF_HOSTED_TYPES = ("scripted", "openai", "anthropic")
CONTEXT_BUDGET_TOKENS = 8000
CONTEXT_TAIL_EVENTS = 200

ModelFactory = Callable[[ExecutorContext], ModelAdapter]


class SelfHostedExecutor:
    kind = KIND

    def __init__(self, context: ExecutorContext, model: ModelAdapter) -> None:
        self.context = context
        self.model = model

    async def start(self, state: SessionState) -> None:
        return None

    async def resume(self, state: SessionState) -> None:
        return None

    async def next_actions(self, state: SessionState) -> Decision:
        ctx = self.context
        sub = ctx.subagent
        tail = await ctx.store.tail(ctx.session.session_id, CONTEXT_TAIL_EVENTS)
        shared = await build_context(ctx.store, ctx.session.session_id, state, CONTEXT_BUDGET_TOKENS)
        request = build_model_request(
            state, tail, sub.name, sub.role, sub.deliverable, record_context=shared.to_text()
        )
        turn = await self.model.complete(request)
        return Decision(
            text=turn.text,
            tool_calls=list(turn.tool_calls),
            model_id=turn.model_id,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
        )

    async def deliver_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        return None

    async def interrupt(self) -> None:
        return None

    async def remote_resources(self) -> list[RemoteResource]:
        return []

    async def close(self) -> None:
        return None


def model_factory_for(session: AgentSession) -> ModelFactory:
    """The model adapter each subagent's self-hosted executor asks."""
    executor = session.spec.executor
    if executor.type == "scripted":
        from belay.harness.models.scripted import ScriptedModel, load_plan

        plan = load_plan(Path(executor.plan or ""))
        return lambda ctx: ScriptedModel(plan, ctx.subagent.name, ctx.read_state)
    if executor.type == "openai":
        from belay.harness.models.openai import OpenAIResponsesAdapter

        return lambda ctx: OpenAIResponsesAdapter(executor.model or "", base_url=executor.base_url)
    if executor.type == "anthropic":
        from belay.harness.models.anthropic import AnthropicMessagesAdapter

        return lambda ctx: AnthropicMessagesAdapter(executor.model or "", base_url=executor.base_url)
    raise ValueError(f"executor type {executor.type!r} is not a self-hosted model")


def initial_model_id(session: AgentSession) -> str:
    executor = session.spec.executor
    if executor.type == "scripted":
        from belay.harness.models.scripted import SCRIPTED_MODEL_ID

        return SCRIPTED_MODEL_ID
    return executor.model or executor.type
