"""A deterministic model for demos and tests: it follows a YAML plan.

It decides each turn from the session record, never from an in-memory counter: the next action is
the first action of the plan whose operation has no result in the record yet. A harness that is
killed and resumed therefore continues exactly where the record says it stands.

Each plan step is framed by `update_plan` calls (`running` with the request parts the step depends
on, then `done` with the step's verification and the step that follows), so step boundaries,
provenance and checkpoints come from the same path a real model uses.

A step is done once per round. When a scope change invalidates its work, or a person rejects what
it produced, the record reopens it for its next round: the step is done again under new operation
ids (`<subagent>.<step>@<round>.<position>` from the second round on), with the first of its
`variants` whose condition the record meets (the goal now says something, the round was opened by
a rejection), else with its own actions.

An action may declare `latency_s`: the model call that decides it then takes that long, as a
hosted model's would, so a plan can stand for a slow model (`bench/bench_children.py`). It may
declare `end_turn_before` (what the model says): the model then ends its turn there once, without
the call, as a model that stops short does; its next turn (after a person's message, or an amend)
makes the call. Whether it ended there already is in the record (`belay.journal.turns.ended_at`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from belay.api.bounded_yaml import FileRefused, describe_yaml_error, load_yaml, read_regular_file
from belay.harness.models.base import ModelRequest, ModelTurn, ToolCall
from belay.journal.operations import place_of
from belay.journal.state import EMPTY, SessionState, TaskRecord
from belay.journal.tools import SERVER_TOOL_SEPARATOR, TOOLS, is_server_tool, unknown_tool
from belay.journal.turns import ended_at
from belay.sandbox.protocol import MAX_COMMAND_BYTES, command_size

SCRIPTED_MODEL_ID = "scripted/v1"


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedAction(PlanModel):
    """One call the scripted model asks for."""

    tool: str = Field(description="The tool to call, by its name in [tools.md](tools.md).")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The call's arguments, as the tool's schema in tools.md takes them."
    )
    text: str = Field(default="", description='What the model "says" with this call.')
    latency_s: float = Field(
        default=0.0,
        ge=0.0,
        le=600.0,
        description="How long the model call that decides this action takes, in seconds (0 to 600): "
        "the scripted model waits this long before it answers, as a hosted model's round trip would.",
    )
    end_turn_before: str | None = Field(
        default=None,
        min_length=1,
        max_length=4000,
        description="The model ends its turn with these words instead of asking for this action, "
        "once: a model that stops short. Its next turn (after a person's message or an amend) asks for it.",
    )


class StepVerification(PlanModel):
    """How a step's work is checked before its checkpoint counts as verified (run again on restore)."""

    command: str = Field(description="A shell command run in the subagent's workspace.")
    exit_code: int = Field(default=0, description="The exit code that means the step's work holds.")


class VariantCondition(PlanModel):
    """When a variant applies: every condition given must hold."""

    goal_contains: str | None = Field(
        default=None, description="The request's goal, as it stands now, contains this text."
    )
    rejected: bool | None = Field(
        default=None, description="The step's round was opened by a rejection (true) or not (false)."
    )

    @model_validator(mode="after")
    def _says_something(self) -> VariantCondition:
        if self.goal_contains is None and self.rejected is None:
            raise ValueError("a variant needs a condition: goal_contains, rejected, or both")
        return self

    def holds(self, state: SessionState, task: TaskRecord | None) -> bool:
        by_rejection = task is not None and task.round > 1 and task.reopened_by_rejection
        return self.matches(state.request.goal, by_rejection)

    def matches(self, goal: str, by_rejection: bool) -> bool:
        """Whether it holds for a request whose goal reads `goal`, in a round a rejection opened
        (`by_rejection`) or not."""
        if self.goal_contains is not None and self.goal_contains not in goal:
            return False
        return self.rejected is None or by_rejection == self.rejected


class ScriptedVariant(PlanModel):
    """Another way to do a step: its actions (and verification) replace the step's own."""

    when: VariantCondition = Field(description="When this variant is chosen: the first that holds wins.")
    verify: StepVerification | None = Field(
        default=None, description="Replaces the step's verification when given."
    )
    actions: list[ScriptedAction] = Field(min_length=1, description="Replace the step's actions.")


