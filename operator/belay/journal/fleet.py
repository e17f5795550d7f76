"""The fleet view: many sessions at a glance, and the sessions that serve one objective.

One row per session, from the session's status as `belay.journal.status.session_status` projects
it (locally, from the record and the attempt's liveness; in a cluster, the AgentSession's status,
which the operator projects with the same function): its phase, what it waits on, kept apart by
who can act (you; an external condition; your review), the one command that unblocks it, the
deliverables it has published and how long ago its record last moved. The summary counts the
sessions by what they need. Pure: the caller passes the status, the labels, its own `now`, and how
commands are spelled where the session runs (`belay ...` locally, `kubectl belay ...` in a
cluster), so the same rows come out of `belay sessions` and `kubectl belay sessions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from belay.journal import commands

OBJECTIVE_LABEL = "belay.dev/objective"
PARENT_LABEL = "belay.dev/parent"
PART_LABEL = "belay.dev/part"
# A coordinator's wait on one of its child sessions: id `session-<child>`, condition `session:<child>`.
CHILD_CONDITION_PREFIX = "session:"
CHILD_WAIT_PREFIX = "session-"

Bucket = Literal[
    "moving", "waiting_on_you", "on_external", "ready_for_review", "interrupted", "failed", "succeeded"
]
BUCKETS: tuple[Bucket, ...] = (
    "moving",
    "waiting_on_you",
    "on_external",
    "ready_for_review",
    "interrupted",
    "failed",
    "succeeded",
)
BUCKET_WORDS: dict[Bucket, str] = {
    "moving": "moving",
    "waiting_on_you": "waiting on you",
    "on_external": "on external conditions",
    "ready_for_review": "ready for review",
    "interrupted": "interrupted",
    "failed": "failed",
    "succeeded": "succeeded",
}
# Operator problems that stop a session until a person acts, whatever phase it showed last.
STALLING_PROBLEMS = ("RecordCorrupt", "ForkSourceMissing")

# How a command is spelled where the session runs: identity locally, `commands.in_cluster` there.
CommandStyle = Callable[[str], str]


def local_commands(command: str) -> str:
    return command


class FleetModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetRow(FleetModel):
    session: str
    namespace: str | None = None
    objective: str | None = None
    part: str | None = None
    parent: str | None = None
    phase: str
    bucket: Bucket
    step: str | None = None
    # What a person can act on, apart: approvals, reconciliations and questions; external
    # conditions; deliverables waiting for review.
    waits_on_user: list[str] = []
    waits_on_external: list[str] = []
    ready_for_review: list[str] = []
    command: str | None = None  # the one command that unblocks it, spelled for where it runs
    deliverables: list[str] = []
    children: list[str] = []
    events: int = 0
    last_event_at: datetime | None = None
    last_event_age_s: int | None = None
    problem: str | None = None  # the operator cannot go on with it (a corrupt record, ...)


class FleetSummary(FleetModel):
    sessions: int
    moving: int = 0
    waiting_on_you: int = 0
    on_external: int = 0
    ready_for_review: int = 0
    interrupted: int = 0
    failed: int = 0
    succeeded: int = 0
    line: str


class FleetView(FleetModel):
    sessions: list[FleetRow]
    summary: FleetSummary


class ObjectiveWait(FleetModel):
    session: str
    kind: Literal["user", "external", "review", "interrupted", "failed"]
    what: str
    command: str | None = None


class ObjectiveView(FleetModel):
    objective: str
    sessions: list[FleetRow]
    summary: FleetSummary
    waits_on: list[ObjectiveWait]  # what the whole waits on, its own internal waits left out
    done: bool  # every session succeeded


# --------------------------------------------------------------------------------------------------
# One row


def _bucket(phase: str, status: Mapping[str, Any], stalled_by: str | None) -> Bucket:
    if phase == "Succeeded":
        return "succeeded"
    if phase in ("Failed", "RecoveryFailed", "RecordCorrupt") or stalled_by in STALLING_PROBLEMS:
        return "failed"
    if phase == "Interrupted" or (phase == "Recovering" and status.get("interruption")):
        return "interrupted"
    if phase == "WaitingOnUser":
        return "waiting_on_you"
    if phase == "WaitingOnExternal":
        return "on_external"
    if phase == "ReadyForReview":
        return "ready_for_review"
    return "moving"


def _problem(phase: str, status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(reason, text) of what stops the session besides its phase: a failed recovery, or a Stalled
    or Reconciling condition the operator set on its own (the record says nothing of it)."""
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Stalled", "Reconciling") and condition.get("status") == "True":
            reason = str(condition.get("reason", ""))
            if reason in (*STALLING_PROBLEMS, "StoreUnavailable"):
                return reason, f"{reason}: {condition.get('message', '')}".rstrip(": ")
    if phase == "RecoveryFailed" and status.get("waitingOn"):
        return None, str(status["waitingOn"])
    return None, None


