"""What to do about the harness, as a pure decision over the record and the observed pods.

A harness pod that is gone, failed, or exited before the session ended is a lost attempt: the
operator records "harness lost", advances the fencing lease (so the old attempt, if it is in fact
still running somewhere, can no longer append) and starts the next attempt, which restores from the
last verified checkpoint. After `recovery.maxAttempts` losses it gives up and records why.

An attempt that ended abnormally at the same point with the same error as the one before it is
not replaced at once: the next attempt waits `failure_backoff_s`, doubled for each further repeat
(`failure_backoff`), and after REPEATED_FAILURE_LIMIT in a row none is started (`RepeatedFailure`).

A harness pod being deleted (or evicted) is told to stop with SIGTERM: while it still renews its
lease the operator waits for it to record its stop, and once the record shows the attempt stopped
cleanly (`harness_stopped`), its pod ending is no loss: the next attempt starts, nothing is
recorded lost, and nothing it finished is an unknown outcome.

A harness pod still Pending `start_deadline_s` after it was made (an image that cannot be pulled,
a Secret it loads that does not exist, no node that takes it) is a lost attempt too, recorded with
the reason the kubelet or the scheduler gives (`pending_past_deadline`); until then the reason is
shown while it waits (`pending_failure`), and the operator looks again at the deadline.

A sandbox pod lost under a live harness does not end the attempt: the operator records which one
and why, and starts a replacement; the harness restores it from the last verified checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from belay.api.agentsession import AgentSessionSpec
from belay.api.status import PodPhase
from belay.controller import names
from belay.harness.git_input import INPUT_UNAVAILABLE, git_input_label
from belay.journal.phase import ENDED_PHASES, Liveness, clean_stop, phase_of, recovery_failed
from belay.journal.state import SessionState
from belay.journal.state.repeats import (
    REPEATED_FAILURE,
    failure_point,
    repeated_failure,
    repeated_failure_text,
)

LIVE_PHASES: tuple[PodPhase, ...] = ("Pending", "Running", "Unknown")
# The longest wait before an attempt after repeated identical failures.
FAILURE_BACKOFF_CAP_S = 600.0
BACKING_OFF = "BackingOff"


# Why a pod waits that does not pass on its own: the kubelet's reasons for a container it cannot
# start, and the scheduler's for a pod no node takes.
PENDING_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "Unschedulable",
    }
)


@dataclass(frozen=True)
class HarnessPod:
    """What the operator sees of one harness pod. `waiting_reason` and `waiting_message`: why a
    Pending pod waits, as its container's waiting state or its scheduling condition says."""

    name: str
    index: int
    phase: PodPhase
    deleting: bool = False
    created_at: datetime | None = None
    waiting_reason: str = ""
    waiting_message: str = ""

    @property
    def live(self) -> bool:
        return self.phase in LIVE_PHASES and not self.deleting


class Action(StrEnum):
    START = "start"  # a new session: the first attempt
    KEEP = "keep"  # the current attempt is alive
    # The current attempt's pod is being deleted and its harness, told to stop, still renews its
    # lease: it records its stop before the next attempt starts.
    WAIT = "wait"
    REPLACE = "replace"  # the current attempt is lost: record it, fence it, start the next
    # The last attempt ended as the one before it did: the next starts once its backoff is over.
    BACK_OFF = "back_off"
    GIVE_UP = "give_up"  # too many losses: record the failure, start nothing
    STOP = "stop"  # the session ended (or recovery failed): no pods


@dataclass(frozen=True)
class HarnessDecision:
    action: Action
    # The attempt index whose pods should exist; None when no pod should.
    index: int | None
    # With REPLACE: the attempt the record shows running, to record as lost (None if none started).
    lost_attempt: int | None = None
    lost_pod: str = ""
    why: str = ""
    # With BACK_OFF: how long until the next attempt may start; with KEEP of a Pending pod: how
    # long until its start deadline.
    retry_in_s: float = 0.0


def current_pod(pods: list[HarnessPod]) -> HarnessPod | None:
    return max(pods, key=lambda p: p.index, default=None)


def silent_attempt(state: SessionState, pod: HarnessPod, liveness: Liveness | None) -> str:
    """Why the pod's attempt counts as lost although its pod looks alive: it holds the lease, the
    record shows it running, and it stopped renewing the lease. "" when it does not."""
    if liveness is None or not state.lifecycle.harness_running:
        return ""
    if liveness.holder != names.harness_holder(pod.name) or not liveness.renewal_overdue():
        return ""
    last = liveness.renewed_at.isoformat() if liveness.renewed_at else "never"
    return f"attempt {state.lifecycle.attempt} stopped renewing its lease (last renewal {last})"


def waiting_text(pod: HarnessPod) -> str:
    if not pod.waiting_reason:
        return "no reason given"
    return f"{pod.waiting_reason}: {pod.waiting_message}" if pod.waiting_message else pod.waiting_reason


