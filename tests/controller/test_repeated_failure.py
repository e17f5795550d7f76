"""A harness that ends the same way at the same point three times in a row gets no fourth pod: the
session is stalled (`RepeatedFailure`) until something moves the point it fails at."""

from __future__ import annotations

from belay.controller.recovery import Action, HarnessPod, decide_harness
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
        decision.why.startswith("RepeatedFailure: attempts 1-3 ended the same way") and CRASH in decision.why
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
