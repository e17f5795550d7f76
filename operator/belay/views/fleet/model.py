"""The fleet view's model: many sessions at a glance, and the sessions that serve one objective.

One row per session: its phase, what it waits on, kept apart by who can act (you; an external
condition; your review), the one command that unblocks it, the deliverables it has published and
how long ago its record last moved. The summary counts the sessions by what they need.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

OBJECTIVE_LABEL = "belay.dev/objective"
PARENT_LABEL = "belay.dev/parent"
PART_LABEL = "belay.dev/part"

Bucket = Literal[
    "moving",
    "waiting_on_you",
    "on_external",
    "ready_for_review",
    "interrupted",
    "needs_attention",
    "failed",
    "succeeded",
]
# The buckets in the order the fleet lists them: the Literal's own order, written once.
BUCKETS: tuple[Bucket, ...] = get_args(Bucket)
BUCKET_WORDS: dict[Bucket, str] = {
    "moving": "moving",
    "waiting_on_you": "waiting on you",
    "on_external": "on external conditions",
    "ready_for_review": "ready for review",
    "interrupted": "interrupted",
    "needs_attention": "needing attention",
    "failed": "failed",
    "succeeded": "succeeded",
}
# Operator problems that stop a session until a person acts, whatever phase it showed last.
STALLING_PROBLEMS = ("RecordCorrupt", "ForkSourceMissing")


class FleetModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetWait(FleetModel):
    """One thing a session waits on, and the command that ends it, spelled for where it runs."""

    kind: Literal["user", "external", "review"]
    what: str
    command: str | None = None


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
    waits: list[FleetWait] = []  # each of the three above, with the command that ends it
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
    needs_attention: int = 0
    failed: int = 0
    succeeded: int = 0
    line: str


class FleetView(FleetModel):
    sessions: list[FleetRow]
    summary: FleetSummary


class ObjectiveWait(FleetModel):
    session: str
    kind: Literal["user", "external", "review", "interrupted", "needs_attention", "failed"]
    what: str
    command: str | None = None


class ObjectiveView(FleetModel):
    objective: str
    sessions: list[FleetRow]
    summary: FleetSummary
    waits_on: list[ObjectiveWait]  # what the whole waits on, its own internal waits left out
    done: bool  # every session succeeded
