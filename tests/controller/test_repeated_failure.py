"""A harness that ends the same way at the same point three times in a row gets no fourth pod: the
session is stalled (`RepeatedFailure`) until something moves the point it fails at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from belay.controller.recovery import Action, HarnessDecision, HarnessPod, decide_harness, failure_backoff
from belay.journal.events import Lifecycle, LifecycleKind, Payload, ScopeChange, UserInput
from belay.journal.phase import Phase, phase_of
from belay.journal.state import SessionState, fold
from belay.views.status.build import session_status
from belay.views.status.model import ConditionType
from tests.journal.fixtures import LogBuilder

CRASH = "HarnessError: APIConnectionError: Connection error."


def crashed(*ends: tuple[str, str], then: Payload | None = None) -> SessionState:
    """Attempts 1..n, each started and ended with (kind, error) of `ends`."""
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    for n, (kind, error) in enumerate(ends, start=1):
        log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=n, lease=n))
        reason, detail = error.split(": ", 1)
        log.add(Lifecycle(kind=LifecycleKind(kind), attempt=n, reason=reason, detail=detail))
    if then is not None:
        log.add(then)
    return fold(log.events)


def decide(state: SessionState) -> Action:
    failed = HarnessPod(
        name=f"s-harness-{state.lifecycle.attempt}", index=state.lifecycle.attempt, phase="Failed"
    )
    return decide_harness(state, [failed], lease=state.lifecycle.attempt, max_attempts=10).action


def test_the_third_identical_failure_stops_the_pods_and_stalls_the_session() -> None:
    twice = crashed(("harness_finished", CRASH), ("harness_finished", CRASH))
    assert decide(twice) == Action.REPLACE
    thrice = crashed(*[("harness_finished", CRASH)] * 3)
    decision = decide_harness(thrice, [], lease=3, max_attempts=10)
    assert decision.action == Action.STOP and decision.index is None
    assert (
        decision.why.startswith("RepeatedFailure: 3 attempts in a row ended the same way (attempts 1 to 3)")
        and CRASH in decision.why
    )
    assert phase_of(thrice) == Phase.RECOVERY_FAILED
    stalled = session_status(thrice).condition(ConditionType.STALLED)
    assert stalled is not None and stalled.reason == "RepeatedFailure" and CRASH in stalled.message


def test_lost_pods_count_by_their_error_whatever_the_pod() -> None:
    ends = [("harness_lost", f"HarnessPodLost: pod s-harness-{n}: the pod failed") for n in (1, 2, 3)]
    assert decide(crashed(*ends)) == Action.STOP


def test_a_different_error_or_a_moved_point_starts_the_count_again() -> None:
    other = "HarnessError: RuntimeError: something else"
    assert decide(
        crashed(("harness_finished", CRASH), ("harness_finished", other), ("harness_finished", CRASH))
    ) == (Action.REPLACE)
    # A clean end between them breaks the row.
    assert (
        decide(
            crashed(
                ("harness_finished", CRASH),
                ("harness_stopped", "SIGTERM: stopped"),
                *[("harness_finished", CRASH)] * 2,
            )
        )
        == Action.REPLACE
    )
    # An amend after the third moves the point: the next attempt may run.
    amended = crashed(
        *[("harness_finished", CRASH)] * 3,
        then=ScopeChange(request_version=2, summary="differently", goal="g, differently"),
    )
    assert decide(amended) == Action.REPLACE and phase_of(amended) != Phase.RECOVERY_FAILED


def backoff(state: SessionState, after_s: float, base_s: float = 10.0) -> HarnessDecision:
    """The decision for `state` `after_s` seconds after the operator saw its latest end."""
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    replace = HarnessDecision(Action.REPLACE, None)
    return failure_backoff(state, replace, seen, seen + timedelta(seconds=after_s), base_s)


def test_the_second_identical_failure_waits_before_the_next_attempt() -> None:
    # A first failure is replaced at once: a lost pod must come back fast.
    assert backoff(crashed(("harness_finished", CRASH)), after_s=0).action == Action.REPLACE
    twice = crashed(("harness_finished", CRASH), ("harness_finished", CRASH))
    waiting = backoff(twice, after_s=4)
    assert waiting.action == Action.BACK_OFF and waiting.index is None
    assert (
        waiting.retry_in_s == 6
        and "2 attempts in a row ended the same way (attempts 1 and 2)" in waiting.why
        and CRASH in waiting.why
    )
    assert backoff(twice, after_s=10).action == Action.REPLACE
    # Each further repeat waits twice as long (were the limit higher than three).
    four = crashed(*[("harness_finished", CRASH)] * 4)
    assert backoff(four, after_s=30).action == Action.BACK_OFF
    assert backoff(four, after_s=40).action == Action.REPLACE
    # A different error, or a decision other than a replacement, is never held back.
    other = crashed(("harness_finished", CRASH), ("harness_finished", "HarnessError: RuntimeError: else"))
    assert backoff(other, after_s=0).action == Action.REPLACE
    stop = HarnessDecision(Action.STOP, None)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert failure_backoff(twice, stop, now, now, 10.0) is stop


def test_pods_that_fail_before_their_harness_starts_are_counted_and_stop_at_the_third() -> None:
    """A harness that dies before it records its start (a bad image, a crash on import) leaves
    nothing in the record: the operator records the loss itself, so it counts like any other."""
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    index = 0
    for _ in range(3):
        state = fold(log.events)
        failed = HarnessPod(name=f"s-harness-{index}", index=index, phase="Failed")
        decision = decide_harness(state, [failed], lease=index, max_attempts=10)
        assert decision.action == Action.REPLACE and decision.lost_attempt == index + 1, decision
        assert decision.why == "the pod failed before its attempt started"
        log.add(
            Lifecycle(
                kind=LifecycleKind.HARNESS_LOST,
                attempt=decision.lost_attempt,
                reason="HarnessPodLost",
                detail=f"pod {failed.name}: {decision.why}",
            )
        )
        index = index + 2  # the operator fences the next lease, its pod's harness takes the one above
    stalled = decide_harness(fold(log.events), [], lease=index, max_attempts=10)
    assert stalled.action == Action.STOP and stalled.why.startswith("RepeatedFailure: 3 attempts"), stalled
