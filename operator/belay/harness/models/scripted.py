"""A deterministic model for demos and tests: it follows a YAML plan.

It decides each turn from the session record, never from an in-memory counter: the next action is
the first action of the plan whose operation has no result in the record yet. A harness that is
killed and resumed therefore continues exactly where the record says it stands.

Each plan step is framed by `update_plan` calls (`running`, then `done` with the step's
verification), so step boundaries and checkpoints come from the same path a real model uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from belay.harness.models.base import ModelRequest, ModelTurn, ToolCall
from belay.harness.tools import TOOLS
from belay.journal.state import SessionState
from belay.sandbox.protocol import MAX_COMMAND_BYTES, command_size

SCRIPTED_MODEL_ID = "scripted/v1"


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedAction(PlanModel):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    text: str = ""  # what the model "says" with this call


class StepVerification(PlanModel):
    command: str
    exit_code: int = 0


class ScriptedStep(PlanModel):
    id: str = Field(pattern=r"^[a-z0-9][-a-z0-9_]*$")
    title: str
    verify: StepVerification | None = None
    actions: list[ScriptedAction] = Field(default_factory=list)


class ScriptedSubagentPlan(PlanModel):
    steps: list[ScriptedStep] = Field(min_length=1)


class ScriptedPlan(PlanModel):
    subagents: dict[str, ScriptedSubagentPlan]

    def for_subagent(self, name: str) -> ScriptedSubagentPlan:
        try:
            return self.subagents[name]
        except KeyError:
            raise PlanError(f"the plan has no steps for subagent {name!r}") from None


class PlanError(ValueError):
    pass


def load_plan(path: Path) -> ScriptedPlan:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise PlanError(f"{path}: cannot read: {error.strerror or error}") from None
    return parse_plan(data, source=str(path))


def parse_plan(data: bytes, *, source: str) -> ScriptedPlan:
    try:
        loaded = yaml.safe_load(data.decode())
    except UnicodeDecodeError:
        raise PlanError(f"{source}: not a text file (not UTF-8)") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise PlanError(f"{source}: not valid YAML{at}") from None
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


def plan_problems(plan: ScriptedPlan, subagents: list[str] | None = None) -> list[str]:
    """Everything that would make the plan fail once it runs, found before it runs. With
    `subagents` (the manifest's), the plan must have steps for each of them and no other."""
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
        step_ids = [step.id for step in subplan.steps]
        problems += [
            f"subagents.{name}: step id {step!r} is used twice"
            for step in sorted({s for s in step_ids if step_ids.count(s) > 1})
        ]
        for step in subplan.steps:
            where = f"subagents.{name}.{step.id}"
            if step.verify is not None and command_size(step.verify.command) > MAX_COMMAND_BYTES:
                problems.append(f"{where}: the verify command is above {MAX_COMMAND_BYTES} bytes")
            for index, action in enumerate(step.actions, start=1):
                if action.tool not in TOOLS:
                    problems.append(f"{where}: unknown tool {action.tool!r}")
                elif action.tool == "run_command" and command_size(action.arguments.get("command")) > (
                    MAX_COMMAND_BYTES
                ):
                    problems.append(
                        f"{where}: action {index}: the command is above {MAX_COMMAND_BYTES} bytes"
                    )
    return problems


def operation_id(subagent: str, step: str, position: str) -> str:
    return f"{subagent}.{step}.{position}"


def planned_calls(subagent: str, plan: ScriptedSubagentPlan) -> list[ToolCall]:
    """Every call the plan makes, in order, each with its stable operation id."""
    calls: list[ToolCall] = []
    for step in plan.steps:
        calls.append(
            ToolCall(
                call_id=operation_id(subagent, step.id, "start"),
                name="update_plan",
                arguments={"step": step.id, "title": step.title, "status": "running"},
            )
        )
        for index, action in enumerate(step.actions, start=1):
            calls.append(
                ToolCall(
                    call_id=operation_id(subagent, step.id, str(index)),
                    name=action.tool,
                    arguments=action.arguments,
                )
            )
        done: dict[str, Any] = {"step": step.id, "title": step.title, "status": "done"}
        if step.verify is not None:
            done["verify"] = step.verify.command
            done["expect_exit_code"] = step.verify.exit_code
        calls.append(
            ToolCall(call_id=operation_id(subagent, step.id, "done"), name="update_plan", arguments=done)
        )
    return calls


def is_settled(state: SessionState, operation_id: str) -> bool:
    """The record shows the operation finished: it has a result, or its outcome was reconciled."""
    operation = state.operation(operation_id)
    return operation is not None and (operation.has_result or operation.outcome == "reconciled")


def next_call(subagent: str, plan: ScriptedSubagentPlan, state: SessionState) -> ToolCall | None:
    for call in planned_calls(subagent, plan):
        if not is_settled(state, call.call_id):
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
        self._text_by_call = {
            operation_id(subagent, step.id, str(i)): action.text
            for step in self.plan.steps
            for i, action in enumerate(step.actions, start=1)
        }

    async def complete(self, request: ModelRequest) -> ModelTurn:
        call = next_call(self.subagent, self.plan, await self.read_state())
        if call is None:
            return ModelTurn(text="Every step of my plan is done.", model_id=self.model_id)
        return ModelTurn(
            text=self._text_by_call.get(call.call_id, ""),
            tool_calls=[call],
            model_id=self.model_id,
            input_tokens=sum(len(m.content) for m in request.messages) // 4,
        )
