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

A sandbox pod lost under a live harness does not end the attempt: the operator records which one
and why, and starts a replacement; the harness restores it from the last verified checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from belay.api.status import PodPhase
from belay.controller import names
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


@dataclass(frozen=True)
class HarnessPod:
    """What the operator sees of one harness pod."""

    name: str
    index: int
    phase: PodPhase
    deleting: bool = False

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
    # With BACK_OFF: how long until the next attempt may start.
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
) -> HarnessDecision:
    """`lease` is the session's current fencing lease in the event store (0 before any attempt).
    With REPLACE, the caller advances the lease and runs the next attempt at the new lease's number,
    so every attempt index is higher than the lease of every attempt before it. With `liveness`, a
    live pod whose attempt stopped renewing its lease is lost too."""
    phase = phase_of(state)
    if phase in ENDED_PHASES:
        return HarnessDecision(Action.STOP, None, why=f"the session {phase.value.lower()}")
    stalled = stalled_by_repeats(state)
    if stalled is not None:
        return stalled
    if recovery_failed(state):
        return HarnessDecision(Action.STOP, None, why="recovery failed; a person has to look")

    current = current_pod(pods)
    silent = silent_attempt(state, current, liveness) if current is not None and current.live else ""
    if current is not None and current.live and not silent:
        return HarnessDecision(Action.KEEP, current.index)
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
        and not current.live
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
