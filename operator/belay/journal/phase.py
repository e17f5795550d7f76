"""The phase of a session: the one place it is decided, and whether its attempt is alive.

`phase_of` is called by every view (`belay brief` and `belay sessions`, the AgentSession status and
its printer columns, `kubectl belay`). Whether the attempt the record shows running is still alive
is not in the record: the caller passes a `Liveness` (the store's lease and its last renewal, the
caller's `now`, and, on one machine, whether the holder's process still exists), so the fold stays
pure. An attempt that stopped proving it is alive is `Interrupted` where a person resumes it
(`belay resume`), and `Recovering` where the operator starts the next attempt itself;
`interruption_of` says since when, what it was doing and what happens next.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import AliasGenerator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from belay.journal import commands
from belay.journal.events import EffectClass, LifecycleKind, TaskStatus, WaitKind
from belay.journal.proof import unproven, unproven_text
from belay.journal.recovery import RecoveryAction, RecoveryActionKind, recovery_plan
from belay.journal.state import SessionState
from belay.journal.state.repeats import REPEATED_FAILURE, repeated_failure, repeated_failure_text
from belay.journal.turns import open_turn_ends

# Every list a status or a briefing carries is bounded: this many entries, and a count of the rest.
STATUS_LIST_LIMIT = 20
# A running attempt renews its lease this often; one silent for LIVENESS_TIMEOUT_S (ten missed
# renewals) has stopped proving it is alive.
HEARTBEAT_INTERVAL_S = 3.0
LIVENESS_TIMEOUT_S = 30.0


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    WAITING_ON_USER = "WaitingOnUser"
    WAITING_ON_EXTERNAL = "WaitingOnExternal"
    READY_FOR_REVIEW = "ReadyForReview"
    # No live attempt, and only a person can start the next one (`belay resume`).
    INTERRUPTED = "Interrupted"
    # The operator replaces a lost attempt, or a sandbox is being restored.
    RECOVERING = "Recovering"
    # A recovery failed (e.g. UndeclaredState): another attempt would fail the same way.
    RECOVERY_FAILED = "RecoveryFailed"
    # The run ended, and the record does not prove what it owes done (belay.journal.proof): a step
    # whose verification failed, an empty or unverified deliverable, a child that did not succeed.
    # A person's rejection or amend reopens it; nothing runs until then.
    NEEDS_ATTENTION = "NeedsAttention"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


# The phases in which no attempt runs and none starts by itself.
ENDED_PHASES = (Phase.SUCCEEDED, Phase.NEEDS_ATTENTION, Phase.FAILED)


class StatusModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(serialization_alias=to_camel, validation_alias=to_camel),
        populate_by_name=True,
        frozen=True,
        extra="forbid",
    )


RecoveredBy = Literal["resume", "operator"]


class Liveness(StatusModel):
    """What is known, at `now`, about the attempt holding the session's lease: not folded from
    the record (that would need a clock), passed in by the view."""

    now: datetime
    lease: int = 0  # the session's current fencing lease (0: no attempt ever took one)
    holder: str = ""  # who holds it, for a person to read
    renewed_lease: int = 0  # the lease the last renewal was for
    renewed_at: datetime | None = None
    # Whether the holder's process exists, where the caller can see it (one machine); None where
    # it cannot (a cluster), and the renewal alone decides.
    holder_alive: bool | None = None
    # Who starts the next attempt: a person (`belay resume`), or the operator.
    recovered_by: RecoveredBy = "resume"
    timeout_s: float = LIVENESS_TIMEOUT_S
    # Of a child session no attempt has taken yet: whether the attempt that starts it (its
    # coordinator's) is alive; None where the caller does not say.
    starter_alive: bool | None = None

    @property
    def renewed_current_lease(self) -> bool:
        return self.lease > 0 and self.renewed_lease == self.lease and self.renewed_at is not None

    def renewal_overdue(self) -> bool:
        """The current lease was renewed, but not within the timeout."""
        if not self.renewed_current_lease or self.renewed_at is None:
            return False
        return self.now - self.renewed_at > timedelta(seconds=self.timeout_s)


class InterruptedOperation(StatusModel):
    operation_id: str
    tool: str
    effect: EffectClass
    subagent: str | None = None
    step: str | None = None
    action: RecoveryActionKind
    settled: str  # "interrupted, will be settled on resume: <effect class and what it does>"


class ResumePoint(StatusModel):
    """Where one subagent with work left goes on from."""

    subagent: str
    step: str


class Interruption(StatusModel):
    """The attempt that stopped proving it is alive: since when, what it was doing, what comes next."""

    attempt: int
    since: datetime | None = None  # its last sign of life: the later of its last renewal and event
    why: str
    doing: str
    command: str | None = None  # the exact command a person runs next; None when the operator acts
    next: str  # what happens next, in words
    operations: list[InterruptedOperation] = []
    operations_omitted: int = 0
    resumes: list[ResumePoint] = []  # every subagent with steps left, and the step it goes on from


T = TypeVar("T")


def bounded(items: Sequence[T], limit: int) -> tuple[list[T], int]:
    """The first `limit` items, and how many were left out."""
    return list(items[:limit]), max(0, len(items) - limit)


# --------------------------------------------------------------------------------------------------
# Liveness: is the attempt the record shows running still alive?


def attempt_alive(state: SessionState, liveness: Liveness) -> bool:
    """Whether an attempt is alive: it holds the current lease, its holder's process (where that
    can be seen) exists, and it renewed the lease within the timeout. An attempt whose end the
    record shows (it finished without ending the session) is not, unless a newer one took the
    lease since."""
    lifecycle = state.lifecycle
    if liveness.lease == 0 or liveness.holder_alive is False:
        return False
    if not lifecycle.harness_running and liveness.lease <= lifecycle.lease:
        return False
    if liveness.renewed_current_lease:
        return not liveness.renewal_overdue()
    # Not renewed yet: an attempt that just took the lease, if its process is seen to exist.
    return liveness.holder_alive is True


def _settles(action: RecoveryAction, by: RecoveredBy) -> str:
    when = "on resume" if by == "resume" else "by the next attempt"
    match action.action:
        case RecoveryActionKind.RERUN:
            what = f"{action.effect.value}: runs again under the same operation id"
        case RecoveryActionKind.RERUN_WITH_KEY:
            what = f"keyed: runs again with the same idempotency key ({action.idempotency_key})"
        case RecoveryActionKind.SKIP_COMPLETED_STEP:
            what = f"{action.effect.value}: not run again, step {action.step} is complete"
        case RecoveryActionKind.SKIP_SUPERSEDED:
            what = f"{action.effect.value}: not run again, {action.reason}"
        case _:
            what = (
                f"{action.effect.value}: never repeated; its outcome is recorded unknown and probed, "
                "and if the probe cannot tell, you reconcile it"
            )
    return f"interrupted, will be settled {when}: {what}"


def _last_end(state: SessionState) -> str:
    """Why the last attempt that finished without ending the session stopped, if it did."""
    for entry in reversed(state.lifecycle.recent):
        if entry.kind == LifecycleKind.HARNESS_FINISHED:
            return entry.detail or entry.reason or "no reason recorded"
        if entry.kind == LifecycleKind.HARNESS_STARTED:
            break
    return ""


def clean_stop(state: SessionState) -> str:
    """When the last attempt stopped cleanly on a signal and none has started since: how it
    stopped, for a person ("on SIGTERM: ..."); otherwise ""."""
    if state.lifecycle.harness_running:
        return ""
    for entry in reversed(state.lifecycle.recent):
        if entry.kind == LifecycleKind.HARNESS_STOPPED:
            return f"on {entry.reason or 'a signal'}: {entry.detail}".rstrip(": ")
        if entry.kind in (LifecycleKind.HARNESS_STARTED, LifecycleKind.HARNESS_FINISHED):
            break
    return ""


def _why(state: SessionState, liveness: Liveness) -> str:
    """Why no attempt is alive, in words."""
    lifecycle = state.lifecycle
    attempt = lifecycle.attempt
    reopened = awaiting_resume(state)
    ended = _last_end(state) if not lifecycle.harness_running else ""
    stopped = clean_stop(state)
    if lifecycle.harness_starts == 0 and state.parent is not None and liveness.starter_alive is False:
        return f"no harness attempt has started: its coordinator {state.parent.session} stopped before it did"
    if lifecycle.harness_starts == 0:
        return "no harness attempt has started on the recorded request"
    if reopened and not lifecycle.harness_running:
        return (
            f"the session ended and was reopened ({lifecycle.reopened_because}); request "
            f"v{state.request.version} waits for a resume, no attempt has run since"
        )
    if stopped:
        return f"attempt {attempt} stopped cleanly {stopped}"
    if ended:
        return f"attempt {attempt} stopped without ending the session: {ended}"
    if liveness.holder_alive is False:
        return f"attempt {attempt} is gone: its {liveness.holder or 'harness'} no longer exists"
    if liveness.renewal_overdue() and liveness.renewed_at is not None:
        last = liveness.renewed_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
        return f"attempt {attempt} stopped renewing its lease (last renewal {last})"
    if liveness.lease > lifecycle.lease and not liveness.renewed_current_lease:
        return f"attempt {attempt} was fenced (lease {liveness.lease}); its replacement has not started yet"
    return f"attempt {attempt} is not renewing its lease"


def _doing(state: SessionState, open_actions: int) -> str:
    """What the attempt was doing when it stopped proving it is alive, in words."""
    running = sorted(t.task_id for t in state.tasks.values() if t.status == TaskStatus.RUNNING)
    doing_parts = []
    if state.current_step:
        doing_parts.append(f"step {state.current_step}")
    if running:
        doing_parts.append("running " + ", ".join(running[:5]) + (" ..." if len(running) > 5 else ""))
    if open_actions:
        doing_parts.append(f"{open_actions} operation(s) without a result")
    return "; ".join(doing_parts) or "nothing recorded in progress"


UNFINISHED = (TaskStatus.PLANNED, TaskStatus.RUNNING, TaskStatus.BLOCKED)


def resume_points(state: SessionState) -> list[ResumePoint]:
    """Each subagent with steps left (a subagent's own task aside), and the step it goes on from:
    the one its last verified checkpoint names when that is left to do, else its first step left
    (a running one first), in plan order. One pass over the plan."""
    left: dict[str, list[tuple[int, int, str]]] = {}
    for task in state.tasks.values():
        if task.owner and task.task_id != task.owner and task.status in UNFINISHED:
            rank = 0 if task.status == TaskStatus.RUNNING else 1
            left.setdefault(task.owner, []).append((rank, task.first_seq, task.task_id))
    points = []
    for subagent in sorted(left):
        steps = left[subagent]
        checkpoint = state.verified_checkpoints.get(subagent)
        named = checkpoint.checkpoint.next_step if checkpoint is not None else None
        ids = {task_id for _, _, task_id in steps}
        if named and (named in ids or f"{subagent}/{named}" in ids):
            step = named if named in ids else f"{subagent}/{named}"
        else:
            step = min(steps)[2]
        points.append(ResumePoint(subagent=subagent, step=step))
    return points


def _from_where(points: Sequence[ResumePoint], next_step: str | None) -> str:
    if points:
        return ", then " + "; ".join(f"{p.subagent} from step {p.step}" for p in points)
    return f", from step {next_step}" if next_step else ""


def _next(
    state: SessionState, liveness: Liveness, next_step: str | None, points: Sequence[ResumePoint]
) -> tuple[str | None, str]:
    """The command a person runs next (None where the operator acts), and what happens next."""
    attempt = state.lifecycle.attempt
    if liveness.recovered_by == "resume":
        command = commands.resume(state.session_id)
        owed = open_turn_ends(state)
        if owed:
            # A new attempt would read the same end of turn and wait on the person again: their
            # message is the next step, and the resume that follows carries it to the agent.
            to = owed[0].subagent if len(owed) > 1 else None
            message = commands.message(state.session_id, to)
            return message, (
                f"run `{message}` first ({owed[0].subagent} ended its turn without {owed[0].owed}; "
                f"see Waiting on you), then `{command}`: a new attempt restores every subagent from "
                f"its last verified checkpoint{_from_where(points, next_step)} and gives it the message"
            )
        return command, (
            f"run `{command}`: a new attempt takes the next lease, restores every subagent from its "
            f"last verified checkpoint{_from_where(points, next_step)}, and settles the interrupted "
            "operations"
        )
    if clean_stop(state):
        return None, (
            f"the operator starts attempt {max(attempt, liveness.lease) + 1}, which restores from the "
            "last verified checkpoint (a clean stop is not a lost attempt)"
        )
    return None, (
        f"the operator records attempt {attempt} lost, fences it and starts attempt "
        f"{max(attempt, liveness.lease) + 1}, which restores from the last verified checkpoint"
    )


def interruption_of(state: SessionState, liveness: Liveness | None) -> Interruption | None:
    """What a session without a live attempt was doing, and what happens next; None while an
    attempt is alive, before one has started, or once the session ended or its recovery failed."""
    phase = phase_of(state, liveness)
    if liveness is None or phase not in (Phase.INTERRUPTED, Phase.RECOVERING, Phase.PENDING):
        return None
    if phase == Phase.PENDING and not awaiting_resume(state):
        return None  # nothing started on the request yet: nothing was interrupted
    if phase == Phase.RECOVERING and attempt_alive(state, liveness):
        return None  # a live attempt is restoring; nothing is interrupted
    signs = [t for t in (liveness.renewed_at, state.last_event_at) if t is not None]
    plan = recovery_plan(state)
    actions = [a for a in plan.actions if a.operation_id not in state.unknown_outcomes]
    shown, omitted = bounded(actions, STATUS_LIST_LIMIT)
    points = resume_points(state)
    command, next_text = _next(state, liveness, plan.next_step, points)
    return Interruption(
        attempt=state.lifecycle.attempt,
        since=max(signs) if signs else None,
        why=_why(state, liveness),
        doing=_doing(state, len(actions)),
        command=command,
        next=next_text,
        operations=[
            InterruptedOperation(
                operation_id=a.operation_id,
                tool=a.tool,
                effect=a.effect,
                subagent=a.subagent,
                step=a.step,
                action=a.action,
                settled=_settles(a, liveness.recovered_by),
            )
            for a in shown
        ],
        operations_omitted=omitted,
        resumes=points,
    )


# --------------------------------------------------------------------------------------------------
# The phase


def phase_of(state: SessionState, liveness: Liveness | None = None) -> Phase:
    """The one phase every view shows. Without `liveness` the record alone decides (an attempt it
    shows running is taken to be alive)."""
    lc = state.lifecycle
    if lc.failed:
        return Phase.FAILED
    if lc.completed:
        # A coordinator whose delegation failed has not done its objective, whatever it recorded;
        # otherwise the record decides whether what the session owes is done, not the claim.
        if state.failed_delegations:
            return Phase.FAILED
        return Phase.NEEDS_ATTENTION if unproven(state) else Phase.SUCCEEDED
    if recovery_failed(state):
        return Phase.RECOVERY_FAILED
    if liveness is not None and not attempt_alive(state, liveness) and awaiting_resume(state):
        # Ended, then amended or rejected: the new request waits for an attempt; nothing broke.
        return Phase.PENDING
    if liveness is not None and not attempt_alive(state, liveness):
        if liveness.recovered_by == "operator":
            # The operator starts the first attempt, and replaces a lost one.
            first = lc.harness_starts == 0 and lc.harness_lost == 0
            return Phase.PENDING if first else Phase.RECOVERING
        if liveness.lease == 0 and liveness.starter_alive:
            return Phase.PENDING  # its coordinator's live attempt is starting it
        # Nobody but a person starts the next attempt here: a child whose coordinator stopped
        # before its first attempt is interrupted too, whether or not its request is recorded yet.
        return Phase.INTERRUPTED if state.request.goal or state.parent else Phase.PENDING
    if lc.recovering:
        return Phase.RECOVERING
    if state.pending_approvals or state.unknown_outcomes or open_wait_ids(state, WaitKind.ON_USER):
        return Phase.WAITING_ON_USER
    if open_wait_ids(state, WaitKind.ON_EXTERNAL):
        return Phase.WAITING_ON_EXTERNAL
    running_tasks = any(t.status == TaskStatus.RUNNING for t in state.tasks.values())
    if running_tasks or state.open_operations:
        return Phase.RUNNING
    if open_wait_ids(state, WaitKind.READY_FOR_REVIEW):
        return Phase.READY_FOR_REVIEW
    # The request alone (recorded before the first harness pod exists) is not yet running.
    if state.lifecycle.harness_starts == 0 or not state.request.goal:
        return Phase.PENDING
    return Phase.RUNNING


def awaiting_resume(state: SessionState) -> bool:
    """The session ended and a scope change or a rejection reopened it, and no attempt has started
    since."""
    lifecycle = state.lifecycle
    if lifecycle.reopened_seq is None or lifecycle.harness_running:
        return False
    return not any(
        e.kind == LifecycleKind.HARNESS_STARTED and e.seq > (lifecycle.reopened_seq or 0)
        for e in lifecycle.recent
    )


def failed_delegations_text(state: SessionState) -> str:
    """Why a coordinator whose delegations failed did not succeed, in words; "" when none did."""
    if not state.failed_delegations:
        return ""
    failed = ", ".join(f"{d} ({op})" for d, op in sorted(state.failed_delegations.items()))
    return f"delegation failed: {failed}"


def end_reason(state: SessionState) -> str:
    """How the session ended, in words."""
    if state.lifecycle.completed and state.failed_delegations:
        return failed_delegations_text(state)
    if state.lifecycle.completed:
        missing = unproven(state)
        if missing:
            return f"the run ended, and the record does not prove it done: {unproven_text(missing)}"
    return state.lifecycle.end_reason


def stalled_by_failure(state: SessionState) -> tuple[str, str] | None:
    """Why no attempt may start (reason, message): a repeated failure, else the recovery failure."""
    repeated = repeated_failure(state)
    if repeated is not None:
        return REPEATED_FAILURE, repeated_failure_text(repeated)
    failure = state.lifecycle.last_recovery_failure
    if failure is not None and recovery_failed(state):
        return failure.reason, failure.detail
    return None


def open_wait_ids(state: SessionState, kind: WaitKind) -> list[str]:
    """The open waits of one kind, in the order they opened."""
    return [w.wait_id for w in state.open_wait_records() if w.kind == kind]


def recovery_failed(state: SessionState) -> bool:
    """A recovery failed (for instance on undeclared state) and no restore has succeeded since, or
    attempts ended the same way REPEATED_FAILURE_LIMIT times in a row at the point the record still
    stands at: another attempt would fail the same way."""
    if repeated_failure(state) is not None:
        return True
    failure = state.lifecycle.last_recovery_failure
    if failure is None:
        return False
    later_restore = any(e.kind == "restored" and e.seq > failure.seq for e in state.lifecycle.recent)
    return not later_restore