def _waits(status: Mapping[str, Any]) -> tuple[list[str], list[str], list[str], list[dict[str, Any]]]:
    user = [f"approval {a['approvalId']}" for a in status.get("pendingApprovals") or []]
    user += [f"reconcile {op}" for op in status.get("unknownOutcomes") or []]
    waits = list(status.get("waits") or [])
    for wait in waits:
        # A reconcile wait asks about an unknown outcome listed above.
        if wait.get("kind") == "on_user" and wait.get("condition") not in (
            status.get("unknownOutcomes") or []
        ):
            user.append(f"answer {wait['waitId']}")
    external = [str(w.get("condition") or w["waitId"]) for w in waits if w.get("kind") == "on_external"]
    review = [str(w.get("artifact") or w["waitId"]) for w in waits if w.get("kind") == "ready_for_review"]
    return user, external, review, waits


def unblocking_command(
    session: str, phase: str, status: Mapping[str, Any], style: CommandStyle
) -> str | None:
    """The one command a person runs next for the session, or None when nothing a person runs
    moves it on (it is moving, or the operator acts)."""
    interruption = status.get("interruption") or {}
    if phase == "Interrupted" and interruption.get("command"):
        return style(str(interruption["command"]))
    if phase in ("Failed", "RecoveryFailed"):
        return style(commands.brief(session))
    waits = list(status.get("waits") or [])
    if phase == "WaitingOnUser":
        approvals = status.get("pendingApprovals") or []
        if approvals:
            return style(commands.approve(session, approvals[0]["approvalId"]))
        unknown = status.get("unknownOutcomes") or []
        if unknown:
            return style(commands.reconcile(session, unknown[0]))
        asked = next((w for w in waits if w.get("kind") == "on_user"), None)
        if asked is not None:
            return style(commands.answer(session, asked["waitId"]))
    if phase == "WaitingOnExternal":
        external = next((w for w in waits if w.get("kind") == "on_external"), None)
        if external is not None:
            condition = str(external.get("condition") or "")
            if condition.startswith(CHILD_CONDITION_PREFIX):
                # Its own session ends the wait; what moves that session on is in its row.
                return style(commands.brief(condition.removeprefix(CHILD_CONDITION_PREFIX)))
            # A yes to the wait says the condition holds.
            return style(commands.approve(session, external["waitId"]))
    if phase == "ReadyForReview":
        review = next((w for w in waits if w.get("kind") == "ready_for_review"), None)
        if review is not None and review.get("artifact"):
            return style(commands.download(session, str(review["artifact"])))
    return None


