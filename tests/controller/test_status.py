from __future__ import annotations

from datetime import UTC, datetime, timedelta

from belay.api.status import ConditionType, HarnessPodStatus, Phase
from belay.controller.recovery import Action, HarnessPod, decide_harness
from belay.controller.status import OperatorProblem, session_status_patch, transition_events
from belay.journal.events import (
    ApprovalRequest,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    UserInput,
)
from belay.journal.phase import LIVENESS_TIMEOUT_S, Liveness, interruption_of, phase_of
from belay.journal.state import SessionState, fold
from belay.views.status.build import waiting_on
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


# --------------------------------------------------------------------------------------------------
# The operator's status and its harness decision read liveness through the journal's phase_of


def operator_liveness(
    state: SessionState, *, silent_for_s: float, holder: str = "pod:s-harness-0"
) -> Liveness:
    renewed = T0 - timedelta(seconds=silent_for_s)
    return Liveness(
        now=T0,
        lease=state.lifecycle.lease,
        holder=holder,
        renewed_lease=state.lifecycle.lease,
        renewed_at=renewed,
        recovered_by="operator",
    )


def running_with(*payloads: Payload) -> SessionState:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(Task(task_id="t1", status=TaskStatus.RUNNING, owner="worker"))
    for payload in payloads:
        log.add(payload)
    return fold(log.events)


def test_the_status_phase_is_the_journal_phase_for_every_liveness() -> None:
    recovery_failed = running_with(Lifecycle(kind=LifecycleKind.RECOVERY_FAILED, reason="UndeclaredState"))
    for state in (running_with(), recovery_failed, state_after(LifecycleKind.HARNESS_STARTED)):
        for silent_for_s in (1.0, LIVENESS_TIMEOUT_S + 1):
            liveness = operator_liveness(state, silent_for_s=silent_for_s)
            status = session_status_patch(
                state, previous_status=None, generation=1, now=T0, liveness=liveness
            )
            assert status.phase == phase_of(state, liveness)
            assert status.waiting_on == waiting_on(state, status.phase, interruption_of(state, liveness))


def test_a_silent_attempt_shows_recovering_and_the_operator_replaces_its_live_pod() -> None:
    state = running_with(ToolRequest(operation_id="op-1", tool="write_file", effect=EffectClass.IDEMPOTENT))
    fresh = operator_liveness(state, silent_for_s=1.0)
    silent = operator_liveness(state, silent_for_s=LIVENESS_TIMEOUT_S + 1)
    pod = HarnessPod(name="s-harness-0", index=0, phase="Running")

    assert decide_harness(state, [pod], lease=1, max_attempts=5, liveness=fresh).action == Action.KEEP
    ok = session_status_patch(state, previous_status=None, generation=1, now=T0, liveness=fresh)
    assert ok.phase == Phase.RUNNING and ok.interruption is None

    decision = decide_harness(state, [pod], lease=1, max_attempts=5, liveness=silent)
    assert (decision.action, decision.index, decision.lost_attempt) == (Action.REPLACE, 2, 1)
    assert decision.why.startswith("attempt 1 stopped renewing its lease")
    status = session_status_patch(
        state, previous_status=ok.to_status(), generation=1, now=T0, liveness=silent
    )
    assert status.phase == Phase.RECOVERING
    recovering = status.condition(ConditionType.RECOVERING)
    assert recovering is not None and (recovering.status, recovering.reason) == ("True", "HarnessSilent")
    body = status.to_status()
    assert body["interruption"]["operations"][0]["operationId"] == "op-1"
    assert "will be settled by the next attempt" in body["interruption"]["operations"][0]["settled"]
    assert "command" not in body["interruption"]  # in a cluster nobody has to type anything
    assert ("Warning", "HarnessSilent") in {
        (e.type, e.reason) for e in transition_events(ok.to_status(), status)
    }


def test_a_pod_whose_harness_has_not_taken_the_lease_is_not_judged_by_old_renewals() -> None:
    state = running_with()
    # The lease is held by another pod's harness (or by the operator's fence): its silence is
    # not this pod's.
    stale = operator_liveness(state, silent_for_s=LIVENESS_TIMEOUT_S + 1, holder="pod:s-harness-7")
    pod = HarnessPod(name="s-harness-0", index=0, phase="Running")
    assert decide_harness(state, [pod], lease=1, max_attempts=5, liveness=stale).action == Action.KEEP
