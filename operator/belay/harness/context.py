"""The model request for one subagent, rebuilt from the session record.

The shared part (goal, request parts, current step, checkpoint, evidence, recent events within a
token budget) is the journal's context projection; this module adds the subagent's role and its
own recent tool calls and results as messages. What changes from turn to turn goes last, after the
history, so consecutive requests share their prefix. It reads the folded state and a bounded tail of
events, so its cost does not grow with history.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from belay.harness.models.base import ModelMessage, ModelRequest, ToolCall, ToolSchema
from belay.harness.tools import offered, wire_name
from belay.journal.events import (
    Event,
    ModelOutputEvent,
    ScopeChangeEvent,
    ToolRequestEvent,
    ToolResultEvent,
    UserMessageEvent,
)
from belay.journal.state import SessionState

MAX_RESULT_CHARS = 4000
# What both provider APIs take as a call id: Anthropic's tool_use ids must match it, and an
# operation id (`implementer.fix.1`) does not.
WIRE_CALL_ID = re.compile(r"^[A-Za-z0-9_-]+$")
# The headings of the last message of each request: the session's state, then this subagent's.
RECORD_HEADING = "Where the session stands (from its record):\n"
OWN_STEPS_HEADING = "Your steps, from the record:\n"


def wire_call_id(call_id: str) -> str:
    """A recorded call id as both provider APIs take it: as it is when it fits, else with each
    other character written `_<hex code>_` (and `_` itself as `__`), so two operation ids stay two
    on the wire."""
    if WIRE_CALL_ID.match(call_id):
        return call_id
    return "".join(
        c if c.isascii() and (c.isalnum() or c == "-") else ("__" if c == "_" else f"_{ord(c):x}_")
        for c in call_id
    )


def call_id_of(state: SessionState, operation_id: str) -> str:
    """The id an operation's call was made under, as sent to the model: the provider's own when it
    is recorded, else the operation id."""
    operation = state.operation(operation_id)
    provider_call_id = operation.provider_call_id if operation is not None else None
    return wire_call_id(provider_call_id or operation_id)


def system_prompt(state: SessionState, subagent: str, role: str, deliverable: str | None) -> str:
    """The instructions: what stays the same turn after turn (the objective changes only with the
    request), so a provider's prompt cache can reuse them and the tools after them."""
    lines = [
        f"You are the {subagent} subagent of session {state.session_id}. Role: {role or subagent}.",
        f"Shared objective (request version {state.request.version}): {state.request.goal}",
    ]
    for name, text in sorted(state.request.parts.items()):
        lines.append(f"- {name}: {text}")
    if deliverable:
        lines.append(f"Your deliverable: {deliverable} (publish it with publish_deliverable).")
    lines.append("Frame each step with update_plan (running, then done with a verify command).")
    lines.append("The last message says where the session stands now, from its record.")
    return "\n".join(lines)


def standing(state: SessionState, subagent: str, record_context: str) -> str:
    """Where the session stands now: what changes from turn to turn, sent after the history."""
    lines: list[str] = []
    done = sorted(
        t.task_id.split("/", 1)[1]
        for t in state.tasks.values()
        if t.owner == subagent and "/" in t.task_id and t.status in ("done", "verified")
    )
    if done:
        lines.append(f"Steps already completed (never redo them): {', '.join(done)}.")
    reopened = sorted(
        (
            t
            for t in state.tasks.values()
            if t.owner == subagent and "/" in t.task_id and t.status == "planned"
        ),
        key=lambda t: t.first_seq,
    )
    redo = [t for t in reopened if t.round > 1]
    if redo:
        lines.append("Steps to do again: their earlier work is invalid now (start each with update_plan):")
        lines += [f"- {t.task_id.split('/', 1)[1]} (round {t.round}): {t.reopened_because}" for t in redo]
    checkpoint = state.latest_verified_checkpoint
    if checkpoint is not None and checkpoint.checkpoint.subagent == subagent:
        lines.append(f"Last verified checkpoint: {checkpoint.checkpoint.checkpoint_id}.")
    parts = [RECORD_HEADING + record_context] if record_context else []
    if lines:
        parts.append(OWN_STEPS_HEADING + "\n".join(lines))
    return "\n\n".join(parts)


def build_model_request(
    state: SessionState,
    tail: Sequence[Event],
    subagent: str,
    role: str,
    deliverable: str | None,
    record_context: str = "",
    server_tools: Sequence[ToolSchema] = (),
) -> ModelRequest:
    """The request for one turn; `server_tools` (the subagent's MCP server tools) are offered
    beside the built-ins under their wire names (`belay.harness.tools.wire_name`)."""
    schemas, named = offered(server_tools)
    wire_names = {tool: wire for wire, tool in named.items()}
    messages = [ModelMessage(role="user", content=state.request.goal)]
    for event in tail:
        # A person's message to this subagent, and a change of the request: user turns.
        if isinstance(event, UserMessageEvent) and event.payload.subagent == subagent:
            messages.append(ModelMessage(role="user", content=event.payload.text))
            continue
        if isinstance(event, ScopeChangeEvent):
            change = f"The request changed (version {event.payload.request_version}): {event.payload.summary}"
            messages.append(ModelMessage(role="user", content=change))
            continue
        if event.actor.subagent != subagent:
            continue
        if isinstance(event, ModelOutputEvent) and (event.payload.text or event.payload.tool_calls):
            messages.append(ModelMessage(role="assistant", content=event.payload.text))
        elif isinstance(event, ToolRequestEvent):
            # The request belongs to the assistant turn just before it (the same atomic batch).
            call = ToolCall(
                call_id=wire_call_id(event.payload.provider_call_id or event.payload.operation_id),
                name=wire_names.get(event.payload.tool) or wire_name(event.payload.tool),
                arguments=event.payload.arguments,
            )
            if messages[-1].role == "assistant":
                turn = messages.pop()
                messages.append(turn.model_copy(update={"tool_calls": [*turn.tool_calls, call]}))
            else:
                messages.append(ModelMessage(role="assistant", content="", tool_calls=[call]))
        elif isinstance(event, ToolResultEvent):
            body = {"ok": event.payload.ok, "output": event.payload.output, "error": event.payload.error}
            messages.append(
                ModelMessage(
                    role="tool",
                    content=json.dumps(body, sort_keys=True, default=str)[:MAX_RESULT_CHARS],
                    tool_call_id=call_id_of(state, event.payload.operation_id),
                )
            )
    # The prompt is a stable prefix (instructions, tools, the history in order) with what changes
    # at its end: each turn's request begins with the previous one's, so a server's prompt cache
    # reuses it instead of reading the whole prompt again.
    now = standing(state, subagent, record_context)
    if now:
        messages.append(ModelMessage(role="user", content=now))
    system = system_prompt(state, subagent, role, deliverable)
    return ModelRequest(system=system, messages=messages, tools=schemas)
