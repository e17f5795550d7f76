"""The timeline report's model: one session over time.

A `SessionReport` holds a row per step, grouped by subagent, with its tool calls, checkpoints and
deliverables; a row per wait (on the user, an approval, an external condition, a review) with how
long it lasted and who ended it; the attempts, and the stretches between an attempt's last
recorded event and the start of the next (the interruptions); recoveries, rejections and scope
changes. It is built from the record (`belay.views.report.build`) or, where only an AgentSession's
status can be read, from the status and the Checkpoints (`belay.views.report.from_status`), and
drawn by `belay.views.report.html`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


BarKind = Literal["attempt", "subagent", "step", "call", "wait_user", "approval", "wait_external", "review"]
MarkKind = Literal[
    "asked",
    "ended",
    "checkpoint",
    "deliverable",
    "restored",
    "sandbox",
    "recovery_failed",
    "unknown",
    "reconciled",
    "rejected",
    "executor",
]


class Bar(Model):
    """Something that lasted: from `start` to `end` (None: still going when the report was made)."""

    kind: BarKind
    label: str
    start: datetime
    end: datetime | None = None
    status: str = ""  # a step's status; a call's ok | failed | open | unknown; a wait's outcome
    detail: str = ""  # shown on hover


class Mark(Model):
    """Something that happened at one moment."""

    kind: MarkKind
    at: datetime
    label: str
    ok: bool = True  # a checkpoint whose verification passed, a reconciliation that took effect


RowKind = Literal["session", "subagent", "step", "wait"]


class Row(Model):
    kind: RowKind
    label: str
    title: str = ""  # the full text behind a shortened label
    bars: list[Bar] = []
    marks: list[Mark] = []


class Gap(Model):
    """A stretch with no live attempt: from the last event the record holds of `attempt` to the
    start of the attempt that resumed it (`end` None: not resumed yet)."""

    attempt: int
    start: datetime
    end: datetime | None = None
    resumed_by: int | None = None
    why: str = ""
    doing: str = ""  # the steps that were running, in words
    next: str = ""  # for one not resumed yet: what happens next, with the command a person runs


class RecoveryLine(Model):
    """One thing an attempt did to recover, or found it could not: a sandbox lost, a new sandbox
    restored from a checkpoint, an operation whose outcome was unknown and how it was settled."""

    at: datetime
    by: str  # "attempt 2", or the person or component that did it
    text: str
    detail: str = ""
    ok: bool = True


class ScopeLine(Model):
    at: datetime
    request_version: int
    summary: str
    by: str = ""


class RejectionLine(Model):
    """A person turned down a published deliverable: the step that made it is redone."""

    at: datetime
    name: str
    by: str
    reason: str


class StepEntry(Model):
    step_id: str
    subagent: str
    title: str
    status: str
    started: datetime | None = None
    ended: datetime | None = None
    calls: int = 0
    failed_calls: int = 0
    interrupted: bool = False  # an interruption fell while it ran


WaitEntryKind = Literal["on_user", "approval", "on_external", "review"]


class WaitEntry(Model):
    wait_id: str
    kind: WaitEntryKind
    subagent: str = ""
    on: str  # on whom or on what: "you", "you: approve publish_deliverable", the external condition
    reason: str = ""
    opened: datetime | None = None  # None: not known (a status holds no history)
    resolved: datetime | None = None
    by: str = ""
    outcome: str = ""  # granted, rejected, answered, resolved


class DeliverableEntry(Model):
    name: str
    subagent: str = ""
    size: int | None = None
    sha256: str = ""
    command: str
    location: str = ""  # a file URI or a presigned URL, when the store gives one
    ready_for_review: bool = False


class SessionReport(Model):
    session_id: str
    phase: str
    goal: str
    now: datetime
    source: str  # where the report was read from, in words
    rows: list[Row]
    gaps: list[Gap]
    scope_changes: list[ScopeLine]
    recoveries: list[RecoveryLine] = []
    rejections: list[RejectionLine] = []
    steps: list[StepEntry]
    waits: list[WaitEntry]
    deliverables: list[DeliverableEntry]
    briefing: list[tuple[int, str]] = []  # (level, text): 0 a heading, 1 an entry, 2 a detail
    harness_lost_untimed: int = 0  # losses the source names without their times
    # Steps the source counts but does not list (a status lists its latest steps): how many, and of
    # those how many done and how many verified.
    steps_omitted: int = 0
    steps_omitted_done: int = 0
    steps_omitted_verified: int = 0
    steps_known: bool = True  # False: the source says nothing of the steps (a status not projected yet)


# How each kind of wait is drawn.
WAIT_BAR_KIND: dict[str, BarKind] = {
    "on_user": "wait_user",
    "approval": "approval",
    "on_external": "wait_external",
    "review": "review",
}
