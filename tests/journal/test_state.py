from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from belay.journal.dispatch import EVENT_CLASSES, missing
from belay.journal.events import (
    Actor,
    DerivedFrom,
    EffectClass,
    ModelOutput,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolRequestEvent,
    ToolResult,
    UserInput,
)
from belay.journal.state import EMPTY, RECENT_LIMIT, FoldError, SessionState, apply, fold
from belay.journal.state.reducer import HANDLERS
from tests.journal.fixtures import LogBuilder, realistic_log
from tests.journal.strategies import logs, splits

PROPERTY = settings(max_examples=150, deadline=None)


def test_the_fold_has_a_handler_for_every_event_class() -> None:
    assert missing(HANDLERS) == ()


def test_the_check_of_the_fold_names_a_handler_taken_out_of_it() -> None:
    for removed in EVENT_CLASSES:
        without = {cls: handler for cls, handler in HANDLERS.items() if cls is not removed}
        assert missing(without) == (removed,)
    assert HANDLERS[ToolRequestEvent].__name__ == "on_tool_request"


@PROPERTY
@given(data=st.data(), events=logs())
def test_folding_one_at_a_time_equals_folding_in_any_split(data: st.DataObject, events: list) -> None:
    one_at_a_time = EMPTY
    for event in events:
        one_at_a_time = apply(one_at_a_time, event)
    batched = EMPTY
    for batch in data.draw(splits(events)):
        batched = fold(batch, batched)
    assert batched == one_at_a_time
    assert batched.last_seq == len(events)


@PROPERTY
@given(events=logs(max_size=30))
def test_apply_never_changes_the_state_it_was_given(events: list) -> None:
    states = [EMPTY]
    for event in events:
        states.append(apply(states[-1], event))
    # Re-folding each prefix from scratch gives the very state kept from before: nothing later
    # reached back and changed an earlier state.
    for index, state in enumerate(states):
        assert fold(events[:index]) == state


def test_reapplying_an_event_already_folded_changes_nothing() -> None:
    events = realistic_log()
    state = fold(events)
    assert fold(events[-5:], state) is state


def test_a_gap_or_another_session_is_refused() -> None:
    events = realistic_log()
    state = fold(events[:3])
    with pytest.raises(FoldError, match="gap"):
        apply(state, events[5])
    other = LogBuilder(session_id="other")
    for _ in range(4):
        other.add(ModelOutput(text="x"))
    with pytest.raises(FoldError, match="session"):
        apply(state, other.events[3])


def test_realistic_log_state() -> None:
    state = fold(realistic_log())
    assert state.session_id == "parser-fix"
    assert state.request.version == 2
    assert state.request.parts["target"] == "Python 3.12"
    assert [c.summary for c in state.scope_changes] == ["target Python 3.12 instead of 3.11"]
    assert state.tasks["reproduce"].ever_verified
    assert [t.status for t in state.tasks["reproduce"].history] == ["planned", "running", "done", "verified"]
    assert state.tasks["publish"].status == TaskStatus.RUNNING
    assert state.current_step == "publish"
    assert [a.approval_id for a in state.pending_approval_records()] == ["apr-publish"]
    assert [w.wait_id for w in state.open_wait_records()] == [
        "review-patch",
        "reconcile-op-push-1",
        "approve-publish",
        "ci-green",
    ]
    assert set(state.unknown_outcomes) == {"op-push-1"}
    assert set(state.open_operations) == {"op-push-1", "op-publish-1"}
    assert list(state.deliverables) == ["parser.patch"]
    assert set(state.subagents) == {"researcher", "implementer"}
    assert state.latest_verified_checkpoint is not None
    assert state.latest_verified_checkpoint.checkpoint.checkpoint_id == "cp-1"
    assert (
        state.lifecycle.attempt == 2 and state.lifecycle.harness_lost == 1 and state.lifecycle.restores == 1
    )
    assert state.input_tokens == 1200 and state.output_tokens == 300


def _request(log: LogBuilder, op: str, effect: EffectClass = EffectClass.READ_ONLY) -> None:
    log.add(ToolRequest(operation_id=op, tool="t", effect=effect))


