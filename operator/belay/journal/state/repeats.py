"""Crash loops: attempts that end abnormally at the same point with the same error.

An attempt that ends abnormally (its end recorded with a reason without ending the session, or
recorded lost) at the same point as the attempt before it, with the same error, is counted; any
other end of an attempt (a clean stop, an end without a reason) resets the count. After
REPEATED_FAILURE_LIMIT in a row another attempt would end the same way: the session is stalled
(`RepeatedFailure`) until something a person does moves the point (an amend, a rejection that
reopens the step, a move to another executor). The point is what a new attempt starts from: the
request's version, the executor changes, the current step and its round, and how many operations
are recorded and settled.
"""

from __future__ import annotations

from belay.journal.state.records import LifecycleEntry, RepeatedFailure
from belay.journal.state.session import SessionState

REPEATED_FAILURE_LIMIT = 3
REPEATED_FAILURE = "RepeatedFailure"


def failure_point(state: SessionState) -> str:
    step = state.current_step or ""
    task = state.tasks.get(step) if step else None
    round_ = task.round if task is not None else 1
    settled = len(state.operations) - len(state.open_operations)
    return (
        f"request v{state.request.version}, {len(state.executor_changes)} executor change(s), "
        f"step {step or '-'} round {round_}, {len(state.operations)} operation(s) ({settled} settled)"
    )


def abnormal_error(entry: LifecycleEntry) -> str:
    """The error an abnormal end names, the same for the same failure in every attempt: a lost
    pod's name (which carries its attempt) is left out."""
    detail = entry.detail
    if entry.reason == "HarnessPodLost" and detail.startswith("pod ") and ": " in detail:
        detail = detail.split(": ", 1)[1]
    return f"{entry.reason}: {detail}".rstrip(": ")


def counted(state: SessionState, entry: LifecycleEntry) -> RepeatedFailure:
    """The count after one more abnormal end, recorded at `entry`."""
    point, error = failure_point(state), abnormal_error(entry)
    last = state.lifecycle.repeated_failure
    if last is not None and last.point == point and last.error == error:
        return last.model_copy(
            update={"count": last.count + 1, "last_attempt": entry.attempt, "seq": entry.seq}
        )
    return RepeatedFailure(
        point=point,
        error=error,
        step=state.current_step or "",
        first_attempt=entry.attempt,
        last_attempt=entry.attempt,
        seq=entry.seq,
    )


def repeated_failure(state: SessionState) -> RepeatedFailure | None:
    """The repeated failure that stalls the session, if one does: REPEATED_FAILURE_LIMIT abnormal
    ends in a row, no attempt running, and the record still at the point where they ended."""
    repeated = state.lifecycle.repeated_failure
    if repeated is None or repeated.count < REPEATED_FAILURE_LIMIT or state.lifecycle.harness_running:
        return None
    return repeated if repeated.point == failure_point(state) else None


def repeated_failure_text(repeated: RepeatedFailure) -> str:
    """The failure in words: which attempts, at which step, with which error."""
    step = f" at step {repeated.step}" if repeated.step else ""
    # In a cluster the attempts' numbers are their leases, which the operator's fencing skips.
    joined = " and " if repeated.count == 2 else " to "
    return (
        f"{repeated.count} attempts in a row ended the same way{step} (attempts "
        f"{repeated.first_attempt}{joined}{repeated.last_attempt}): {repeated.error}"
    )
