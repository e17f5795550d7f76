"""The `self-hosted` executor: Belay's own model loop.

Each turn rebuilds the model's context from the record (the journal's context projection plus the
subagent's own recent calls and results), asks one model adapter (a scripted plan, OpenAI
Responses, Anthropic Messages), and returns its calls. It holds nothing remotely and nothing in
memory the record does not hold, so starting and resuming are the same thing, and results need no
delivery: the next context is read from the record that holds them.

Before building the context it compacts when the record has grown past the window
(`belay.journal.compaction`): a `summary` event whose text the model writes (OpenAI, Anthropic) or
that is made from the events (scripted). The subagents of one attempt share one lock for it, so
they record one summary, not one each.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from belay.api.agentsession import AgentSession
from belay.executors.endpoints import self_hosted_key
from belay.harness.context import build_model_request
from belay.harness.executor import Decision, ExecutorContext, RemoteResource, ToolOutcome
from belay.harness.models.base import ModelAdapter, ModelMessage, ModelRequest
from belay.harness.models.scripted import SCRIPTED_MODEL_ID, ScriptedModel, load_plan
from belay.harness.tools import offered
from belay.journal.compaction import (
    DETERMINISTIC,
    RECENT_WINDOW_EVENTS,
    SUMMARY_CHARS,
    compaction_due,
    deterministic_text,
    summary_of,
)
from belay.journal.context import build_context, render_event
from belay.journal.events import Event, Summary, SummaryEvent
from belay.journal.state import SessionState

KIND = "self-hosted"
SELF_HOSTED_TYPES = ("scripted", "openai", "anthropic")
CONTEXT_BUDGET_TOKENS = 8000
CONTEXT_TAIL_EVENTS = RECENT_WINDOW_EVENTS
REQUEST_CHARS = 48_000  # rendered events sent to a model for one summary, at most

ModelFactory = Callable[[ExecutorContext], ModelAdapter]


class SelfHostedExecutor:
    kind = KIND

    def __init__(
        self,
        context: ExecutorContext,
        model: ModelAdapter,
        compaction_lock: asyncio.Lock | None = None,
    ) -> None:
        self.context = context
        self.model = model
        self.compaction_lock = compaction_lock or asyncio.Lock()
        self.model_summaries = context.session.spec.executor.type != "scripted"

    async def start(self, state: SessionState) -> None:
        return None

    async def resume(self, state: SessionState) -> None:
        return None

    async def next_actions(self, state: SessionState) -> Decision:
        ctx = self.context
        sub = ctx.subagent
        await self.compact(state.last_seq)
        tail = await ctx.store.tail(ctx.session.session_id, CONTEXT_TAIL_EVENTS)
        shared = await build_context(ctx.store, ctx.session.session_id, state, CONTEXT_BUDGET_TOKENS)
        server_tools = ctx.server_tools()
        request = build_model_request(
            state, tail, sub.name, sub.role, sub.deliverable, shared.to_text(), server_tools
        )
        turn = await self.model.complete(request)
        # A server tool is called under its wire name; the record names it `<server>.<tool>`.
        named = offered(server_tools)[1]
        return Decision(
            text=turn.text,
            tool_calls=[
                call.model_copy(update={"name": named.get(call.name, call.name)}) for call in turn.tool_calls
            ],
            model_id=turn.model_id,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            cached_input_tokens=turn.cached_input_tokens,
        )

    async def compact(self, last_seq: int) -> SummaryEvent | None:
        """Record a summary when the events outside the context's window that no summary covers
        have grown past the threshold; the recorded summary, or None."""
        ctx = self.context
        session_id = ctx.session.session_id
        async with self.compaction_lock:
            latest = await ctx.store.latest(session_id, "summary")
            previous = latest.payload if isinstance(latest, SummaryEvent) else None
            covered_to = previous.covers_to_seq if previous else 0
            to_seq = compaction_due(last_seq, covered_to)
            if to_seq is None:
                return None
            events = await ctx.store.read(session_id, covered_to + 1, to_seq)
            if not events:
                return None
            summary = await self.summarize(previous, latest.seq if latest else None, events)
            [recorded] = await ctx.record([summary])
            assert isinstance(recorded, SummaryEvent)
            return recorded

    async def summarize(
        self, previous: Summary | None, previous_seq: int | None, events: list[Event]
    ) -> Summary:
        if not self.model_summaries:
            return summary_of(previous, previous_seq, events, deterministic_text(previous, events))
        turn = await self.model.complete(summary_request(previous, events))
        if not turn.text.strip():
            # A model that wrote nothing still leaves the window summarised, and says so.
            return summary_of(
                previous,
                previous_seq,
                events,
                deterministic_text(previous, events),
                made_by=f"{DETERMINISTIC} ({turn.model_id or 'the model'} wrote no summary)",
                input_tokens=turn.input_tokens,
                output_tokens=turn.output_tokens,
            )
        return summary_of(
            previous,
            previous_seq,
            events,
            turn.text.strip(),
            made_by=turn.model_id or configured_model(self.context),
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
        )

    async def deliver_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        return None

    async def tell(self, text: str, seq: int) -> None:
        return None  # in the record, which the next turn's context is built from

    async def interrupt(self) -> None:
        return None

    async def remote_resources(self) -> list[RemoteResource]:
        return []

    async def close(self) -> None:
        return None


def configured_model(context: ExecutorContext) -> str:
    executor = context.session.spec.executor
    return executor.model or executor.type


SUMMARY_INSTRUCTIONS = (
    "You compact the record of a long-running agent session. The events below are leaving the "
    "model's recent context; write the summary that replaces them there (the record keeps them). "
    "Keep what later work needs: steps finished and verified, decisions and findings with their "
    "ids, artifacts by name, open questions and what is waited on. Fold in the earlier summary. "
    f"Plain text, at most {SUMMARY_CHARS} characters, no preamble."
)


def summary_request(previous: Summary | None, events: Sequence[Event]) -> ModelRequest:
    """What a model is asked for a summary: the earlier summary and the events, newest kept when
    they do not all fit in REQUEST_CHARS."""
    lines = [render_event(event) for event in events]
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > REQUEST_CHARS:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    omitted = len(lines) - len(kept)
    body = [f"Earlier summary: {previous.text}" if previous else "Earlier summary: none"]
    body.append(f"Events seq {events[0].seq}-{events[-1].seq}:")
    if omitted:
        body.append(f"({omitted} earlier events of this range not shown)")
    body += kept
    return ModelRequest(
        system=SUMMARY_INSTRUCTIONS, messages=[ModelMessage(role="user", content="\n".join(body))]
    )


def model_factory_for(session: AgentSession) -> ModelFactory:
    """The model adapter each subagent's self-hosted executor asks."""
    executor = session.spec.executor
    if executor.type == "scripted":
        plan = load_plan(Path(executor.plan or ""))
        return lambda ctx: ScriptedModel(plan, ctx.subagent.name, ctx.read_state)
    # A server named by a base URL may need no key (a local one); the SDKs refuse to start without.
    key = self_hosted_key(executor.type, executor.base_url, os.environ)
    # The providers' SDKs are optional extras, slow to import: only the one this session uses.
    if executor.type == "openai":
        from belay.harness.models.openai import OpenAIResponsesAdapter

        return lambda ctx: OpenAIResponsesAdapter(
            executor.model or "",
            base_url=executor.base_url,
            api_key=key,
            max_output_tokens=executor.max_output_tokens,
        )
    if executor.type == "anthropic":
        from belay.harness.models.anthropic import AnthropicMessagesAdapter

        return lambda ctx: AnthropicMessagesAdapter(
            executor.model or "",
            base_url=executor.base_url,
            api_key=key,
            **({"max_tokens": executor.max_output_tokens} if executor.max_output_tokens else {}),
        )
    raise ValueError(f"executor type {executor.type!r} is not a self-hosted model")


def initial_model_id(session: AgentSession) -> str:
    executor = session.spec.executor
    if executor.type == "scripted":
        return SCRIPTED_MODEL_ID
    return executor.model or executor.type
