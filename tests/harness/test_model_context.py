"""The calls a self-hosted model is shown again, rebuilt from the record: each under the id its
provider gave it when the record keeps one, else under its operation id written as both provider
APIs take a call id (Anthropic's tool_use ids match ^[a-zA-Z0-9_-]+$; an operation id has dots)."""

from __future__ import annotations

import re

from belay.harness.context import build_model_request, wire_call_id
from belay.harness.models.anthropic import wire_messages
from belay.harness.models.openai import input_items
from belay.journal.events import Actor, EffectClass, ToolRequest, ToolResult, UserInput
from belay.journal.state import fold
from tests.journal.fixtures import LogBuilder

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
WORKER = Actor(attempt=1, subagent="w")


def test_a_recorded_call_is_replayed_under_an_id_both_apis_take() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="look around"))
    for operation_id, provider_call_id in [("w.s.1", None), ("w.s@2.2", "toolu_01abc"), ("w.3", "call_9")]:
        log.add(
            ToolRequest(
                operation_id=operation_id,
                tool="run_command",
                arguments={"command": "ls"},
                effect=EffectClass.READ_ONLY,
                subagent="w",
                provider_call_id=provider_call_id,
            ),
            actor=WORKER,
        )
        log.add(ToolResult(operation_id=operation_id, ok=True, output="a.txt"), actor=WORKER)
    # A result whose request left the tail: its call id comes from the fold.
    state = fold(log.events)
    request = build_model_request(state, log.events[2:], "w", "", None)
    calls = [c.call_id for m in request.messages for c in m.tool_calls]
    results = [m.tool_call_id for m in request.messages if m.role == "tool"]
    assert calls == ["toolu_01abc", "call_9"]
    assert results == ["w_2e_s_2e_1", "toolu_01abc", "call_9"]

    whole = build_model_request(state, log.events, "w", "", None)
    calls = [c.call_id for m in whole.messages for c in m.tool_calls]
    assert calls == ["w_2e_s_2e_1", "toolu_01abc", "call_9"]
    blocks = [b for m in wire_messages(list(whole.messages)) for b in m["content"]]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    assert uses == answered == calls and all(ANTHROPIC_ID.match(i) for i in uses)
    items = input_items(list(whole.messages))
    assert [i["call_id"] for i in items if i.get("type") == "function_call_output"] == calls


def test_the_wire_form_keeps_two_operation_ids_two() -> None:
    assert wire_call_id("call_abc-1") == "call_abc-1"  # a provider's id, as it is
    assert wire_call_id("implementer.fix@2.done") == "implementer_2e_fix_40_2_2e_done"
    ids = ["a.b_c", "a_b.c", "a.b.c", "a__b.c", "a._2e_b"]
    wired = [wire_call_id(i) for i in ids]
    assert len(set(wired)) == len(ids) and all(ANTHROPIC_ID.match(w) for w in wired)
