"""`AgentSession.status`: the status view's model plus what only the operator knows (observed
generation, the pods it runs, the session it forked from).

Condition types, reasons and phases are the views' constants, re-exported here so the API has one
set of names; the projection itself is a pure function in `belay.views.status.build`.
"""

from __future__ import annotations

from typing import Literal

from belay.journal.phase import Phase, StatusModel
from belay.views.status.model import (
    Condition,
    ConditionStatus,
    ConditionType,
    Counts,
    Reason,
    SessionStatus,
)

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


class OperatorReason:
    """Reasons the operator sets on its own (the record has not said anything yet, or cannot)."""

    CREATING_PODS = "CreatingPods"
    STORE_UNAVAILABLE = "StoreUnavailable"
    RECORD_CORRUPT = "RecordCorrupt"
    # The operator holds another record key than the store's records were written with
    # (`belay.stores.key_guard`): nothing is read until the key is set right.
    RECORD_KEY_MISMATCH = "RecordKeyMismatch"
    # The session's namespace lacks a ServiceAccount or a Secret its pods load
    # (`belay.controller.namespace_needs`): no pod is made until it exists.
    MISSING_IN_NAMESPACE = "MissingInNamespace"
    FORK_SOURCE_MISSING = "ForkSourceMissing"
    # An artifact input whose source session's record does not prove the deliverable, or whose
    # bytes this session cannot read (`belay.controller.artifact_inputs`): no pod is made.
    ARTIFACT_INPUT_REFUSED = "ArtifactInputRefused"
    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    RECORD_BELONGS_TO_ANOTHER = "RecordBelongsToAnother"
    # The spec names what this operator does not allow (an image, a RuntimeClass, a store, an
    # egress rule): nothing of the session is made until it is changed.
    NOT_ALLOWED = "NotAllowed"


class HarnessPodStatus(StatusModel):
    pod: str
    attempt: int
    lease: int
    phase: PodPhase = "Pending"


class SandboxPodStatus(StatusModel):
    subagent: str
    pod: str
    service: str
    phase: PodPhase = "Pending"
    replacements: int = 0


class ForkStatus(StatusModel):
    session: str
    checkpoint_id: str
    covers_seq: int


class EventsExport(StatusModel):
    """The session's events from `fromSeq` to `lastSeq`, as `belay events --json` prints them,
    exported on request (the annotation `belay.dev/events-request`, set by `kubectl belay
    events`) into the artifact store and fetched through `location`."""

    request: str
    from_seq: int
    last_seq: int
    count: int
    sha256: str
    size: int
    location: str


class DrillDeliverable(StatusModel):
    name: str
    sha256: str  # the drill copy's ("" when it has none)
    source_sha256: str  # the session's own ("" when it has none)


class DrillStatus(StatusModel):
    """The interruption drill asked for with the annotation `belay.dev/drill-request`: its copy of
    the session, the points where the copy's attempts stopped, and, once the copy ended, the
    verdict (`passed` None until then)."""

    request: str
    session: str
    points: list[str]
    phase: str
    attempts_lost: int = 0
    steps_run_twice: list[str] = []
    deliverables: list[DrillDeliverable] = []
    passed: bool | None = None


class AgentSessionStatus(SessionStatus):
    observed_generation: int | None = None
    harness: HarnessPodStatus | None = None
    sandboxes: list[SandboxPodStatus] = []
    forked_from: ForkStatus | None = None
    events_export: EventsExport | None = None
    drill: DrillStatus | None = None


# What the apiserver shows as the status of a session the operator has not projected yet (the
# CRD's default for `status`, applied when the object is read): no generation observed. kstatus
# (Flux, kpt) reads an object without conditions or an observed generation as Current, so without
# it a session nobody reconciles would look done; with it, generation 1 against observed 0 reads
# as InProgress until the operator's first pass.
UNOBSERVED = AgentSessionStatus(phase=Phase.PENDING, conditions=[], counts=Counts(), observed_generation=0)

__all__ = [
    "UNOBSERVED",
    "AgentSessionStatus",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "Counts",
    "DrillDeliverable",
    "DrillStatus",
    "EventsExport",
    "ForkStatus",
    "HarnessPodStatus",
    "OperatorReason",
    "Phase",
    "PodPhase",
    "Reason",
    "SandboxPodStatus",
]
