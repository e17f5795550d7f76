"""The timeline report of a session as a user with AgentSession and Checkpoint access sees it.

The status keeps no history, so the timeline has each checkpoint (when its object was created) on
its subagent's row, the interruption under way, and what waits now; the steps are those the
status's briefing lists and counts (a checkpoint is not a step); the briefing beside it is
`kubectl belay brief`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from belay.journal.commands import in_cluster
from belay.journal.events import WaitKind
from belay.views.report.model import (
    WAIT_BAR_KIND,
    Bar,
    DeliverableEntry,
    Gap,
    Mark,
    Row,
    SessionReport,
    StepEntry,
    WaitEntry,
    WaitEntryKind,
)
from belay.views.status.model import ConditionType, DeliverableStatus, SessionStatus


@dataclass(frozen=True)
class CheckpointObject:
    """What a Checkpoint object says, and when the apiserver created it."""

    checkpoint_id: str
    subagent: str
    seq: int
    verified: bool
    created: datetime | None


def fetch_command(deliverable: DeliverableStatus) -> str:
    """How a cluster user fetches a deliverable: `kubectl belay artifacts get`, which reads it with
    the user's own access to the artifact store (the status carries no presigned URL)."""
    return in_cluster(deliverable.command)


def _verified(cp: CheckpointObject) -> str:
    return "verified" if cp.verified else "not verified"


def _checkpoint_rows(checkpoints: Sequence[CheckpointObject]) -> list[Row]:
    """A row per subagent with its checkpoints as marks. A checkpoint is not a step (a subagent's
    inputs have one, a step redone has several), so it gets no row and no count of its own."""
    by_subagent: dict[str, list[CheckpointObject]] = {}
    for cp in sorted(checkpoints, key=lambda c: c.seq):
        by_subagent.setdefault(cp.subagent, []).append(cp)
    rows: list[Row] = []  # the status has no attempt's start or end: no attempts row
    for subagent, owned in by_subagent.items():
        marks = [
            Mark(
                kind="checkpoint",
                at=cp.created,
                label=f"checkpoint {cp.checkpoint_id} (seq {cp.seq}, {_verified(cp)})",
                ok=cp.verified,
            )
            for cp in owned
            if cp.created is not None
        ]
        rows.append(Row(kind="subagent", label=subagent or "the session", marks=marks))
    return rows


def _steps(status: SessionStatus) -> list[StepEntry]:
    """The steps the status's briefing lists (its latest ones; the rest it counts), without times:
    the status keeps none."""
    sections = status.briefing
    if sections is None:
        return []
    return [
        StepEntry(step_id=s.task_id, subagent=s.owner or "", title=s.title, status=s.status.value)
        for s in sections.steps
        if s.task_id != s.owner  # a subagent's own task is not a step
    ]


def _waits(status: SessionStatus) -> list[WaitEntry]:
    """What waits now. The status has no time for a single wait; its condition says since when the
    session has waited on that kind, which is when the first of those waits opened."""
    waiting_since = {c.type: c.last_transition_time for c in status.conditions if c.status == "True"}
    waits = [
        WaitEntry(
            wait_id=item.approval_id,
            kind="approval",
            on=f"you: approve {item.tool}",
            reason=item.summary,
            opened=waiting_since.get(ConditionType.WAITING_ON_USER),
        )
        for item in status.pending_approvals
    ]
    kinds: dict[WaitKind, tuple[WaitEntryKind, ConditionType]] = {
        WaitKind.ON_USER: ("on_user", ConditionType.WAITING_ON_USER),
        WaitKind.ON_EXTERNAL: ("on_external", ConditionType.WAITING_ON_EXTERNAL),
        WaitKind.READY_FOR_REVIEW: ("review", ConditionType.READY_FOR_REVIEW),
    }
    for wait in status.waits:
        kind, condition = kinds[wait.kind]
        waits.append(
            WaitEntry(
                wait_id=wait.wait_id,
                kind=kind,
                on=wait.condition or ("your review" if kind == "review" else "you"),
                reason=wait.reason,
                opened=waiting_since.get(condition),
            )
        )
    return waits


def _wait_rows(waits: Sequence[WaitEntry]) -> list[Row]:
    waiting = [w for w in waits if w.opened is not None]
    if not waiting:
        return []
    rows = [Row(kind="subagent", label="waiting now")]
    for w in waiting:
        assert w.opened is not None
        bar = Bar(
            kind=WAIT_BAR_KIND[w.kind],
            label=w.wait_id,
            start=w.opened,
            detail=f"waits on {w.on} (at most this long: since the session began waiting on it)",
        )
        rows.append(Row(kind="wait", label=w.wait_id, title=f"{w.wait_id}: {w.reason}", bars=[bar]))
    return rows


def status_report(
    name: str,
    status: SessionStatus,
    *,
    goal: str,
    checkpoints: Sequence[CheckpointObject],
    briefing: Sequence[tuple[int, str]],
    now: datetime,
) -> SessionReport:
    """`goal` is the spec's; `briefing` the rows of `kubectl belay brief`'s page."""
    rows = _checkpoint_rows(checkpoints)
    sections = status.briefing
    gaps = []
    gone = status.interruption
    if gone is not None and gone.since is not None:
        gaps.append(
            Gap(attempt=gone.attempt, start=gone.since, why=gone.why, doing=gone.doing, next=gone.next)
        )
    waits = _waits(status)
    deliverables = [
        DeliverableEntry(
            name=item.name,
            subagent=item.subagent or "",
            size=item.size,
            sha256=item.sha256,
            command=fetch_command(item),
            location=item.location,
            ready_for_review=item.ready_for_review,
        )
        for item in status.deliverables
    ]
    return SessionReport(
        session_id=name,
        phase=status.phase.value,
        goal=goal.strip(),
        now=now,
        source=(
            f"the AgentSession's status and its {len(checkpoints)} Checkpoint objects, which keep no history "
            "of steps, calls and waits: a wait's length is since its condition turned true "
            "(`belay report` where the record can be read shows every step, call and wait)"
        ),
        rows=rows + _wait_rows(waits),
        gaps=gaps,
        scope_changes=[],
        steps=_steps(status),
        waits=waits,
        deliverables=deliverables,
        briefing=list(briefing),
        harness_lost_untimed=status.harness_lost,
        steps_omitted=sections.steps_omitted if sections else 0,
        steps_omitted_done=sections.steps_omitted_done if sections else 0,
        steps_omitted_verified=sections.steps_omitted_verified if sections else 0,
        steps_known=sections is not None,
    )
