from __future__ import annotations

from datetime import UTC, datetime, timedelta

from belay.controller import names
from belay.controller.record import sandbox_lost_write
from belay.controller.recovery import (
    Action,
    HarnessPod,
    SandboxPod,
    decide_harness,
    sandbox_losses,
    sandbox_replacement,
)
from belay.journal.events import (
    DerivedFrom,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
)
from belay.journal.phase import Liveness, Phase
from belay.journal.state import SessionState, apply, fold
from belay.views.status.build import session_status
from belay.views.status.model import ConditionType, Reason
from tests.journal.fixtures import LogBuilder


def running(attempt: int = 1, *extra: Lifecycle) -> SessionState:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=attempt, lease=attempt))
    for payload in extra:
        log.add(payload)
    return fold(log.events)


def pod(index: int, phase: str = "Running", deleting: bool = False) -> HarnessPod:
    return HarnessPod(name=f"s-harness-{index}", index=index, phase=phase, deleting=deleting)  # type: ignore[arg-type]


def test_a_new_session_starts_its_first_attempt() -> None:
    assert decide_harness(SessionState(), [], lease=0, max_attempts=5).action == Action.START
    assert decide_harness(SessionState(), [], lease=0, max_attempts=5).index == 0
    # The operator records the request before the first pod: that record is still a new session.
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    decision = decide_harness(fold(log.events), [], lease=0, max_attempts=5)
    assert (decision.action, decision.index) == (Action.START, 0)


def test_a_live_pod_is_kept_pending_or_running() -> None:
    for phase in ("Pending", "Running", "Unknown"):
        decision = decide_harness(running(), [pod(0, phase)], lease=1, max_attempts=5)
        assert (decision.action, decision.index) == (Action.KEEP, 0)


def test_a_deleted_pod_is_recorded_lost_and_the_next_attempt_is_above_the_lease() -> None:
    decision = decide_harness(running(attempt=1), [], lease=1, max_attempts=5)
    assert decision.action == Action.REPLACE
    assert decision.index == 2
    assert decision.lost_attempt == 1
    assert decision.why == "no harness pod"


def test_failed_terminating_or_early_exit_pods_are_lost_too() -> None:
    for observed, why in [
        (pod(0, "Failed"), "the pod failed"),
        (pod(0, "Running", deleting=True), "the pod is being deleted"),
        (pod(0, "Succeeded"), "the harness exited before the session ended"),
    ]:
        decision = decide_harness(running(), [observed], lease=1, max_attempts=5)
        assert (decision.action, decision.lost_pod, decision.why) == (Action.REPLACE, "s-harness-0", why)


def test_the_newest_pod_decides_and_old_ones_do_not_count() -> None:
    decision = decide_harness(
        running(attempt=3), [pod(0, "Failed"), pod(2, "Running")], lease=3, max_attempts=5
    )
    assert (decision.action, decision.index) == (Action.KEEP, 2)


def test_a_pod_lost_before_its_harness_started_records_no_lost_attempt() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1))
    decision = decide_harness(fold(log.events), [], lease=2, max_attempts=5)
    assert (decision.action, decision.index, decision.lost_attempt) == (Action.REPLACE, 3, None)


def test_after_max_attempts_losses_it_gives_up() -> None:
    lost = [Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=n) for n in (1, 2)]
    state = running(1, *lost)
    assert decide_harness(state, [], lease=4, max_attempts=2).action == Action.GIVE_UP
    assert decide_harness(state, [], lease=4, max_attempts=3).action == Action.REPLACE


def test_ended_or_unrecoverable_sessions_run_no_pod() -> None:
    done = running(1, Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="done"))
    assert decide_harness(done, [pod(0, "Succeeded")], lease=1, max_attempts=5).action == Action.STOP
    failed = running(1, Lifecycle(kind=LifecycleKind.SESSION_FAILED, reason="AttemptsExhausted"))
    assert decide_harness(failed, [], lease=1, max_attempts=5).action == Action.STOP
    stuck = running(1, Lifecycle(kind=LifecycleKind.RECOVERY_FAILED, reason="UndeclaredState"))
    decision = decide_harness(stuck, [pod(0, "Failed")], lease=1, max_attempts=5)
    assert (decision.action, decision.index) == (Action.STOP, None)
    restored = running(
        1,
        Lifecycle(kind=LifecycleKind.RECOVERY_FAILED, reason="UndeclaredState"),
        Lifecycle(kind=LifecycleKind.RESTORED),
    )
    assert decide_harness(restored, [pod(0, "Failed")], lease=1, max_attempts=5).action == Action.REPLACE