class ScriptedStep(PlanModel):
    """A step of a subagent's plan: framed by `update_plan` (running, then done with its
    verification), checkpointed once done, done again in its next round when a scope change or a
    rejection reopens it."""

    id: str = Field(
        pattern=r"^[a-z0-9][-a-z0-9_]*$",
        description="The step's id, unique in its subagent's plan: lower-case letters, digits, '-' "
        "and '_', starting with a letter or digit.",
    )
    title: str = Field(description="What the step does, as the briefing shows it.")
    inputs: list[str] | None = Field(
        default=None,
        description='The request parts ("goal" included) the step depends on: a scope change of '
        "another part leaves it valid. Not given: it depends on all of them.",
    )
    verify: StepVerification | None = Field(default=None, description="How the step's work is checked.")
    actions: list[ScriptedAction] = Field(
        default_factory=list, description="The calls the step makes, in order."
    )
    variants: list[ScriptedVariant] = Field(
        default_factory=list, description="Other ways to do the step in a later round, chosen by condition."
    )

    def chosen(self, state: SessionState, task: TaskRecord | None) -> ScriptedVariant | None:
        return next((v for v in self.variants if v.when.holds(state, task)), None)

    def variant_for(self, goal: str, by_rejection: bool) -> ScriptedVariant | None:
        return next((v for v in self.variants if v.when.matches(goal, by_rejection)), None)


class ScriptedSubagentPlan(PlanModel):
    """One subagent's plan."""

    steps: list[ScriptedStep] = Field(min_length=1, description="Its steps, in order (at least one).")


class ScriptedPlan(PlanModel):
    """A scripted plan: `spec.executor.plan` of a session whose executor is `scripted`."""

    subagents: dict[str, ScriptedSubagentPlan] = Field(
        description="One plan per subagent of the manifest, by its name, and no other."
    )

    def for_subagent(self, name: str) -> ScriptedSubagentPlan:
        try:
            return self.subagents[name]
        except KeyError:
            raise PlanError(f"the plan has no steps for subagent {name!r}") from None


class PlanError(ValueError):
    pass


def load_plan(path: Path) -> ScriptedPlan:
    try:
        data = read_regular_file(path)
    except FileRefused as error:
        raise PlanError(f"{path}: {error}") from None
    return parse_plan(data, source=str(path))


def parse_plan(data: bytes, *, source: str) -> ScriptedPlan:
    try:
        loaded = load_yaml(data.decode())
    except UnicodeDecodeError:
        raise PlanError(f"{source}: not a text file (not UTF-8)") from None
    except yaml.YAMLError as error:
        raise PlanError(f"{source}: not valid YAML: {describe_yaml_error(error)}") from None
    if not isinstance(loaded, dict) or set(loaded) != {"subagents"}:
        # Nothing of a file that is no plan is quoted back (a key of it may be a secret's line).
        raise PlanError(f"{source}: not a scripted plan: a YAML mapping whose only key is subagents")
    try:
        plan = ScriptedPlan.model_validate(loaded)
    except ValidationError as error:
        issues = "; ".join(
            f"{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors()
        )
        raise PlanError(f"{source}: {issues}") from None
    problems = plan_problems(plan)
    if problems:
        raise PlanError(f"{source}: {'; '.join(problems)}")
    return plan


