"""The timeline report of a session as a user with AgentSession and Checkpoint access sees it.

The status keeps no history, so the timeline has each checkpoint (when its object was created),
the interruption under way, and what waits now; the briefing beside it is `kubectl belay brief`'s.
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


def _checkpoint_rows(checkpoints: Sequence[CheckpointObject]) -> tuple[list[Row], list[StepEntry]]:
    by_subagent: dict[str, list[CheckpointObject]] = {}
    for cp in sorted(checkpoints, key=lambda c: c.seq):
        by_subagent.setdefault(cp.subagent, []).append(cp)
    rows: list[Row] = []  # the status has no attempt's start or end: no attempts row
    steps = []
    for subagent, owned in by_subagent.items():
        rows.append(Row(kind="subagent", label=subagent or "the session"))
        for cp in owned:
            verified = "verified" if cp.verified else "not verified"
            marks = []
            if cp.created is not None:
                label = f"checkpoint {cp.checkpoint_id} (seq {cp.seq}, {verified})"
                marks.append(Mark(kind="checkpoint", at=cp.created, label=label, ok=cp.verified))
            rows.append(Row(kind="step", label=cp.checkpoint_id, marks=marks))
            steps.append(
                StepEntry(
                    step_id=cp.checkpoint_id,
                    subagent=subagent,
                    title=f"checkpoint at seq {cp.seq}",
                    status=verified,
                    ended=cp.created,
                )
            )
    return rows, steps


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
    rows, steps = _checkpoint_rows(checkpoints)
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
        steps=steps,
        waits=waits,
        deliverables=deliverables,
        briefing=list(briefing),
        harness_lost_untimed=status.harness_lost,
        progress=", ".join(f"{s.name} {s.done} of {s.tasks} tasks" for s in status.subagents),
    )
