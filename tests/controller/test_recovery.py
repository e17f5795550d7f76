from __future__ import annotations

from belay.controller.recovery import Action, HarnessPod, decide_harness
from belay.journal.events import Lifecycle, LifecycleKind, UserInput
from belay.journal.state import SessionState, fold
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


def test_a_lost_sandbox_ends_the_attempt_that_used_it() -> None:
    decision = decide_harness(
        running(attempt=1), [pod(0)], lease=1, max_attempts=5, sandboxes_lost=["s-sbx-a-0"]
    )
    assert (decision.action, decision.index, decision.lost_attempt) == (Action.REPLACE, 2, 1)
    assert decision.lost_pod == "s-harness-0"
    assert decision.why == "sandbox pod s-sbx-a-0 lost"
