"""Operation ids derived from the record (`belay.journal.operations`): the subagent, its running
step and the step's round, the call's ordinal there; never an id given twice."""

from __future__ import annotations

from typing import Any

from belay.journal.events import (
    Actor,
    EffectClass,
    Remote,
    RemoteKind,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
)
from belay.journal.operations import ProposedCall, operation_ids
from belay.journal.state import SessionState, fold
from tests.journal.fixtures import LogBuilder
from tests.journal.test_reopening import Session

WORKER = Actor(attempt=1, subagent="w")


def start(step: str, **more: Any) -> ProposedCall:
    return ProposedCall("update_plan", {"step": step, "status": "running", **more})


def done(step: str) -> ProposedCall:
    return ProposedCall("update_plan", {"step": step, "status": "done", "verify": "true"})


def command(text: str = "ls") -> ProposedCall:
    return ProposedCall("run_command", {"command": text})


class Record:
    """A subagent's record, each batch derived and then recorded as the harness records it."""

    def __init__(self, log: LogBuilder | None = None, subagent: str = "w") -> None:
        self.log = log or LogBuilder()
        self.subagent = subagent
        self.actor = Actor(attempt=1, subagent=subagent)

    def state(self) -> SessionState:
        return fold(self.log.events)

    def ids(self, *calls: ProposedCall) -> list[str]:
        return [d.operation_id for d in operation_ids(self.state(), self.subagent, calls)]

    def run(self, *calls: ProposedCall) -> list[tuple[str, str | None]]:
        """Derive the batch's ids, record its requests, then run each: its result, and the step it
        starts or finishes."""
        derived = operation_ids(self.state(), self.subagent, calls)
        for call, (operation_id, step) in zip(calls, derived, strict=True):
            self.log.add(
                ToolRequest(
                    operation_id=operation_id,
                    tool=call.tool,
                    arguments=dict(call.arguments),
                    effect=EffectClass.IDEMPOTENT,
                    step=step,
                    subagent=self.subagent,
                ),
                actor=self.actor,
            )
        for call, (operation_id, _) in zip(calls, derived, strict=True):
            if call.tool == "update_plan":
                status = TaskStatus.DONE if call.arguments.get("status") == "done" else TaskStatus.RUNNING
                task_id = f"{self.subagent}/{call.arguments['step']}"
                self.log.add(Task(task_id=task_id, status=status, owner=self.subagent), actor=self.actor)
            self.log.add(ToolResult(operation_id=operation_id, ok=True), actor=self.actor)
        return [(d.operation_id, d.step) for d in derived]


def test_a_framed_step_gets_start_its_ordinals_and_done() -> None:
    record = Record()
    assert record.run(start("build")) == [("w.build.start", None)]
    assert record.run(command()) == [("w.build.1", "w/build")]
    assert record.run(command(), command("pwd")) == [("w.build.2", "w/build"), ("w.build.3", "w/build")]
    assert record.run(done("build")) == [("w.build.done", "w/build")]
    assert record.run(start("ship"), command()) == [("w.ship.start", None), ("w.ship.1", "w/ship")]


def test_a_batch_moves_the_running_step_for_the_calls_after_it() -> None:
    record = Record()
    batch = [start("a"), command(), done("a"), start("b"), command(), command()]
    assert record.run(*batch) == [
        ("w.a.start", None),
        ("w.a.1", "w/a"),
        ("w.a.done", "w/a"),
        ("w.b.start", None),
        ("w.b.1", "w/b"),
        ("w.b.2", "w/b"),
    ]
    state = record.state()
    assert state.operation_ordinals["w.a"] == 1 and state.operation_ordinals["w.b"] == 2


def test_starting_a_step_twice_takes_the_next_free_ordinal_and_never_reuses_an_id() -> None:
    record = Record()
    record.run(start("fix"), command(), command())
    assert record.run(start("fix")) == [("w.fix.3", "w/fix")]  # .start is taken
    assert record.run(command()) == [("w.fix.4", "w/fix")]
    record.run(done("fix"))
    assert record.run(done("fix")) == [("w.fix.5", None)]  # .done is taken; no step runs now
    # In one batch too: the second start collides with the first.
    assert record.ids(start("other"), start("other"), command()) == [
        "w.other.start",
        "w.other.1",
        "w.other.2",
    ]
    ids = [e.payload.operation_id for e in record.log.events if e.type == "tool_request"]
    assert len(ids) == len(set(ids))