def pending_past_deadline(pod: HarnessPod, now: datetime | None, start_deadline_s: float | None) -> str:
    """Why the pod's attempt counts as lost although its pod looks alive: it is still Pending
    `start_deadline_s` after it was made. "" when it is not. The same words for the same cause in
    every attempt, so that a cause that persists is a repeated failure."""
    if pod.phase != "Pending" or pod.deleting or pod.created_at is None:
        return ""
    if now is None or start_deadline_s is None:
        return ""
    if (now - pod.created_at).total_seconds() < start_deadline_s:
        return ""
    return f"the pod was still Pending at its start deadline ({start_deadline_s:g} s): {waiting_text(pod)}"


def pending_failure(pod: HarnessPod | None) -> str:
    """Why a Pending harness pod waits, when it is a cause that does not pass on its own (an image
    pull, a missing Secret, no node); "" otherwise (a pod starting normally)."""
    if pod is None or pod.phase != "Pending" or pod.deleting or pod.waiting_reason not in PENDING_FAILURES:
        return ""
    return waiting_text(pod)


def pending_cause(
    decision: HarnessDecision, pods: list[HarnessPod], start_deadline_s: float
) -> tuple[str, str] | None:
    """The kept harness pod waiting on what does not pass on its own, as a condition's reason (the
    kubelet's or the scheduler's: ImagePullBackOff, ...) and message, until its deadline; None
    when it does not."""
    if decision.action != Action.KEEP:
        return None
    current = next((p for p in pods if p.index == decision.index), None)
    cause = pending_failure(current)
    if current is None or not cause:
        return None
    message = (
        f"harness pod {current.name} is Pending: {cause}; its attempt ends if it is still Pending "
        f"{start_deadline_s:g} s after it was made"
    )
    return current.waiting_reason, message


def until_deadline(pod: HarnessPod, now: datetime | None, start_deadline_s: float | None) -> float:
    """How long until a Pending pod's start deadline (0 when it is not Pending or not known)."""
    if pod.phase != "Pending" or pod.created_at is None or now is None or start_deadline_s is None:
        return 0.0
    return max(0.0, start_deadline_s - (now - pod.created_at).total_seconds())


def stopping_attempt(state: SessionState, pod: HarnessPod, liveness: Liveness | None) -> bool:
    """Whether the pod is being deleted while its harness, told to stop, is still at work: the
    record shows its attempt running and it holds and renews the lease."""
    if not pod.deleting or pod.phase not in LIVE_PHASES or liveness is None:
        return False
    if not state.lifecycle.harness_running or liveness.holder != names.harness_holder(pod.name):
        return False
    return liveness.renewed_current_lease and not liveness.renewal_overdue()


def decide_harness(
    state: SessionState,
    pods: list[HarnessPod],
    lease: int,
    max_attempts: int,
    liveness: Liveness | None = None,
    start_deadline_s: float | None = None,
    input_corrected: bool = False,
) -> HarnessDecision:
    """`lease` is the session's current fencing lease in the event store (0 before any attempt).
    With REPLACE, the caller advances the lease and runs the next attempt at the new lease's number,
    so every attempt index is higher than the lease of every attempt before it. With `liveness`, a
    live pod whose attempt stopped renewing its lease is lost too, and with `start_deadline_s` one
    still Pending that long after it was made (`liveness.now` is the time). With `input_corrected`
    (`input_corrected`), a session stopped on an input it could not have goes on."""
    phase = phase_of(state)
    if phase in ENDED_PHASES:
        return HarnessDecision(Action.STOP, None, why=f"the session {phase.value.lower()}")
    stalled = stalled_by_repeats(state)
    if stalled is not None:
        return stalled
    if recovery_failed(state) and not input_corrected:
        return HarnessDecision(Action.STOP, None, why="recovery failed; a person has to look")

    current = current_pod(pods)
    now = liveness.now if liveness is not None else None
    stuck = ""
    silent = ""
    if current is not None and current.live:
        stuck = pending_past_deadline(current, now, start_deadline_s)
        silent = stuck or silent_attempt(state, current, liveness)
    if current is not None and current.live and not silent:
        return HarnessDecision(
            Action.KEEP, current.index, retry_in_s=until_deadline(current, now, start_deadline_s)
        )
    if current is not None and stopping_attempt(state, current, liveness):
        return HarnessDecision(Action.WAIT, current.index, why="its harness is stopping")
    if current is None and lease == 0 and state.lifecycle.harness_starts == 0:
        return HarnessDecision(Action.START, 0)
    if state.lifecycle.harness_lost >= max_attempts:
        return HarnessDecision(Action.GIVE_UP, None, why=f"{state.lifecycle.harness_lost} attempts lost")

    stopped = clean_stop(state)
    reopened = state.lifecycle.reopened_seq
    if silent:
        why = silent
    elif reopened is not None and not any(
        e.kind == "harness_started" and e.seq > reopened for e in state.lifecycle.recent
    ):
        why = "a scope change or a rejection reopened the finished session"
    elif stopped:
        why = f"attempt {state.lifecycle.attempt} stopped cleanly {stopped}"
    elif current is None:
        why = "no harness pod"
    elif current.deleting:
        why = "the pod is being deleted"
    elif current.phase == "Succeeded":
        why = "the harness exited before the session ended"
    else:
        why = f"the pod {current.phase.lower()}"
    running = state.lifecycle.attempt if state.lifecycle.harness_running else None
    if (
        running is None
        and current is not None
        and (not current.live or stuck)
        and current.index >= state.lifecycle.attempt
    ):
        # The pod ended before its harness recorded its start (a pod's harness takes the lease one
        # above the pod's index): a lost attempt all the same, recorded under the number it would
        # have had, so that it counts towards maxAttempts and a repeated failure.
        running = current.index + 1
        why = f"{why} before its attempt started"
    return HarnessDecision(
        Action.REPLACE,
        lease + 1,
        lost_attempt=running,
        lost_pod=current.name if current is not None else "",
        why=why,
    )


