from __future__ import annotations

from datetime import UTC, datetime, timedelta

from belay.api.status import ConditionType, HarnessPodStatus, Phase
from belay.controller.status import OperatorProblem, session_status_patch, transition_events
from belay.journal.events import ApprovalRequest, Lifecycle, LifecycleKind, UserInput
from belay.journal.state import SessionState, fold
from tests.journal.fixtures import LogBuilder, sha

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def state_after(*kinds: LifecycleKind) -> SessionState:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    for n, kind in enumerate(kinds, start=1):
        log.add(Lifecycle(kind=kind, attempt=n, lease=n))
    return fold(log.events)


def test_status_carries_generation_pods_and_kstatus_conditions() -> None:
    harness = HarnessPodStatus(pod="s-harness-0", attempt=0, lease=1, phase="Running")
    status = session_status_patch(
        state_after(LifecycleKind.HARNESS_STARTED),
        previous_status=None,
        generation=7,
        now=T0,
        harness=harness,
    )
    body = status.to_status()
    assert body["observedGeneration"] == 7
    assert body["harness"] == {"pod": "s-harness-0", "attempt": 0, "lease": 1, "phase": "Running"}
    assert body["phase"] == "Running"
    ready = status.condition(ConditionType.READY)
    assert ready is not None and ready.status == "True" and ready.observed_generation == 7
    assert status.condition(ConditionType.RECONCILING) is None  # abnormal-true only
    assert all(c["lastTransitionTime"] for c in body["conditions"])


def test_transition_times_change_only_with_status_and_events_follow_transitions() -> None:
    first = session_status_patch(
        state_after(LifecycleKind.HARNESS_STARTED), previous_status=None, generation=1, now=T0
    ).to_status()
    later = T0 + timedelta(minutes=5)
    lost = session_status_patch(
        state_after(LifecycleKind.HARNESS_STARTED, LifecycleKind.HARNESS_LOST),
        previous_status=first,
        generation=1,
        now=later,
    )
    assert lost.phase == Phase.RECOVERING
    times = {c.type: c.last_transition_time for c in lost.conditions}
    assert times[ConditionType.READY] == later
    assert times[ConditionType.WAITING_ON_USER] == T0
    assert times[ConditionType.RECOVERING] == later

    events = transition_events(first, lost)
    reasons = {(e.type, e.reason) for e in events}
    assert ("Normal", "PhaseChanged") in reasons
    assert ("Warning", "Restoring") in reasons  # Recovering turned True
    assert all("WaitingOnUser" not in e.message for e in events)
    assert transition_events(lost.to_status(), lost) == []


def test_pending_approvals_tell_the_kubectl_belay_command() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(
        ApprovalRequest(
            approval_id="approve-op-1",
            operation_id="op-1",
            tool="publish",
            payload_sha256=sha("p"),
            summary="s",
        )
    )
    status = session_status_patch(fold(log.events), previous_status=None, generation=1, now=T0)
    (pending,) = status.to_status()["pendingApprovals"]
    assert pending["command"] == "kubectl belay approve parser-fix approve-op-1"
    assert pending["payloadSha256"] == sha("p")


def test_an_operator_problem_turns_ready_false_and_flags_reconciling_or_stalled() -> None:
    state = state_after(LifecycleKind.HARNESS_STARTED)
    retrying = session_status_patch(
        state,
        previous_status=None,
        generation=1,
        now=T0,
        problem=OperatorProblem("StoreUnavailable", "down", stalls=False),
    )
    assert {
        c.type: (c.status, c.reason) for c in retrying.conditions if c.status == "True" or c.type == "Ready"
    } == {
        ConditionType.READY: ("False", "StoreUnavailable"),
        ConditionType.RECONCILING: ("True", "StoreUnavailable"),
    }
    stuck = session_status_patch(
        state, previous_status=None, generation=1, now=T0, problem=OperatorProblem("X", "y")
    )
    assert stuck.condition(ConditionType.STALLED) is not None
    assert stuck.condition(ConditionType.RECONCILING) is None
