"""The stand-ins' remote agent: a remote session's decider, following the scripted plan's calls for
one subagent (`belay.harness.models.scripted.planned_calls`), one at a time.

A session whose first message is seeded from Belay's record (it replaces a remote session the
provider lost, `belay.executors.seeding`) goes on from where that message says the work stands:
a step the message calls done or verified is skipped, a running step goes on after the number of
calls it says are settled (its `update_plan` start among the skipped, since the step runs), and
every other step is done whole. Only those step lines are read; a real model reads the whole text.

Where the plan has the model end its turn before a call (`end_turn_before`), the agent ends its
turn there once, with those words and without publishing anything, as an agent that stops short
does; the next user message starts a turn that asks for the call.

A message that names steps to do again (`- step report: planned again (round 2): ...`, after a
scope change or a rejection, `belay.executors.seeding.reopening_text`) has the agent do each of
them again, once per round, after what it still has to ask for (but the calls of those steps,
dropped): the step's calls of that round, the way the plan does the step for the goal the message
states and for a round a rejection opened or not (its `variants`).
"""

from __future__ import annotations

from typing import Any

from belay.executors.seeding import NOT_RUN, goal_of, redone_steps, seeded_steps
from belay.harness.models.base import ToolCall
from belay.harness.models.scripted import (
    PlanError,
    ScriptedPlan,
    ScriptedSubagentPlan,
    planned_calls,
    redo_calls,
    turn_ends,
)

SUBAGENT_METADATA_KEY = "belay_subagent"