def test_a_lost_sandbox_does_not_end_the_attempt_that_uses_it() -> None:
    state = running(1, Lifecycle(kind=LifecycleKind.SANDBOX_LOST, subagent="a", detail="pod s-sbx-a-0"))
    assert (decide_harness(state, [pod(0)], lease=1, max_attempts=5).action) == Action.KEEP


def sandbox(name: str, phase: str = "Running", deleting: bool = False) -> SandboxPod:
    return SandboxPod(name=name, phase=phase, deleting=deleting)  # type: ignore[arg-type]


def test_a_current_sandbox_pod_deleted_ended_or_gone_after_being_seen_is_lost() -> None:
    expected = {"a": "s-sbx-a-0", "b": "s-sbx-b-0", "c": "s-sbx-c-0-r1", "d": "s-sbx-d-0"}
    observed = {
        "s-sbx-a-0": sandbox("s-sbx-a-0", deleting=True),
        "s-sbx-b-0": sandbox("s-sbx-b-0", "Failed"),
        "s-sbx-d-0": sandbox("s-sbx-d-0", "Succeeded"),
    }
    losses = sandbox_losses(expected, observed, seen={"s-sbx-c-0-r1"})
    assert [(loss.subagent, loss.pod, loss.why) for loss in losses] == [
        ("a", "s-sbx-a-0", "the pod is being deleted"),
        ("b", "s-sbx-b-0", "the pod failed"),
        ("c", "s-sbx-c-0-r1", "the pod is gone"),
        ("d", "s-sbx-d-0", "the sandbox server exited"),
    ]


def test_a_sandbox_pod_not_created_yet_or_live_or_of_another_attempt_is_not_lost() -> None:
    expected = {"a": "s-sbx-a-2", "b": "s-sbx-b-2"}
    observed = {
        "s-sbx-a-2": sandbox("s-sbx-a-2", "Pending"),
        "s-sbx-b-0": sandbox("s-sbx-b-0", "Failed"),  # the previous attempt's: not expected any more
    }
    assert sandbox_losses(expected, observed, seen={"s-sbx-b-0"}) == []


def test_a_recorded_loss_numbers_the_replacement_and_shows_as_recovering_until_restored() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    assert sandbox_replacement(fold(log.events), "a") == 0
    write = sandbox_lost_write("uid-1", "a", "s-sbx-a-0", "the pod is being deleted", 1)
    assert write.idempotency_key == "sandbox-lost/uid-1/a/1"
    [draft] = write.drafts
    assert isinstance(draft.payload, Lifecycle)
    assert (draft.payload.kind, draft.payload.subagent, draft.payload.detail) == (
        LifecycleKind.SANDBOX_LOST,
        "a",
        "pod s-sbx-a-0: the pod is being deleted",
    )
    log.add(draft.payload, actor=draft.actor)
    lost = fold(log.events)
    assert sandbox_replacement(lost, "a") == 1
    status = session_status(lost)
    recovering = next(c for c in status.conditions if c.type == ConditionType.RECOVERING)
    assert (status.phase, recovering.status, recovering.reason) == (
        Phase.RECOVERING,
        "True",
        Reason.SANDBOX_REPLACED,
    )
    assert "sandbox of a lost" in recovering.message
    log.add(Lifecycle(kind=LifecycleKind.SANDBOX_REPLACED, subagent="a"))
    log.add(Lifecycle(kind=LifecycleKind.RESTORED, subagent="a", checkpoint_id="a/inputs"))
    restored = fold(log.events)
    assert sandbox_replacement(restored, "a") == 1
    recovering = next(c for c in session_status(restored).conditions if c.type == ConditionType.RECOVERING)
    assert (recovering.status, recovering.reason) == ("False", Reason.NOT_RECOVERING)


