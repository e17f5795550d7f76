"""The AgentSession status patch: the journal's projection of the record, plus what the operator
observes (pods, generation), with condition transition times kept from the previous status; and
the Kubernetes Events a status change deserves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from belay.api.status import (
    AgentSessionStatus,
    Condition,
    ConditionType,
    DrillStatus,
    EventsExport,
    ForkStatus,
    HarnessPodStatus,
    SandboxPodStatus,
)
from belay.journal import commands
from belay.journal.commands import in_cluster
from belay.journal.phase import Liveness
from belay.journal.state import SessionState
from belay.views.briefing.build import briefing_sections
from belay.views.status.build import ArtifactLocator, session_status, with_transition_times
from belay.views.status.model import Reason

# Conditions whose turning True deserves a Warning event rather than a Normal one.
WARNING_CONDITIONS = {ConditionType.STALLED, ConditionType.RECOVERING}


def previous_conditions(previous_status: Mapping[str, Any] | None) -> list[Condition]:
    if not previous_status:
        return []
    conditions = []
    for raw in previous_status.get("conditions") or []:
        try:
            conditions.append(Condition.model_validate(raw))
        except ValueError:
            continue  # a condition someone else wrote: not ours to carry over
    return conditions


def kubectl_approve(session: str, approval_id: str) -> str:
    return in_cluster(commands.approve(session, approval_id))


@dataclass(frozen=True)
class OperatorProblem:
    """Something only the operator knows is wrong (the record cannot say it). `stalls`: it will not
    go away without a person (Stalled=True); otherwise the operator keeps retrying
    (Reconciling=True). Either way Ready is False."""

    reason: str
    message: str
    stalls: bool = True


def session_status_patch(
    state: SessionState,
    *,
    previous_status: Mapping[str, Any] | None,
    generation: int,
    now: datetime,
    harness: HarnessPodStatus | None = None,
    sandboxes: list[SandboxPodStatus] | None = None,
    forked_from: ForkStatus | None = None,
    events_export: EventsExport | None = None,
    drill: DrillStatus | None = None,
    locate: ArtifactLocator | None = None,
    problem: OperatorProblem | None = None,
    liveness: Liveness | None = None,
) -> AgentSessionStatus:
    """With `problem`, Ready turns False and Stalled or Reconciling True with its reason, whatever
    the record shows. `liveness` (the store's lease and its last renewal, with the operator as the
    one who recovers) decides, with the record, whether the attempt is alive: the same
    `phase_of` as every other view."""
    if locate is not None:
        projected = session_status(state, locate=locate, liveness=liveness)
    else:
        projected = session_status(state, liveness=liveness)
    # The briefing's sections, for `kubectl belay brief`: the page `belay brief` prints, spelled
    # for kubectl.
    briefing = briefing_sections(state, locate=locate, liveness=liveness, style=in_cluster)
    current = list(projected.conditions)
    if problem is not None:
        flagged = ConditionType.STALLED if problem.stalls else ConditionType.RECONCILING
        replaced = {ConditionType.READY, flagged}
        if problem.stalls:
            # Nothing goes on until a person acts, whatever the record showed under way; and
            # kstatus takes the first of Reconciling and Stalled it finds True, so both would read
            # as InProgress, never Failed.
            replaced.add(ConditionType.RECONCILING)
        current = [c for c in current if c.type not in replaced]
        for type_, status in ((ConditionType.READY, "False"), (flagged, "True")):
            current.append(
                Condition(type=type_, status=status, reason=problem.reason, message=problem.message)
            )
    conditions = [
        c.model_copy(update={"observed_generation": generation})
        for c in with_transition_times(previous_conditions(previous_status), current, now)
    ]
    # In a cluster a person answers with kubectl-belay, which needs no store credentials.
    approvals = [
        a.model_copy(update={"command": kubectl_approve(state.session_id, a.approval_id)})
        for a in projected.pending_approvals
    ]
    deliverables = [d.model_copy(update={"command": in_cluster(d.command)}) for d in projected.deliverables]
    return AgentSessionStatus(
        **{
            **dict(projected),
            "conditions": conditions,
            "pending_approvals": approvals,
            "deliverables": deliverables,
            "briefing": briefing,
        },
        observed_generation=generation,
        harness=harness,
        sandboxes=sandboxes or [],
        forked_from=forked_from,
        events_export=events_export,
        drill=drill,
    )


@dataclass(frozen=True)
class TransitionEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def transition_events(
    previous_status: Mapping[str, Any] | None, current: AgentSessionStatus
) -> list[TransitionEvent]:
    """One event per phase change and per condition that changed status."""
    events = []
    before_phase = (previous_status or {}).get("phase")
    if before_phase != current.phase.value:
        events.append(
            TransitionEvent("Normal", "PhaseChanged", f"{before_phase or 'None'} -> {current.phase.value}")
        )
    before = {c.type: c.status for c in previous_conditions(previous_status)}
    for condition in current.conditions:
        if before.get(condition.type) == condition.status:
            continue
        if condition.type not in before and condition.status == "False":
            continue  # a condition appearing as False is not news
        warning = (
            condition.type in WARNING_CONDITIONS
            and condition.status == "True"
            and condition.reason != Reason.HARNESS_STOPPED  # a clean stop is no failure
        )
        message = f"{condition.type.value}={condition.status}"
        if condition.message:
            message += f": {condition.message}"
        events.append(TransitionEvent("Warning" if warning else "Normal", str(condition.reason), message))
    return events