def test_tool_result_closes_its_operation() -> None:
    log = LogBuilder()
    _request(log, "op1")
    _request(log, "op2")
    log.add(ToolResult(operation_id="op1", ok=True, result_id="r1"))
    state = fold(log.events)
    assert set(state.open_operations) == {"op2"}
    op1 = state.operation("op1")
    assert op1 is not None and op1.ok and op1.result_seq == 3 and op1.result_id == "r1"
    assert state.results["r1"].valid


def test_task_fields_carry_over_when_a_transition_omits_them() -> None:
    log = LogBuilder()
    log.add(
        Task(task_id="t", title="Title", owner="researcher", deliverable="d.md", status=TaskStatus.PLANNED)
    )
    log.add(Task(task_id="t", status=TaskStatus.RUNNING), actor=Actor(subagent="researcher"))
    task = fold(log.events).tasks["t"]
    assert (task.title, task.owner, task.deliverable, task.status) == (
        "Title",
        "researcher",
        "d.md",
        "running",
    )
    assert task.transitions == 2


def test_empty_state_is_the_default() -> None:
    assert SessionState() == EMPTY
    assert fold([]) is EMPTY


def test_scope_change_records_which_parts_really_changed() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g", parts={"a": "1", "b": "2", "c": "3"}))
    log.add(
        ToolResult(
            operation_id="x",
            ok=True,
            result_id="r",
            derived_from=DerivedFrom(request_version=1, request_parts=("b",)),
        )
    )
    log.add(
        ScopeChange(
            request_version=2, summary="s", changed_parts={"a": "1", "b": "22"}, removed_parts=("c", "z")
        )
    )
    state = fold(log.events)
    change = state.scope_changes[-1]
    assert change.changed_parts == ("b",)  # "a" was given its old value
    assert change.removed_parts == ("c",)  # "z" never existed
    assert state.request.parts == {"a": "1", "b": "22"}
    assert change.invalidated == ("r",)


@PROPERTY
@given(events=logs(max_size=40))
def test_records_built_on_the_fast_path_pass_their_own_validation(events: list) -> None:
    state = fold(events)
    records = [
        state.request,
        *state.scope_changes,
        *state.rejections,
        *(record for records in state.subagent_checkpoints.values() for record in records),
        *state.tasks.values(),
        *state.operations.values(),
        *state.approvals.values(),
        *state.artifacts.values(),
        *state.notes.values(),
        *state.waits.values(),
        *state.results.values(),
        *state.subagents.values(),
        state.lifecycle,
        *([state.latest_checkpoint] if state.latest_checkpoint else []),
    ]
    for record in records:
        again = type(record).model_validate(record.model_dump())
        assert again == record
        assert list(again.__dict__) == list(record.__dict__)  # same field order as validation


def test_apply_shares_everything_an_event_does_not_touch() -> None:
    """No copy of the whole state per event: untouched collections are the very same objects."""
    state = fold(realistic_log())
    log = LogBuilder()
    for event in realistic_log():
        log.add(event.payload, parent_seq=event.parent_seq, actor=event.actor)
    log.add(ModelOutput(text="thinking"))
    after_output = apply(state, log.events[-1])
    for name in ("operations", "tasks", "approvals", "artifacts", "notes", "waits", "results", "request"):
        assert getattr(after_output, name) is getattr(state, name)
    log.add(ToolRequest(operation_id="op-new", tool="t", effect=EffectClass.READ_ONLY))
    after_request = apply(after_output, log.events[-1])
    assert after_request.operations is not after_output.operations
    assert after_request.operations["op-test-1"] is after_output.operations["op-test-1"]
    for name in ("tasks", "approvals", "artifacts", "notes", "waits", "results"):
        assert getattr(after_request, name) is getattr(after_output, name)


@PROPERTY
@given(events=logs())
def test_the_indexes_of_external_operations_say_what_walking_them_all_says(events: list) -> None:
    state = fold(events)
    every = state.external_operation_records()
    assert state.recent_external_operations == tuple(op.operation_id for op in every)[-RECENT_LIMIT:]
    assert state.attention_operation_records() == [
        op for op in every if op.operation_id in state.unknown_outcomes or (op.has_result and not op.ok)
    ]
