"""A plan as large as the size cap lets it be is checked in time proportional to its size: about
70,000 steps fit in the 2 MiB a plan may have, and a check that compares every step with every
other (as counting each step id's uses in the whole list did) keeps `belay run` silent for minutes
before it starts anything."""

from __future__ import annotations

import time

from belay.harness.models.scripted import ScriptedPlan, plan_problems

STEPS = 60_000
# Far above the linear check's cost on a loaded machine (well under a second), far below the
# quadratic one's (a minute or more for 60,000 steps).
PROMPT_S = 10


def test_a_plan_of_tens_of_thousands_of_steps_is_checked_promptly_and_a_repeated_id_still_found() -> None:
    steps = [{"id": f"s{i}", "title": "t"} for i in range(STEPS)]
    steps.append({"id": "s7", "title": "again"})
    plan = ScriptedPlan.model_validate({"subagents": {"a": {"steps": steps}}})

    began = time.monotonic()
    problems = plan_problems(plan, ["a"])
    took = time.monotonic() - began

    assert problems == ["subagents.a: step id 's7' is used twice"]
    assert took < PROMPT_S, f"checking {STEPS} steps took {took:.1f} s"
