"""The stand-ins' remote agent does again the steps a message names, in their new round, the way the
plan does each for the goal the message states and for a round a rejection opened or not: whether
the message is a replacement's seeded first message or a change told after its turn ended."""

from __future__ import annotations

from pathlib import Path

from belay.executors.seeding import not_run_text
from belay.executors.standins.remote_agent import ScriptedRemoteAgent
from belay.harness.models.base import ToolCall
from belay.harness.models.scripted import load_plan
from tests.executors.example import SUBAGENT
from tests.executors.test_change_after_end import NEW_GOAL, REJECTED_REVIEW, TIMEOUT_REVIEW, changing_manifest

STEPS = ("inspect", "reproduce", "review", "report")


def agent(tmp_path: Path) -> ScriptedRemoteAgent:
    changing_manifest(tmp_path, "openai-agents")
    plan = load_plan(tmp_path / "plan" / "plan.yaml")
    return ScriptedRemoteAgent.for_metadata(plan, {"belay_subagent": SUBAGENT})


def asked(remote: ScriptedRemoteAgent) -> list[ToolCall]:
    """Every call the agent asks for until its turn ends, each answered as succeeded."""
    calls = []
    while (call := remote.next_call()) is not None:
        calls.append(call)
        remote.settle(True)
    return calls


def written(calls: list[ToolCall]) -> list[str]:
    return [c.arguments["content"] for c in calls if c.name == "write_file"]


def test_a_seeded_message_with_every_step_planned_again_does_each_once_in_its_new_round(
    tmp_path: Path,
) -> None:
    remote = agent(tmp_path)
    lines = [f"- step {step}: planned again (round 2): request v2 (dana): timeout" for step in STEPS]
    remote.read("\n".join([f"Goal: {NEW_GOAL}", "Where the work stands", *lines]))
    calls = asked(remote)
    assert all("@2." in c.call_id for c in calls), [c.call_id for c in calls]
    assert [c.arguments["step"] for c in calls if c.name == "update_plan"] == [
        s for s in STEPS for _ in (1, 2)
    ]
    assert written(calls) == [TIMEOUT_REVIEW]


def test_a_change_told_after_the_turn_ended_redoes_its_steps_once(tmp_path: Path) -> None:
    remote = agent(tmp_path)
    remote.read("Goal: the first goal")
    first = asked(remote)
    assert first and all("@" not in c.call_id for c in first)
    change = "\n".join(
        [
            "Your work was reopened after your turn ended.",
            "- step report: planned again (round 2, after a rejection): rejected review.md: cite tests",
            "Goal: the first goal",
        ]
    )
    remote.read(change)
    again = asked(remote)
    assert again[0].call_id == f"{SUBAGENT}.report@2.start"
    assert written(again) == [REJECTED_REVIEW]
    remote.read(change)  # the same change told twice: done once
    assert asked(remote) == []


def test_a_call_not_run_because_a_change_overtook_the_turn_ends_it_and_is_asked_again_in_plan_order(
    tmp_path: Path,
) -> None:
    """Mid-turn, a change reopens `review`; the agent's next call (a `report` call) comes back not
    run: its turn ends there. Told the change, it redoes `review` in round 2, then goes on with
    `report`, which builds on it, in the plan's order."""
    remote = agent(tmp_path)
    remote.read("Goal: the first goal")
    while (call := remote.next_call()) is not None and remote.step_of(call) != "report":
        remote.settle(True)
    assert call is not None
    remote.settle(False, [{"type": "text", "text": not_run_text(42)}])
    assert remote.next_call() is None  # the turn ends; the call was not consumed
    remote.read(
        "\n".join(
            [
                "Your work was reopened after your turn ended.",
                "- step review: planned again (round 2): request v2 (dana): timeout",
                f"Goal: {NEW_GOAL}",
            ]
        )
    )
    again = asked(remote)
    steps = [remote.step_of(c) for c in again]
    assert steps.index("review") < steps.index("report") and "inspect" not in steps, steps
    assert next(c.call_id for c in again if remote.step_of(c) == "review") == f"{SUBAGENT}.review@2.start"
    assert remote.step_of(again[-1]) == "report"  # the call not run, asked for again at last