def plan_problems(
    plan: ScriptedPlan,
    subagents: list[str] | None = None,
    servers: Mapping[str, Collection[str]] | None = None,
) -> list[str]:
    """Everything that would make the plan fail once it runs, found before it runs. With
    `subagents` (the manifest's), the plan must have steps for each of them and no other; with
    `servers` (each subagent's tool servers), a `<server>.<tool>` must name one of its servers."""
    problems = []
    if subagents is not None:
        problems += [
            f"the plan has no steps for subagent {n!r}" for n in subagents if n not in plan.subagents
        ]
        problems += [
            f"the plan has steps for {n!r}, which is not a subagent of the manifest"
            for n in plan.subagents
            if n not in subagents
        ]
    for name, subplan in plan.subagents.items():
        # Counted once, not per step: a plan may have tens of thousands of steps under the size cap.
        uses = Counter(step.id for step in subplan.steps)
        problems += [
            f"subagents.{name}: step id {step!r} is used twice"
            for step in sorted(s for s, n in uses.items() if n > 1)
        ]
        for step in subplan.steps:
            where = f"subagents.{name}.{step.id}"
            verifies = [step.verify, *(v.verify for v in step.variants)]
            if any(v is not None and command_size(v.command) > MAX_COMMAND_BYTES for v in verifies):
                problems.append(f"{where}: the verify command is above {MAX_COMMAND_BYTES} bytes")
            actions = [*step.actions, *(a for v in step.variants for a in v.actions)]
            for index, action in enumerate(actions, start=1):
                server = action.tool.partition(SERVER_TOOL_SEPARATOR)[0]
                if (
                    is_server_tool(action.tool)
                    and servers is not None
                    and server not in servers.get(name, ())
                ):
                    problems.append(
                        f"{where}: {action.tool}: the subagent declares no tool server {server!r}"
                    )
                elif action.tool not in TOOLS and not is_server_tool(action.tool):
                    problems.append(f"{where}: {unknown_tool(action.tool)}")
                elif action.tool == "run_command" and command_size(action.arguments.get("command")) > (
                    MAX_COMMAND_BYTES
                ):
                    problems.append(
                        f"{where}: action {index}: the command is above {MAX_COMMAND_BYTES} bytes"
                    )
    return problems


# The next step of the last one: what the harness records as the checkpoint's next step.
END_OF_PLAN = "end"


def operation_id(subagent: str, step: str, position: str, round_: int = 1) -> str:
    """The id the harness derives for the plan's call at `position` (`start`, 1..n, `done`) of
    the step's round (belay.journal.operations): the plan's calls are framed as it counts them."""
    return f"{place_of(subagent, step, round_)}.{position}"


def planned_calls(subagent: str, plan: ScriptedSubagentPlan, state: SessionState = EMPTY) -> list[ToolCall]:
    """Every call the plan makes, in order, each with its stable operation id: for each step, the
    calls of its current round in the record (the first round when the record has none)."""
    calls: list[ToolCall] = []
    for index, step in enumerate(plan.steps):
        task = state.tasks.get(f"{subagent}/{step.id}")
        round_ = task.round if task is not None else 1
        calls += step_calls(subagent, plan, index, round_, step.chosen(state, task))
    return calls


def step_calls(
    subagent: str, plan: ScriptedSubagentPlan, index: int, round_: int, variant: ScriptedVariant | None
) -> list[ToolCall]:
    """The calls of the plan's step at `index` in its round `round_`, done the `variant`'s way (its
    own way with none), framed by `update_plan`."""
    step = plan.steps[index]
    actions = variant.actions if variant is not None else step.actions
    verify = variant.verify if variant is not None and variant.verify is not None else step.verify
    following = plan.steps[index + 1].id if index + 1 < len(plan.steps) else END_OF_PLAN
    start: dict[str, Any] = {"step": step.id, "title": step.title, "status": "running"}
    if step.inputs is not None:
        start["inputs"] = list(step.inputs)
    first = operation_id(subagent, step.id, "start", round_)
    calls = [ToolCall(call_id=first, name="update_plan", arguments=start)]
    for position, action in enumerate(actions, start=1):
        calls.append(
            ToolCall(
                call_id=operation_id(subagent, step.id, str(position), round_),
                name=action.tool,
                arguments=action.arguments,
            )
        )
    done: dict[str, Any] = {"step": step.id, "title": step.title, "status": "done", "next_step": following}
    if verify is not None:
        done["verify"] = verify.command
        done["expect_exit_code"] = verify.exit_code
    calls.append(
        ToolCall(call_id=operation_id(subagent, step.id, "done", round_), name="update_plan", arguments=done)
    )
    return calls


