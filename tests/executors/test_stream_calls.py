"""A managed executor takes the calls its provider's event stream shows waiting from the stream
(OpenAI: a function call's `agent.session.turn.item.done` and `agent.session.requires_action`;
Anthropic: `agent.custom_tool_use`), as the APIs document, rather than reading the remote session
after every result: against each stand-in, a session of many calls reads the session (retrieve,
events.list) far fewer times than it has calls, and OpenAI's end of turn comes from the stream as
well. With the stream's calls ignored (`heard` answering None, as before the executor took them),
each call costs at least one read and the test fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.harness.models.scripted import ScriptedPlan
from belay.journal.events import ModelOutput
from belay.local.runtime import LocalHome, run_local
from tests.belay_cli import provider_problems
from tests.executors.example import STANDINS, one_subagent_session, standin_for

COMMANDS = 10
PLAN = ScriptedPlan.model_validate(
    {
        "subagents": {
            "worker": {
                "steps": [
                    {
                        "id": "count",
                        "title": "Count to ten",
                        "actions": [
                            {"tool": "run_command", "arguments": {"command": f"echo {n}"}}
                            for n in range(COMMANDS)
                        ],
                    }
                ]
            }
        }
    }
)


@pytest.mark.parametrize("executor", sorted(STANDINS))
async def test_calls_come_from_the_event_stream_not_from_a_read_after_every_result(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with standin_for(executor, PLAN, monkeypatch) as standin:
        session = one_subagent_session("counting", executor, "Count to ten.")
        home = LocalHome(tmp_path)
        result = await run_local(home, session)
        stats = standin.stats()
    assert result.completed, result.detail
    assert provider_problems(stats, subagents=1) == []
    [counters] = stats["sessions"].values()
    calls = counters["calls_requested"]
    assert calls == COMMANDS + 2  # update_plan running and done around the commands
    # One look when the executor starts and one when the agent is done (two requests each for
    # Anthropic: the session and its history), whatever the number of calls. OpenAI's stream
    # shows the turn's end too (its answer, `turn.completed`, `agent.session.idle`): only the
    # first look reads the session.
    expected_reads = 1 if executor == "openai-agents" else 4
    assert counters["state_reads"] <= expected_reads < calls, counters
    # The remote agent's answer, wherever it was read from, is what the record says it said.
    store = home.open_event_store()
    try:
        events = await store.read(session.session_id)
    finally:
        await store.close()
    [answer] = [e.payload.text for e in events if isinstance(e.payload, ModelOutput) and e.payload.text]
    assert answer.startswith("# worker: remote notes") and "- run_command: succeeded" in answer, answer