def test_the_lost_sandbox_of_a_finished_subagent_is_counted_but_nothing_waits_on_it() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(Task(task_id="a", status=TaskStatus.DONE, owner="a"))
    state = apply(fold(log.events), log.add(Lifecycle(kind=LifecycleKind.SANDBOX_LOST, subagent="a")))
    assert sandbox_replacement(state, "a") == 1
    assert not state.lifecycle.recovering and state.lifecycle.lost_sandboxes == ()


def renewing(pod_name: str, lease: int = 1) -> Liveness:
    now = datetime.now(UTC)
    return Liveness(
        now=now,
        lease=lease,
        holder=names.harness_holder(pod_name),
        renewed_lease=lease,
        renewed_at=now,
        recovered_by="operator",
    )


def test_a_deleted_pod_whose_harness_still_renews_is_waited_for_while_it_stops() -> None:
    deleting = pod(0, "Running", deleting=True)
    decision = decide_harness(
        running(), [deleting], lease=1, max_attempts=5, liveness=renewing(deleting.name)
    )
    assert (decision.action, decision.index) == (Action.WAIT, 0)
    # Not renewing (frozen, or already killed): lost, as before.
    silent = renewing(deleting.name).model_copy(
        update={"renewed_at": datetime.now(UTC) - timedelta(minutes=5)}
    )
    decision = decide_harness(running(), [deleting], lease=1, max_attempts=5, liveness=silent)
    assert decision.action == Action.REPLACE and decision.lost_attempt == 1


def test_a_pod_that_ended_after_a_clean_stop_is_replaced_without_a_loss() -> None:
    stopped = running(
        1,
        Lifecycle(
            kind=LifecycleKind.HARNESS_STOPPED,
            attempt=1,
            reason="SIGTERM",
            detail="1 call in flight finished (a.b.1)",
            operations=("a.b.1",),
        ),
    )
    for pods in ([], [pod(0, "Failed")], [pod(0, "Running", deleting=True)]):
        decision = decide_harness(stopped, pods, lease=1, max_attempts=5)
        assert (decision.action, decision.index, decision.lost_attempt) == (Action.REPLACE, 2, None)
        assert decision.why == "attempt 1 stopped cleanly on SIGTERM: 1 call in flight finished (a.b.1)"
    # A clean stop is not a loss: it does not count against maxAttempts.
    assert stopped.lifecycle.clean_stops == 1 and stopped.lifecycle.harness_lost == 0
    gone = Liveness(now=datetime.now(UTC), lease=1, holder="pod:s-harness-0", recovered_by="operator")
    status = session_status(stopped, liveness=gone)
    ready = next(c for c in status.conditions if c.type == ConditionType.READY)
    assert (status.phase, ready.reason) == (Phase.RECOVERING, Reason.HARNESS_STOPPED), status
    assert ready.message.startswith("attempt 1 stopped cleanly on SIGTERM"), ready.message
    assert "the operator starts attempt 2" in ready.message, ready.message


def test_a_finished_session_reopened_by_a_scope_change_gets_its_next_attempt() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(Task(task_id="impl", status=TaskStatus.RUNNING, owner="impl"))
    log.add(Task(task_id="impl/fix", status=TaskStatus.RUNNING, owner="impl", request_parts=("goal",)))
    log.add(ToolRequest(operation_id="op", tool="t", effect=EffectClass.IDEMPOTENT, step="impl/fix"))
    log.add(
        ToolResult(
            operation_id="op",
            ok=True,
            result_id="op",
            derived_from=DerivedFrom(request_version=1, request_parts=("goal",)),
        )
    )
    log.add(Task(task_id="impl/fix", status=TaskStatus.VERIFIED))
    log.add(Task(task_id="impl", status=TaskStatus.DONE))
    log.add(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="done"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=1))
    done = fold(log.events)
    assert decide_harness(done, [], lease=1, max_attempts=5).action == Action.STOP
    log.add(ScopeChange(request_version=2, summary="more", goal="fix the parser and the docs"))
    decision = decide_harness(fold(log.events), [], lease=1, max_attempts=5)
    assert (decision.action, decision.index, decision.lost_attempt) == (Action.REPLACE, 2, None)
    assert decision.why == "a scope change or a rejection reopened the finished session"
