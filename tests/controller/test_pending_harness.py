"""A harness pod that stays Pending (an image it cannot pull, a Secret it loads that is missing, no
node for it), as pure decisions: kept until its start deadline with the cause shown and the next look
scheduled at the deadline; past it, its attempt is lost with the cause in the record; the same cause
three times in a row stalls the session with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
)

from belay.controller import names
from belay.controller.observed import harness_pods
from belay.controller.record import harness_lost_write
from belay.controller.recovery import Action, HarnessPod, decide_harness, pending_cause
from belay.journal.events import UserInput
from belay.journal.phase import Liveness, stalled_by_failure
from belay.journal.state import SessionState, fold
from tests.journal.fixtures import LogBuilder

DEADLINE_S = 300.0
NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
PULL = 'Back-off pulling image "registry.example/belay-harness:9.9": ErrImagePull: not found'


def requested() -> SessionState:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    return fold(log.events)


def pending(index: int, age_s: float, reason: str = "ImagePullBackOff", message: str = PULL) -> HarnessPod:
    return HarnessPod(
        name=f"s-harness-{index}",
        index=index,
        phase="Pending",
        created_at=NOW - timedelta(seconds=age_s),
        waiting_reason=reason,
        waiting_message=message,
    )


def liveness(lease: int) -> Liveness:
    return Liveness(now=NOW, lease=lease, holder="", recovered_by="operator")


def test_a_pending_pod_is_kept_until_its_deadline_with_its_cause_shown_and_a_look_at_the_deadline() -> None:
    current = pending(0, age_s=120)
    decision = decide_harness(requested(), [current], 0, 5, liveness(0), DEADLINE_S)
    assert (decision.action, decision.index) == (Action.KEEP, 0)
    assert decision.retry_in_s == DEADLINE_S - 120  # the operator looks again at the deadline
    reason, message = pending_cause(decision, [current], DEADLINE_S) or ("", "")
    assert reason == "ImagePullBackOff"
    assert f"harness pod s-harness-0 is Pending: ImagePullBackOff: {PULL}" in message
    assert "300 s after it was made" in message
    # A pod starting as pods do is kept and shown as nothing wrong.
    starting = pending(0, age_s=5, reason="ContainerCreating", message="")
    decision = decide_harness(requested(), [starting], 0, 5, liveness(0), DEADLINE_S)
    assert decision.action == Action.KEEP and pending_cause(decision, [starting], DEADLINE_S) is None


def test_a_pod_still_pending_at_its_deadline_ends_its_attempt_with_the_cause() -> None:
    decision = decide_harness(requested(), [pending(0, age_s=DEADLINE_S + 1)], 0, 5, liveness(0), DEADLINE_S)
    assert decision.action == Action.REPLACE and decision.index == 1
    # Its harness never started: lost under the number it would have had, so it counts.
    assert decision.lost_attempt == 1 and decision.lost_pod == "s-harness-0"
    assert decision.why == (
        f"the pod was still Pending at its start deadline (300 s): ImagePullBackOff: {PULL} "
        "before its attempt started"
    )
    # The scheduler's reason when no node takes it; none at all when nothing said why.
    unscheduled = pending(0, DEADLINE_S, reason="Unschedulable", message="0/3 nodes are available")
    decision = decide_harness(requested(), [unscheduled], 0, 5, liveness(0), DEADLINE_S)
    assert "Unschedulable: 0/3 nodes are available" in decision.why
    silent = pending(0, DEADLINE_S, reason="", message="")
    assert "no reason given" in decide_harness(requested(), [silent], 0, 5, liveness(0), DEADLINE_S).why


def test_only_a_pending_pod_has_a_start_deadline() -> None:
    old = HarnessPod(name="s-harness-0", index=0, phase="Running", created_at=NOW - timedelta(hours=5))
    decision = decide_harness(requested(), [old], 0, 5, liveness(0), DEADLINE_S)
    assert (decision.action, decision.retry_in_s) == (Action.KEEP, 0.0)
    # Without a deadline (or a time), a Pending pod is kept as before.
    stuck = pending(0, age_s=DEADLINE_S * 10)
    assert decide_harness(requested(), [stuck], 0, 5, liveness(0)).action == Action.KEEP


def test_the_same_cause_three_times_stalls_the_session_with_it() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    for lease in range(3):
        state = fold(log.events)
        decision = decide_harness(
            state, [pending(lease, DEADLINE_S + 5)], lease, 5, liveness(lease), DEADLINE_S
        )
        assert decision.action == Action.REPLACE and decision.lost_attempt is not None
        written = harness_lost_write("uid-1", decision.lost_attempt, decision.lost_pod, decision.why)
        log.add(written.drafts[0].payload)
    state = fold(log.events)
    reason, message = stalled_by_failure(state) or ("", "")
    assert reason == "RepeatedFailure"
    assert "3 attempts in a row ended the same way" in message
    assert f"ImagePullBackOff: {PULL}" in message
    decision = decide_harness(state, [], 3, 5, liveness(3), DEADLINE_S)
    assert decision.action == Action.STOP


def test_the_cause_is_read_from_the_pods_status() -> None:
    def pod(status: V1PodStatus) -> V1Pod:
        labels = {names.LABEL_COMPONENT: names.COMPONENT_HARNESS, names.LABEL_ATTEMPT: "2"}
        return V1Pod(
            metadata=V1ObjectMeta(name="s-harness-2", labels=labels, creation_timestamp=NOW), status=status
        )

    waiting = V1ContainerState(
        waiting=V1ContainerStateWaiting(
            reason="CreateContainerConfigError", message='secret "belay-stores" not found'
        )
    )
    [seen] = harness_pods(
        [
            pod(
                V1PodStatus(
                    phase="Pending",
                    container_statuses=[
                        V1ContainerStatus(
                            name="harness",
                            image="x",
                            image_id="",
                            ready=False,
                            restart_count=0,
                            state=waiting,
                        )
                    ],
                )
            )
        ]
    )
    assert (seen.index, seen.created_at) == (2, NOW)
    assert (seen.waiting_reason, seen.waiting_message) == (
        "CreateContainerConfigError",
        'secret "belay-stores" not found',
    )
    unscheduled = V1PodCondition(
        type="PodScheduled", status="False", reason="Unschedulable", message="no node"
    )
    [seen] = harness_pods([pod(V1PodStatus(phase="Pending", conditions=[unscheduled]))])
    assert (seen.waiting_reason, seen.waiting_message) == ("Unschedulable", "no node")
    [seen] = harness_pods([pod(V1PodStatus(phase="Running", container_statuses=[]))])
    assert seen.waiting_reason == ""
