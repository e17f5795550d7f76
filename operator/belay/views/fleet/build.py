"""The fleet view's builder: a row per session from its typed status, and an objective's view.

A row comes from the session's status as `belay.views.status.build.session_status` projects it
(locally, from the record and the attempt's liveness; in a cluster, the AgentSession's status,
which the operator projects with the same function). Pure: the caller passes the status, the
labels, its own `now`, and how commands are spelled where the session runs (`belay ...` locally,
`kubectl belay ...` in a cluster), so the same rows come out of `belay sessions` and `kubectl belay
sessions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal

from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.events import CHILD_CONDITION_PREFIX
from belay.journal.phase import Phase
from belay.views.fleet.model import (
    BUCKET_WORDS,
    BUCKETS,
    OBJECTIVE_LABEL,
    PARENT_LABEL,
    PART_LABEL,
    STALLING_PROBLEMS,
    Bucket,
    FleetRow,
    FleetSummary,
    FleetView,
    FleetWait,
    ObjectiveView,
    ObjectiveWait,
)
from belay.views.status.model import NOT_PROJECTED, ConditionType, SessionStatus


def _bucket(status: SessionStatus, stalled_by: str | None) -> Bucket:
    phase = status.phase
    if phase == Phase.SUCCEEDED:
        return "succeeded"
    if phase == Phase.NEEDS_ATTENTION:
        return "needs_attention"
    if phase in (Phase.FAILED, Phase.RECOVERY_FAILED) or stalled_by in STALLING_PROBLEMS:
        return "failed"
    if phase == Phase.INTERRUPTED or (phase in (Phase.RECOVERING, Phase.PENDING) and status.interruption):
        return "interrupted"
    if phase == Phase.WAITING_ON_USER:
        return "waiting_on_you"
    if phase == Phase.WAITING_ON_EXTERNAL:
        return "on_external"
    if phase == Phase.READY_FOR_REVIEW:
        return "ready_for_review"
    return "moving"


def _problem(status: SessionStatus) -> tuple[str | None, str | None]:
    """(reason, text) of what stops the session besides its phase: a failed recovery, or a Stalled
    or Reconciling condition the operator set on its own (the record says nothing of it)."""
    for condition in status.conditions:
        if (
            condition.type in (ConditionType.STALLED, ConditionType.RECONCILING)
            and condition.status == "True"
        ):
            reason = str(condition.reason)
            if reason in (*STALLING_PROBLEMS, "StoreUnavailable"):
                return reason, f"{reason}: {condition.message}".rstrip(": ")
    if status.phase == Phase.RECOVERY_FAILED and status.waiting_on:
        return None, status.waiting_on
    return None, None


WAIT_KINDS: dict[str, Literal["user", "external", "review"]] = {
    "waiting_on_you": "user",
    "waiting_on_external": "external",
    "ready_for_review": "review",
}


def _waits(status: SessionStatus, style: CommandStyle) -> list[FleetWait]:
    """What the session waits on, as its status classified it: the person (approvals,
    reconciliations, questions), external conditions, and the person's review; each with the
    command that ends it."""
    return [
        FleetWait(
            kind=WAIT_KINDS[item.state],
            what=item.label or item.id,
            command=style(item.command) if item.command else None,
        )
        for item in status.items
        if item.state in WAIT_KINDS
    ]


def unblocking_command(
    session: str, status: SessionStatus, style: CommandStyle, waits: Sequence[FleetWait] = ()
) -> str | None:
    """The one command a person runs next for the session, or None when nothing a person runs
    moves it on (it is moving, or the operator acts): the command of the first wait its phase
    names."""
    phase = status.phase
    if phase in (Phase.INTERRUPTED, Phase.PENDING) and status.interruption and status.interruption.command:
        return style(status.interruption.command)
    if phase in (Phase.FAILED, Phase.RECOVERY_FAILED, Phase.NEEDS_ATTENTION):
        return style(commands.brief(session))
    kind = {
        Phase.WAITING_ON_USER: "user",
        Phase.WAITING_ON_EXTERNAL: "external",
        Phase.READY_FOR_REVIEW: "review",
    }.get(phase)
    return next((w.command for w in waits if w.kind == kind), None)


def fleet_row(
    session: str,
    status: SessionStatus | None,
    *,
    now: datetime,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
    style: CommandStyle = commands.local,
) -> FleetRow:
    """The row of one session from its status (None: not projected yet)."""
    status = status or NOT_PROJECTED
    labels = labels or {}
    stalled_by, problem = _problem(status)
    waits = _waits(status, style)
    parent = status.parent
    last_at = status.last_event_at
    return FleetRow(
        session=session,
        namespace=namespace,
        objective=labels.get(OBJECTIVE_LABEL) or (parent.objective if parent else "") or None,
        part=labels.get(PART_LABEL) or (parent.part if parent else "") or None,
        parent=labels.get(PARENT_LABEL) or (parent.session if parent else "") or None,
        phase=status.phase.value,
        bucket=_bucket(status, stalled_by),
        step=status.current_step,
        waits_on_user=[w.what for w in waits if w.kind == "user"],
        waits_on_external=[w.what for w in waits if w.kind == "external"],
        ready_for_review=[w.what for w in waits if w.kind == "review"],
        waits=waits,
        command=unblocking_command(session, status, style, waits),
        deliverables=[d.name for d in status.deliverables],
        children=[c.session for c in status.children],
        events=status.last_seq,
        last_event_at=last_at,
        last_event_age_s=max(0, int((now - last_at).total_seconds())) if last_at is not None else None,
        problem=problem,
    )


def corrupt_row(session: str, seq: int, labels: Mapping[str, str] | None = None) -> FleetRow:
    """A session whose record fails its integrity check: listed, never folded."""
    labels = labels or {}
    return FleetRow(
        session=session,
        objective=labels.get(OBJECTIVE_LABEL),
        part=labels.get(PART_LABEL),
        parent=labels.get(PARENT_LABEL),
        phase="RecordCorrupt",
        bucket="failed",
        events=seq,
        problem=f"its record fails its integrity check at seq {seq}",
    )


# The buckets that count the sessions with such a wait, whatever their phase says first: a session
# that waits on you and on CI counts in both.
WAIT_BUCKETS: dict[Bucket, str] = {
    "waiting_on_you": "user",
    "on_external": "external",
    "ready_for_review": "review",
}


def summarize(rows: Sequence[FleetRow]) -> FleetSummary:
    counts = {
        bucket: sum(
            1
            for r in rows
            if (
                any(w.kind == WAIT_BUCKETS[bucket] for w in r.waits)
                if bucket in WAIT_BUCKETS
                else r.bucket == bucket
            )
        )
        for bucket in BUCKETS
    }
    parts = ", ".join(f"{counts[b]} {BUCKET_WORDS[b]}" for b in BUCKETS)
    line = f"{len(rows)} session{'s' if len(rows) != 1 else ''}: {parts}"
    return FleetSummary(sessions=len(rows), line=line, **counts)


def fleet_view(rows: Iterable[FleetRow]) -> FleetView:
    ordered = resumed_with_parent(sorted(rows, key=lambda r: (r.namespace or "", r.session)))
    return FleetView(sessions=ordered, summary=summarize(ordered))


def interrupted_ancestor(row: FleetRow, rows: Mapping[tuple[str | None, str], FleetRow]) -> FleetRow | None:
    """The outermost coordinator above an interrupted row that is interrupted too, when there is
    one: its resume starts every child of its record not running, so it is the one next step."""
    found = None
    seen = {row.session}
    while row.bucket == "interrupted" and row.parent and row.parent not in seen:
        parent = rows.get((row.namespace, row.parent))
        if parent is None or parent.bucket != "interrupted" or not parent.command:
            break
        found = row = parent
        seen.add(row.session)
    return found


def resumed_with_parent(rows: Sequence[FleetRow]) -> list[FleetRow]:
    """Each interrupted child under an interrupted coordinator names the coordinator's resume,
    which resumes it: after a coordinator's kill a person has one command to run, not one per
    session with no word of the order."""
    by_name = {(r.namespace, r.session): r for r in rows}
    resumed = []
    for row in rows:
        ancestor = interrupted_ancestor(row, by_name)
        resumed.append(row if ancestor is None else row.model_copy(update={"command": ancestor.command}))
    return resumed


def _unlabelled_coordinator(name: str, sessions: list[FleetRow]) -> list[FleetRow]:
    """With no session labelled with the objective: the coordinator of that name, if there is one,
    and the children it started (unlabelled like it), which are the objective a person means."""
    coordinator = [r for r in sessions if r.session == name and r.children]
    if not coordinator:
        return []
    return coordinator + [r for r in sessions if r.parent == name and not r.objective]


def objective_waits(row: FleetRow, names: set[str]) -> list[FleetWait]:
    """What the whole objective waits on of one session's waits: not a coordinator's wait on its
    own child session (the child's row says what it waits on), nor the review of a child's
    deliverables (they come back to the coordinator, where they are reviewed)."""
    waits = []
    for wait in row.waits:
        child = wait.what.removeprefix(CHILD_CONDITION_PREFIX)
        if wait.kind == "external" and wait.what.startswith(CHILD_CONDITION_PREFIX) and child in names:
            continue
        if wait.kind == "review" and row.parent in names:
            continue
        waits.append(wait)
    return waits


def objective_view(objective: str, rows: Iterable[FleetRow]) -> ObjectiveView:
    """The sessions that serve one objective (labelled with it; with none labelled, the coordinator
    of that name and its children), and what the whole waits on: every wait a person or
    the world must end, without the coordinator's waits on its own child sessions (each child's
    row says what it waits on) and without the review of a child's deliverables (they come back
    to the coordinator)."""
    sessions = fleet_view(rows).sessions
    mine = [r for r in sessions if r.objective == objective] or _unlabelled_coordinator(objective, sessions)
    names = {r.session for r in mine}
    by_name = {(r.namespace, r.session): r for r in mine}
    resumed_by = {r.session: a.session for r in mine if (a := interrupted_ancestor(r, by_name)) is not None}
    waits: list[ObjectiveWait] = []
    for row in mine:
        if row.bucket == "interrupted" and row.session not in resumed_by:
            children = sorted(child for child, by in resumed_by.items() if by == row.session)
            what = (
                f"{row.phase} (with {', '.join(children)}, which its resume resumes)"
                if children
                else row.phase
            )
            waits.append(
                ObjectiveWait(session=row.session, kind="interrupted", what=what, command=row.command)
            )
        if row.bucket == "needs_attention":
            waits.append(
                ObjectiveWait(
                    session=row.session,
                    kind="needs_attention",
                    what=row.problem or row.phase,
                    command=row.command,
                )
            )
        if row.bucket == "failed":
            waits.append(
                ObjectiveWait(
                    session=row.session, kind="failed", what=row.problem or row.phase, command=row.command
                )
            )
        waits += [
            ObjectiveWait(session=row.session, kind=wait.kind, what=wait.what, command=wait.command)
            for wait in objective_waits(row, names)
        ]
    return ObjectiveView(
        objective=objective,
        sessions=mine,
        # Counted as the rows show them: a child's review and a coordinator's wait on its child
        # are not what the whole waits on, so no count includes them.
        summary=summarize([r.model_copy(update={"waits": objective_waits(r, names)}) for r in mine]),
        waits_on=waits,
        # Done once every session succeeded and nothing but a review of what they made is left.
        done=bool(mine)
        and all(r.bucket == "succeeded" for r in mine)
        and all(w.kind == "review" for w in waits),
    )