def test_calls_outside_any_step_are_counted_by_subagent() -> None:
    record = Record()
    assert record.run(command(), command()) == [("w.1", None), ("w.2", None)]
    record.run(start("s"), command(), done("s"))
    assert record.run(command()) == [("w.3", None)]
    # An update_plan without a step is an ordinary call; so is any other tool.
    assert record.ids(ProposedCall("update_plan", {"status": "done"})) == ["w.4"]


def test_a_reopened_step_is_counted_in_its_next_round() -> None:
    session = Session()  # subagent impl, steps impl/test and impl/publish, done in round 1
    session.log.add(ScopeChange(request_version=2, summary="new goal", goal="fix it all", by="dana"))
    assert session.state().tasks["impl/test"].round == 2
    record = Record(session.log, subagent="impl")
    assert record.run(start("test"), command()) == [
        ("impl.test@2.start", None),
        ("impl.test@2.1", "impl/test"),
    ]
    assert record.run(command(), done("test")) == [
        ("impl.test@2.2", "impl/test"),
        ("impl.test@2.done", "impl/test"),
    ]
    # A step the record never saw starts in round 1.
    assert record.ids(start("new")) == ["impl.new.start"]


def test_an_id_the_executor_recorded_already_is_kept_and_counted() -> None:
    record = Record()
    record.run(start("s"))
    assert record.ids(ProposedCall("run_command", {"command": "ls"}, "w.s.7"), command()) == [
        "w.s.7",
        "w.s.8",
    ]


def test_a_remote_call_recorded_without_a_request_takes_its_id() -> None:
    record = Record()
    record.run(start("s"))
    # A call the remote agent asked for, refused for its arguments: it never gets a request.
    remote = {"executor": "openai-agents", "subagent": "w", "call_id": "call_x", "operation_id": "w.s.1"}
    record.log.add(Remote(kind=RemoteKind.CALL, tool="run_command", **remote), actor=WORKER)
    record.log.add(Remote(kind=RemoteKind.CALL_REFUSED, detail="no command", **remote), actor=WORKER)
    assert record.ids(command()) == ["w.s.2"]


def test_each_subagent_counts_its_own_and_a_step_name_never_breaks_the_id() -> None:
    log = LogBuilder()
    one, two = Record(log, "one"), Record(log, "two")
    one.run(start("s"), command())
    assert two.run(start("s"), command()) == [("two.s.start", None), ("two.s.1", "two/s")]
    assert one.ids(command()) == ["one.s.2"]
    assert one.ids(start("Fix the parser. @now")) == ["one.Fix-the-parser---now.start"]
    assert one.ids(start("x" * 100))[0] == f"one.{'x' * 64}.start"


def test_a_call_is_found_by_the_id_its_executor_gave_it() -> None:
    log = LogBuilder()
    # A plan's call it named w.s.2 (an update_plan that starts step t), derived as w.t.start.
    log.add(
        ToolRequest(
            operation_id="w.t.start",
            tool="update_plan",
            effect=EffectClass.IDEMPOTENT,
            subagent="w",
            provider_call_id="w.s.2",
        ),
        actor=WORKER,
    )
    log.add(
        ToolRequest(operation_id="w.s.1", tool="run_command", effect=EffectClass.IDEMPOTENT), actor=WORKER
    )
    state = fold(log.events)
    assert state.operations["w.t.start"].provider_call_id == "w.s.2"
    found = state.operation_of_call("w", "w.s.2")
    assert found is not None and found.operation_id == "w.t.start"
    found = state.operation_of_call("w", "w.s.1")  # recorded under its own id
    assert found is not None and found.operation_id == "w.s.1"
    # w.t.start is another call's operation: the plan's own w.t.start has not been made yet.
    assert state.operation_of_call("w", "w.t.start") is None
    assert state.operation_of_call("w", "w.s.9") is None