def text_of(content: Any) -> str:
    """A message or a result as text (the provider's content blocks joined)."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def remote_notes_name(subagent: str) -> str:
    return f"{subagent}-remote-notes.md"


class ScriptedRemoteAgent:
    """The remote agent of one session: the plan's calls for one subagent, one at a time."""

    def __init__(
        self,
        subagent: str,
        calls: list[ToolCall],
        stops: dict[str, str] | None = None,
        plan: ScriptedSubagentPlan | None = None,
    ) -> None:
        self.subagent = subagent
        self.calls = calls
        self.plan = plan  # what a step done again is done by
        self.redone: set[tuple[str, int]] = set()  # the steps done again, with their round
        self.stops = stops or {}  # call id -> what the agent says when it ends its turn before it
        self.stopped: set[str] = set()
        self.stopping: str | None = None  # the words of the turn ending short now
        self.position = 0
        self.asking = False  # the call at `position` was asked for and has no result yet
        self.outcomes: list[tuple[str, bool]] = []
        self.published = False
        self.seeded = False
        # A call came back not run (a change overtook the turn): the turn ends, and the call is
        # asked for again after the next message, where the plan has it.
        self.held = False

    @classmethod
    def for_metadata(cls, plan: ScriptedPlan, metadata: dict[str, str]) -> ScriptedRemoteAgent:
        """The agent named by the session's metadata; `PlanError` when it names none of the plan's."""
        name = metadata.get(SUBAGENT_METADATA_KEY)
        if name not in plan.subagents:
            known = ", ".join(sorted(plan.subagents))
            raise PlanError(
                f"metadata.{SUBAGENT_METADATA_KEY} must name a subagent of the stand-in's plan "
                f"({known}); got {name!r}"
            )
        subplan = plan.subagents[name]
        return cls(name, planned_calls(name, subplan), turn_ends(name, subplan), subplan)

    def step_of(self, call: ToolCall) -> str:
        """The plan step a call belongs to (its id is `<subagent>.<step>.<position>`, or
        `<subagent>.<step>@<round>.<position>` in a later round)."""
        return call.call_id.removeprefix(f"{self.subagent}.").rsplit(".", 1)[0].split("@", 1)[0]

    def read(self, content: Any) -> None:
        """A user message (text, or the provider's content blocks). Before the agent asked for
        anything, a seeded one says where to start; any may name steps to do again."""
        content = text_of(content)
        self.held = False
        steps = seeded_steps(content)
        again = redone_steps(content)
        if (steps or again) and not (self.position or self.outcomes or self.seeded):
            self.seeded = True
            remaining: list[ToolCall] = []
            taken: dict[str, int] = {}  # calls of each step seen so far
            for call in self.calls:
                step = self.step_of(call)
                status, settled = steps.get(step, ("", 0))
                seen = taken[step] = taken.get(step, 0) + 1
                if step in again:  # done again in its round, where the plan has it
                    remaining += self.redo(step, again[step], goal_of(content)) if seen == 1 else []
                    continue
                if status in ("done", "verified"):
                    continue
                if status == "running" and seen <= settled + 1:  # the start and the settled calls
                    continue
                remaining.append(call)
            self.calls = remaining
        self.do_again(again, goal_of(content))

    def do_again(self, again: dict[str, tuple[int, bool]], goal: str) -> None:
        """The steps a message says to do again, each once per round, in the plan's order, after
        the calls the agent still has to ask for (but those of the steps to do again)."""
        if self.plan is None:
            return
        fresh = {step for step in again if (step, again[step][0]) not in self.redone}
        if not fresh:
            return
        start = self.position + (1 if self.asking else 0)  # the call asked for waits on its result
        upcoming = [c for c in self.calls[start:] if self.step_of(c) not in fresh]
        # In the plan's order: a step still to do that comes after one done again is done after it
        # (it builds on the redone work); the steps before stay first.
        order = {s.id: index for index, s in enumerate(self.plan.steps)}
        first = min(order.get(step, len(order)) for step in fresh)
        before = [c for c in upcoming if order.get(self.step_of(c), -1) < first]
        after = [c for c in upcoming if order.get(self.step_of(c), -1) >= first]
        redone: list[ToolCall] = []
        for step in [s.id for s in self.plan.steps if s.id in fresh]:
            redone += self.redo(step, again[step], goal)
        by_step: dict[str, list[ToolCall]] = {}
        for call in [*redone, *after]:
            by_step.setdefault(self.step_of(call), []).append(call)
        later = [
            call for step in sorted(by_step, key=lambda s: order.get(s, len(order))) for call in by_step[step]
        ]
        self.calls[start:] = [*before, *later]

    def redo(self, step: str, again: tuple[int, bool], goal: str) -> list[ToolCall]:
        """The calls of `step` done again in its round (`again`: the round, and whether a
        rejection opened it), once; none when they were taken already."""
        round_, by_rejection = again
        if self.plan is None or (step, round_) in self.redone:
            return []
        self.redone.add((step, round_))
        calls, stops = redo_calls(self.subagent, self.plan, step, round_, goal, by_rejection)
        self.stops.update(stops)
        return calls

    def upcoming(self) -> ToolCall | None:
        return self.calls[self.position] if self.position < len(self.calls) else None

    def next_call(self) -> ToolCall | None:
        """The call to ask for now; None when the turn ends here: the plan is done, or it has the
        agent stop short before this call (once)."""
        if self.held:
            return None
        call = self.upcoming()
        said = self.stops.get(call.call_id) if call is not None else None
        if call is None or said is None or call.call_id in self.stopped:
            self.asking = call is not None
            return call
        self.stopped.add(call.call_id)
        self.stopping = said
        return None

    def settle(self, success: bool, said: Any = "") -> None:
        """The pending call has its first result: the agent moves on, whatever the result says;
        but a call not run because a change overtook the turn ends the turn, to be asked again."""
        if not success and NOT_RUN in text_of(said):
            self.asking = False
            self.held = True
            return
        call = self.calls[self.position]
        self.outcomes.append((call.name, success))
        self.position += 1
        self.asking = False

    def final_message(self) -> str:
        if self.stopping is not None:
            said, self.stopping = self.stopping, None
            return said
        if not self.outcomes:
            return f"# {self.subagent}: remote notes\n\nThere was nothing left to do.\n"
        lines = [f"- {name}: {'succeeded' if success else 'failed'}" for name, success in self.outcomes]
        return (
            f"# {self.subagent}: remote notes\n\n"
            f"I asked for {len(self.outcomes)} tool calls, one at a time; each ended as follows.\n\n"
            + "\n".join(lines)
            + "\n"
        )

    def take_publication(self) -> bool:
        """True once: when the turn that finished the plan ends and nothing was published yet."""
        if self.published or self.upcoming() is not None or not self.outcomes:
            return False
        self.published = True
        return True
