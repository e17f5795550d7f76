"""The scripted model decides each turn from the record, so a fresh instance continues correctly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from belay.harness.models.base import ModelRequest
from belay.harness.models.scripted import PlanError, ScriptedModel, load_plan, planned_calls
from belay.journal.events import (
    EffectClass,
    EventDraft,
    OperationOutcome,
    Payload,
    ToolRequest,
    ToolResult,
    build_event,
)
from belay.journal.state import EMPTY, SessionState, apply
from tests.harness.example import EXAMPLE

PLAN = load_plan(EXAMPLE / "plan.yaml")


def record(state: SessionState, *payloads: Payload) -> SessionState:
    for payload in payloads:
        event = build_event(
            EventDraft(payload=payload),
            seq=state.last_seq + 1,
            session_id="s",
            created_at=datetime.now(UTC),
            idempotency_key=None,
        )
        state = apply(state, event)
    return state


def request(operation_id: str, tool: str, effect: EffectClass = EffectClass.IDEMPOTENT) -> ToolRequest:
    return ToolRequest(operation_id=operation_id, tool=tool, effect=effect)


async def next_call_id(state: SessionState) -> str | None:
    async def read_state() -> SessionState:
        return state

    turn = await ScriptedModel(PLAN, "researcher", read_state).complete(ModelRequest(system=""))
    return turn.tool_calls[0].call_id if turn.tool_calls else None


async def test_each_turn_follows_the_record_not_a_counter() -> None:
    calls = planned_calls("researcher", PLAN.for_subagent("researcher"))
    assert calls[0].name == "update_plan" and calls[-1].arguments["status"] == "done"
    state = record(EMPTY, request(calls[0].call_id, calls[0].name))
    assert await next_call_id(state) == calls[0].call_id  # requested, but no result yet
    state = record(state, ToolResult(operation_id=calls[0].call_id, ok=True))
    assert await next_call_id(state) == calls[1].call_id
    assert await next_call_id(state) == calls[1].call_id  # asking twice does not advance


async def test_a_reconciled_unsafe_call_is_not_issued_again_and_the_plan_ends() -> None:
    calls = planned_calls("researcher", PLAN.for_subagent("researcher"))
    ticket = next(c for c in calls if c.name == "create_ticket")
    state = EMPTY
    for call in calls[: calls.index(ticket)]:
        state = record(
            state, request(call.call_id, call.name), ToolResult(operation_id=call.call_id, ok=True)
        )
    state = record(
        state,
        request(ticket.call_id, ticket.name, EffectClass.UNSAFE),
        OperationOutcome(operation_id=ticket.call_id, outcome="unknown"),
    )
    assert await next_call_id(state) == ticket.call_id
    state = record(state, OperationOutcome(operation_id=ticket.call_id, outcome="reconciled", succeeded=True))
    assert await next_call_id(state) == calls[calls.index(ticket) + 1].call_id
    for call in calls[calls.index(ticket) + 1 :]:
        state = record(
            state, request(call.call_id, call.name), ToolResult(operation_id=call.call_id, ok=True)
        )
    assert await next_call_id(state) is None


def test_a_plan_with_an_unknown_tool_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    plan = {"subagents": {"a": {"steps": [{"id": "s", "title": "t", "actions": [{"tool": "rm_rf"}]}]}}}
    path.write_text(yaml.safe_dump(plan))
    with pytest.raises(PlanError, match="unknown tool 'rm_rf'"):
        load_plan(path)