def input_corrected(state: SessionState, spec: AgentSessionSpec) -> bool:
    """The recovery failure the session stands on is an input it could not have (InputUnavailable),
    and the spec no longer names that input (its url, revision or target changed, or the subagent
    is gone): the next attempt fetches what the spec names now."""
    failure = state.lifecycle.last_recovery_failure
    if failure is None or failure.reason != INPUT_UNAVAILABLE or not recovery_failed(state):
        return False
    named = [
        f"{sub.name}: input {git_input_label(item.target, item.git)}:"
        for sub in spec.subagents
        if sub.name == failure.subagent
        for item in sub.inputs
        if item.git is not None
    ]
    return not any(failure.detail.startswith(prefix) for prefix in named)


def stalled_by_repeats(state: SessionState) -> HarnessDecision | None:
    """STOP when the last attempts ended the same way at the point the record still stands at:
    another pod would end the same way, so none is started until a person moves the point."""
    repeated = repeated_failure(state)
    if repeated is None:
        return None
    return HarnessDecision(Action.STOP, None, why=f"{REPEATED_FAILURE}: {repeated_failure_text(repeated)}")


def failure_backoff(
    state: SessionState, decision: HarnessDecision, seen_at: datetime, now: datetime, base_s: float
) -> HarnessDecision:
    """`decision` (a REPLACE of an attempt the record shows ended), held back while the attempts
    before it end the same way: the second identical end in a row waits `base_s`, each further one
    twice as long (at most FAILURE_BACKOFF_CAP_S), counted from `seen_at`, when the operator first
    saw that end. Any other decision, or a first failure, goes ahead at once."""
    repeated = state.lifecycle.repeated_failure
    if (
        decision.action != Action.REPLACE
        or repeated is None
        or repeated.count < 2
        or state.lifecycle.harness_running
        or repeated.point != failure_point(state)
    ):
        return decision
    delay = min(base_s * 2 ** (repeated.count - 2), FAILURE_BACKOFF_CAP_S)
    remaining = delay - (now - seen_at).total_seconds()
    if remaining <= 0:
        return decision
    why = (
        f"{repeated_failure_text(repeated)}; the next attempt starts in {remaining:.0f} s "
        f"(backoff {delay:g} s)"
    )
    return HarnessDecision(Action.BACK_OFF, None, why=why, retry_in_s=remaining)


@dataclass(frozen=True)
class SandboxPod:
    """What the operator sees of one sandbox pod."""

    name: str
    phase: PodPhase
    deleting: bool = False

    @property
    def live(self) -> bool:
        return self.phase in LIVE_PHASES and not self.deleting


@dataclass(frozen=True)
class SandboxLoss:
    subagent: str
    pod: str
    why: str


def sandbox_replacement(state: SessionState, subagent: str) -> int:
    """How many of the subagent's sandbox pods were lost: the number its current pod carries."""
    record = state.subagents.get(subagent)
    return record.sandbox_losses if record is not None else 0


def sandbox_losses(
    expected: Mapping[str, str], pods: Mapping[str, SandboxPod], seen: Set[str]
) -> list[SandboxLoss]:
    """The subagents whose current sandbox pod is lost: being deleted, ended, or gone after it was
    seen live. `expected` maps each subagent to the pod it should have now (for the running
    attempt and its replacements so far); `seen` holds pods seen live before, so a pod not created
    yet is not taken for one that vanished."""
    losses = []
    for subagent, name in sorted(expected.items()):
        pod = pods.get(name)
        if pod is None:
            if name not in seen:
                continue
            why = "the pod is gone"
        elif pod.deleting:
            why = "the pod is being deleted"
        elif pod.phase == "Failed":
            why = "the pod failed"
        elif pod.phase == "Succeeded":
            why = "the sandbox server exited"
        else:
            continue
        losses.append(SandboxLoss(subagent, name, why))
    return losses
