"""Operation ids, derived from the record's own structure.

An operation id names one call a subagent proposed by where the call stands in the subagent's
work as the record shows it, never by who proposed it: the same call gets the same id from the
scripted model, from a provider's model run by Belay's harness, and from a provider's managed
agent. What is keyed by it (a manifest's declarative approvals, the drill's kill points, a
handover to another executor) therefore carries from one executor to another. The executor's own
id of the call is kept beside it (`ToolRequest.provider_call_id`).

For a call of subagent SUB, decided while its step S runs in round R (`TaskRecord.round`, 1 for
a step the record has not seen), written PLACE = `SUB.S` in the first round and `SUB.S@R` after:

- `update_plan` that starts step S (any status but `done`): `PLACE.start`, S and R being the
  step it names;
- `update_plan` that finishes step S (status `done`): `PLACE.done`;
- any other call: `PLACE.k`, k one past the highest ordinal already recorded at PLACE (in a
  tool request or a remote call), calls earlier in the same batch included;
- a call decided while no step of SUB runs: `SUB.k`, k counting SUB's calls outside any step.

The running step is the subagent's running step started last (`current_step_of`); within one
batch, an `update_plan` earlier in it moves it for the calls after it, as running the batch will.
A step id made of anything but `[A-Za-z0-9_-]` has each other character replaced by `-` (and is
cut at 64 characters), so an id never holds a second `.` or `@` from a step's name.

An id is never given twice: one already in the record (a tool request, a remote call) or earlier
in the batch is passed over for the next free ordinal at its place, so a model that starts a step
twice gets `PLACE.start`, then `PLACE.k`. A scripted plan frames each step with `update_plan`
(running, its actions, done), so its ids are `SUB.S[@R].start`, `.1` … `.n`, `.done`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from belay.journal.events import TaskStatus
from belay.journal.state import operation_ordinal

if TYPE_CHECKING:
    from belay.journal.state import SessionState

START = "start"
DONE = "done"
STEP_ID_MAX = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class ProposedCall(NamedTuple):
    tool: str
    arguments: Mapping[str, Any]
    # The id this call was recorded under already (a managed executor records the remote call,
    # under the id derived here, before its request): kept as it is.
    operation_id: str | None = None


class DerivedOperation(NamedTuple):
    operation_id: str
    step: str | None  # the step running when the call was decided (its task id), if any


def place_of(subagent: str, step: str | None, round_: int = 1) -> str:
    """Where calls are counted: `SUB.S` (round 1), `SUB.S@R`, or `SUB` outside any step."""
    if step is None:
        return subagent
    name = _UNSAFE.sub("-", step)[:STEP_ID_MAX]
    return f"{subagent}.{name}" if round_ == 1 else f"{subagent}.{name}@{round_}"


def running_steps(state: SessionState, subagent: str) -> list[str]:
    """The subagent's running steps (task ids), the one started last at the end."""
    running = [
        t
        for t in state.tasks.values()
        if t.owner == subagent and t.task_id.startswith(f"{subagent}/") and t.status == TaskStatus.RUNNING
    ]
    return [t.task_id for t in sorted(running, key=lambda t: t.last_seq)]


def current_step_of(state: SessionState, subagent: str) -> str | None:
    running = running_steps(state, subagent)
    return running[-1] if running else None


def plan_step(subagent: str, tool: str, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """For an `update_plan` call naming a step: the step's task id and `start` or `done`."""
    step = arguments.get("step")
    if tool != "update_plan" or not isinstance(step, str) or not step:
        return None
    return f"{subagent}/{step}", DONE if arguments.get("status", "running") == "done" else START


def operation_ids(
    state: SessionState, subagent: str, calls: Sequence[ProposedCall]
) -> list[DerivedOperation]:
    """The operation id of each call of a batch the subagent proposes, in order, derived from the
    record (`state`, before the batch) as this module describes."""
    highest: dict[str, int] = {}  # place -> the highest ordinal so far, the batch's included
    given: set[str] = set()
    running = running_steps(state, subagent)

    def taken(operation_id: str) -> bool:
        return operation_id in given or operation_id in state.operations or operation_id in state.remote_calls

    def next_at(place: str) -> str:
        ordinal = highest.get(place, state.operation_ordinals.get(place, 0)) + 1
        while taken(f"{place}.{ordinal}"):  # only ids the index has not seen: none, normally
            ordinal += 1
        return f"{place}.{ordinal}"

    def place_of_task(task_id: str | None) -> str:
        if task_id is None:
            return subagent
        task = state.tasks.get(task_id)
        return place_of(subagent, task_id.split("/", 1)[1], task.round if task is not None else 1)

    derived: list[DerivedOperation] = []
    for call in calls:
        step = running[-1] if running else None
        framing = plan_step(subagent, call.tool, call.arguments)
        if call.operation_id is not None:
            operation_id = call.operation_id
        elif framing is not None:
            place = place_of_task(framing[0])
            operation_id = f"{place}.{framing[1]}"
            if taken(operation_id):
                operation_id = next_at(place)
        else:
            operation_id = next_at(place_of_task(step))
        found = operation_ordinal(operation_id)
        if found is not None:
            place, ordinal = found
            highest[place] = max(ordinal, highest.get(place, state.operation_ordinals.get(place, 0)))
        given.add(operation_id)
        derived.append(DerivedOperation(operation_id, step))
        if framing is not None:  # running the batch starts or finishes the step before what follows
            task_id, position = framing
            running = [t for t in running if t != task_id] + ([task_id] if position == START else [])
    return derived