def fleet_row(
    session: str,
    status: Mapping[str, Any] | None,
    *,
    now: datetime,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
    style: CommandStyle = local_commands,
) -> FleetRow:
    """The row of one session from its status (camelCase, as the AgentSession carries it)."""
    status = status or {}
    labels = labels or {}
    phase = str(status.get("phase") or "Pending")
    stalled_by, problem = _problem(phase, status)
    user, external, review, _ = _waits(status)
    parent = status.get("parent") or {}
    last = status.get("lastEventAt")
    last_at = datetime.fromisoformat(last) if isinstance(last, str) else last
    return FleetRow(
        session=session,
        namespace=namespace,
        objective=labels.get(OBJECTIVE_LABEL) or parent.get("objective") or None,
        part=labels.get(PART_LABEL) or parent.get("part") or None,
        parent=labels.get(PARENT_LABEL) or parent.get("session") or None,
        phase=phase,
        bucket=_bucket(phase, status, stalled_by),
        step=status.get("currentStep"),
        waits_on_user=user,
        waits_on_external=external,
        ready_for_review=review,
        command=unblocking_command(session, phase, status, style),
        deliverables=[str(d["name"]) for d in status.get("deliverables") or []],
        children=[str(c["session"]) for c in status.get("children") or []],
        events=int(status.get("lastSeq") or 0),
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


def summarize(rows: Sequence[FleetRow]) -> FleetSummary:
    counts = {bucket: sum(1 for r in rows if r.bucket == bucket) for bucket in BUCKETS}
    parts = ", ".join(f"{counts[b]} {BUCKET_WORDS[b]}" for b in BUCKETS)
    line = f"{len(rows)} session{'s' if len(rows) != 1 else ''}: {parts}"
    return FleetSummary(sessions=len(rows), line=line, **counts)


def fleet_view(rows: Iterable[FleetRow]) -> FleetView:
    ordered = sorted(rows, key=lambda r: (r.namespace or "", r.session))
    return FleetView(sessions=ordered, summary=summarize(ordered))


# --------------------------------------------------------------------------------------------------
# Objectives


def objective_view(objective: str, rows: Iterable[FleetRow]) -> ObjectiveView:
    """The sessions that serve one objective, and what the whole waits on: every wait a person or
    the world must end, without the coordinator's waits on its own child sessions (each child's
    row says what it waits on) and without the review of a child's deliverables (they come back
    to the coordinator)."""
    mine = [r for r in fleet_view(rows).sessions if r.objective == objective]
    names = {r.session for r in mine}
    waits: list[ObjectiveWait] = []
    for row in mine:
        if row.bucket == "interrupted":
            waits.append(
                ObjectiveWait(session=row.session, kind="interrupted", what=row.phase, command=row.command)
            )
        if row.bucket == "failed":
            waits.append(
                ObjectiveWait(
                    session=row.session, kind="failed", what=row.problem or row.phase, command=row.command
                )
            )
        for item in row.waits_on_user:
            waits.append(ObjectiveWait(session=row.session, kind="user", what=item, command=row.command))
        for condition in row.waits_on_external:
            child = condition.removeprefix(CHILD_CONDITION_PREFIX)
            if condition.startswith(CHILD_CONDITION_PREFIX) and child in names:
                continue
            waits.append(
                ObjectiveWait(session=row.session, kind="external", what=condition, command=row.command)
            )
        if row.parent in names:
            continue  # a child's deliverables come back to its coordinator, where they are reviewed
        for name in row.ready_for_review:
            waits.append(ObjectiveWait(session=row.session, kind="review", what=name, command=row.command))
    return ObjectiveView(
        objective=objective,
        sessions=mine,
        summary=summarize(mine),
        waits_on=waits,
        done=bool(mine) and all(r.bucket == "succeeded" for r in mine),
    )


# --------------------------------------------------------------------------------------------------
# Text


def age(seconds: int | None) -> str:
    """As kubectl shows ages: 42s, 5m, 3h, 2d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table: every cell in full, however wide (nothing is cut when the output is piped),
    columns two spaces apart, no trailing blanks."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for line in (header, *rows):
        padded = [cell.ljust(width) for cell, width in zip(line[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*padded, line[-1]]).rstrip())
    return "\n".join(lines)


def _cell(items: Sequence[str]) -> str:
    return ",".join(items) if items else "-"


def render_fleet(view: FleetView, *, with_namespace: bool = False, where: str = "") -> str:
    """The table and the summary line; `where` names the place an empty fleet was looked for."""
    header = [
        "SESSION",
        "OBJECTIVE",
        "PHASE",
        "USER",
        "EXTERNAL",
        "REVIEW",
        "DELIVERABLES",
        "LAST EVENT",
        "COMMAND",
    ]
    if with_namespace:
        header.insert(0, "NAMESPACE")
    rows = []
    for row in view.sessions:
        cells = [
            row.session,
            row.objective or "-",
            row.phase if not row.problem else f"{row.phase} ({row.problem})",
            _cell(row.waits_on_user),
            _cell(row.waits_on_external),
            _cell(row.ready_for_review),
            _cell(row.deliverables),
            age(row.last_event_age_s),
            row.command or "-",
        ]
        if with_namespace:
            cells.insert(0, row.namespace or "-")
        rows.append(cells)
    table = columns(header, rows) if rows else f"no sessions{f' in {where}' if where else ''}"
    return f"{table}\n{view.summary.line}"


def render_objective(view: ObjectiveView, *, with_namespace: bool = False) -> str:
    lines = [f"Objective {view.objective}: {view.summary.line}"]
    header = ["SESSION", "PART", "PARENT", "PHASE", "DELIVERABLES", "WAITS ON", "COMMAND"]
    if with_namespace:
        header.insert(0, "NAMESPACE")
    rows = []
    for row in view.sessions:
        waits = [*row.waits_on_user, *row.waits_on_external, *(f"review {n}" for n in row.ready_for_review)]
        cells = [
            row.session,
            row.part or ("coordinator" if row.children else "-"),
            row.parent or "-",
            row.phase,
            _cell(row.deliverables),
            _cell(waits),
            row.command or "-",
        ]
        if with_namespace:
            cells.insert(0, row.namespace or "-")
        rows.append(cells)
    lines.append(columns(header, rows) if rows else "no sessions carry this objective")
    if view.done:
        lines.append("The whole waits on nothing: every session succeeded.")
    elif not view.waits_on:
        lines.append("The whole waits on nothing a person or the world must do: its sessions are moving.")
    else:
        lines.append("The whole waits on:")
        for wait in view.waits_on:
            command = f": {wait.command}" if wait.command else ""
            lines.append(f"  {wait.kind} {wait.what} in {wait.session}{command}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Label selectors, for the local fleet (the apiserver evaluates them in a cluster)


class SelectorError(ValueError):
    pass


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Equality-based label selectors as kubectl takes them: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
    joined by commas; every requirement must hold."""
    for raw in selector.split(","):
        requirement = raw.strip()
        if not requirement:
            continue
        if any(token in requirement for token in (" in ", " notin ", "(", ")")):
            raise SelectorError(f"set-based selectors are not supported here: {requirement!r}")
        if "!=" in requirement:
            key, value = (part.strip() for part in requirement.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = (part.strip() for part in requirement.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:].strip() in labels:
                return False
        elif requirement not in labels:
            return False
    return True