def redo_calls(
    subagent: str, plan: ScriptedSubagentPlan, step_id: str, round_: int, goal: str, by_rejection: bool
) -> tuple[list[ToolCall], dict[str, str]]:
    """The calls of one step done again in its round `round_`, for a request whose goal reads
    `goal`, the round opened by a rejection or not (the variant that applies, as `planned_calls`
    chooses it from a record); and the calls among them the model ends its turn before (once),
    with what it says. Nothing for a step the plan does not have."""
    index = next((i for i, s in enumerate(plan.steps) if s.id == step_id), None)
    if index is None:
        return [], {}
    step = plan.steps[index]
    variant = step.variant_for(goal, by_rejection)
    calls = step_calls(subagent, plan, index, round_, variant)
    stops = {
        operation_id(subagent, step.id, str(position), round_): action.end_turn_before
        for position, action in enumerate(variant.actions if variant else step.actions, start=1)
        if action.end_turn_before is not None
    }
    return calls, stops


def actions(subagent: str, plan: ScriptedSubagentPlan, state: SessionState) -> dict[str, ScriptedAction]:
    """The plan's action behind each call of the current rounds, by operation id."""
    found = {}
    for step in plan.steps:
        task = state.tasks.get(f"{subagent}/{step.id}")
        round_ = task.round if task is not None else 1
        variant = step.chosen(state, task)
        for position, action in enumerate(variant.actions if variant else step.actions, start=1):
            found[operation_id(subagent, step.id, str(position), round_)] = action
    return found


def turn_ends(subagent: str, plan: ScriptedSubagentPlan, state: SessionState = EMPTY) -> dict[str, str]:
    """The calls of the current rounds the model ends its turn before (once), with what it says."""
    return {
        call_id: action.end_turn_before
        for call_id, action in actions(subagent, plan, state).items()
        if action.end_turn_before is not None
    }


def texts(subagent: str, plan: ScriptedSubagentPlan, state: SessionState) -> dict[str, str]:
    """What the model "says" with each call of the current rounds, by operation id."""
    return {call_id: action.text for call_id, action in actions(subagent, plan, state).items()}


def is_settled(
    state: SessionState, subagent: str, call: ToolCall, planned: frozenset[str] = frozenset()
) -> bool:
    """The record shows the plan's call finished: it has a result, or its outcome was reconciled.
    The call is looked up by its own id, which is its operation id unless the harness derived
    another (a plan whose actions call `update_plan` themselves): then through the fold's index
    of provider call ids. An operation of that id that another executor proposed (under a call id
    of its own, none of the plan's `planned` ids) is this call when it is the same tool: operation
    ids come from the record's structure, the same whichever executor proposed the call."""
    operation = state.operation_of_call(subagent, call.call_id)
    if operation is None:
        recorded = state.operations.get(call.call_id)
        if recorded is not None and recorded.tool == call.name and recorded.provider_call_id not in planned:
            operation = recorded
    return operation is not None and (operation.has_result or operation.outcome == "reconciled")


def next_call(subagent: str, plan: ScriptedSubagentPlan, state: SessionState) -> ToolCall | None:
    calls = planned_calls(subagent, plan, state)
    planned = frozenset(c.call_id for c in calls)
    for call in calls:
        if not is_settled(state, subagent, call, planned):
            return call
    return None


class ScriptedModel:
    """One per subagent; `read_state` returns the fold of the session's record, up to date."""

    def __init__(
        self,
        plan: ScriptedPlan,
        subagent: str,
        read_state: Callable[[], Awaitable[SessionState]],
    ) -> None:
        self.subagent = subagent
        self.plan = plan.for_subagent(subagent)
        self.read_state = read_state
        self.model_id = SCRIPTED_MODEL_ID

    async def complete(self, request: ModelRequest) -> ModelTurn:
        state = await self.read_state()
        call = next_call(self.subagent, self.plan, state)
        if call is None:
            return ModelTurn(text="Every step of my plan is done.", model_id=self.model_id)
        action = actions(self.subagent, self.plan, state).get(call.call_id)
        if action is not None and action.latency_s:
            await asyncio.sleep(action.latency_s)
        if action is not None and action.end_turn_before and not ended_at(state, call.call_id):
            return ModelTurn(text=action.end_turn_before, model_id=self.model_id)
        return ModelTurn(
            text=action.text if action is not None else "",
            tool_calls=[call],
            model_id=self.model_id,
            input_tokens=sum(len(m.content) for m in request.messages) // 4,
        )
