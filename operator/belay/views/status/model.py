"""`AgentSession.status` as the record makes it: the model of the status view.

Every list is bounded (`STATUS_LIST_LIMIT` entries plus a count of the rest), so the object stays
small at any history length. Conditions follow the Kubernetes API conventions and kstatus:
`Ready` is always present; `Reconciling` and `Stalled` are "abnormal-true" and appear only while
True; Belay's own `WaitingOnUser`, `WaitingOnExternal`, `ReadyForReview` and `Recovering` are
always present, True or False. Types and reasons are named constants. The operator adds what only
it observes (`belay.api.status.AgentSessionStatus`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from belay.journal.events import WaitKind
from belay.journal.phase import Interruption, Phase, StatusModel
from belay.views.briefing.model import BriefingSections, OpenItem


class ConditionType(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    WAITING_ON_USER = "WaitingOnUser"
    WAITING_ON_EXTERNAL = "WaitingOnExternal"
    READY_FOR_REVIEW = "ReadyForReview"
    RECOVERING = "Recovering"


class Reason(StrEnum):
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    IDLE = "Idle"
    COMPLETED = "Completed"
    FAILED = "Failed"
    HARNESS_LOST = "HarnessLost"
    HARNESS_SILENT = "HarnessSilent"  # its lease is no longer renewed; not yet recorded as lost
    HARNESS_STOPPED = "HarnessStopped"  # it stopped cleanly on a signal; the next attempt starts
    # spec.executor names another executor: the running attempt ends at its next step boundary
    # and the next attempt runs there.
    EXECUTOR_CHANGE_PENDING = "ExecutorChangePending"
    INTERRUPTED = "Interrupted"
    SANDBOX_REPLACED = "SandboxReplaced"
    RESTORING = "Restoring"
    RECOVERY_FAILED = "RecoveryFailed"
    # Attempts ended the same way three times in a row at the same point (journal.state.repeats).
    REPEATED_FAILURE = "RepeatedFailure"
    AWAITING_APPROVAL = "AwaitingApproval"
    AWAITING_RECONCILIATION = "AwaitingReconciliation"
    AWAITING_DECISION = "AwaitingDecision"
    NOTHING_PENDING = "NothingPending"
    EXTERNAL_CONDITION = "ExternalCondition"
    DELIVERABLE_READY = "DeliverableReady"
    NO_DELIVERABLE = "NoDeliverable"
    NOT_RECOVERING = "NotRecovering"
    # The run ended and the record does not prove what it owes done (belay.journal.proof).
    UNPROVEN = "Unproven"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    type: ConditionType
    status: ConditionStatus
    reason: Reason | str
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class PendingApprovalStatus(StatusModel):
    approval_id: str
    operation_id: str
    tool: str
    payload_sha256: str
    summary: str = ""
    expires_at: datetime | None = None
    command: str
    # Where to read what the approval binds before deciding: the operation's canonical payload,
    # and the bytes it sends out (a deliverable's content), when there are some.
    payload_location: str | None = None
    content_sha256: str | None = None
    content_location: str | None = None


class WaitStatus(StatusModel):
    wait_id: str
    kind: WaitKind
    reason: str
    condition: str | None = None
    artifact: str | None = None
    owed: str | None = None  # a turn ended without this deliverable: a message answers it
    subagent: str | None = None


class DeliverableStatus(StatusModel):
    name: str
    sha256: str
    size: int
    media_type: str
    location: str
    subagent: str | None = None
    ready_for_review: bool = False
    command: str


class SubagentStatus(StatusModel):
    name: str
    tasks: int = 0
    running: int = 0
    done: int = 0
    sandbox_replacements: int = 0


class CheckpointStatus(StatusModel):
    checkpoint_id: str
    seq: int
    covers_seq: int
    verified: bool
    next_step: str | None = None


class Counts(StatusModel):
    events: int = 0
    tasks: int = 0
    tasks_running: int = 0
    tasks_done: int = 0
    tasks_verified: int = 0
    operations: int = 0
    open_operations: int = 0
    unknown_outcomes: int = 0
    pending_approvals: int = 0
    open_waits: int = 0
    artifacts: int = 0
    deliverables: int = 0
    results: int = 0
    invalid_results: int = 0
    checkpoints: int = 0
    notes: int = 0
    model_calls: int = 0
    tokens: int = 0  # input and output, as the model adapters recorded them


class SessionLinkStatus(StatusModel):
    """The session that started this one, or one this session started for a part of its
    objective (with how it ended, once it has)."""

    session: str
    part: str
    objective: str = ""
    phase: str = ""


class SessionStatus(StatusModel):
    phase: Phase
    waiting_on: str = ""  # one line for the printer column
    current_step: str | None = None
    request_version: int = 0
    last_seq: int = 0
    attempt: int = 0
    lease: int = 0
    restores: int = 0
    harness_lost: int = 0
    conditions: list[Condition]
    interruption: Interruption | None = None  # set while no attempt proves it is alive
    counts: Counts
    last_checkpoint: CheckpointStatus | None = None
    last_verified_checkpoint: CheckpointStatus | None = None
    pending_approvals: list[PendingApprovalStatus] = []
    pending_approvals_omitted: int = 0
    waits: list[WaitStatus] = []
    waits_omitted: int = 0
    deliverables: list[DeliverableStatus] = []
    deliverables_omitted: int = 0
    subagents: list[SubagentStatus] = []
    subagents_omitted: int = 0
    unknown_outcomes: list[str] = []
    unknown_outcomes_omitted: int = 0
    # What each open item is (`belay.views.briefing.classify`), those not done, commands spelled
    # for the local `belay`: what the fleet and objective views read.
    items: list[OpenItem] = []
    items_omitted: int = 0
    last_event_at: datetime | None = None  # for the fleet view's age of the last event
    parent: SessionLinkStatus | None = None
    children: list[SessionLinkStatus] = []
    children_omitted: int = 0
    # The briefing's sections as the record gives them (in a cluster; the operator writes them),
    # so `kubectl belay brief` prints the page `belay brief` prints.
    briefing: BriefingSections | None = None

    def condition(self, type_: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def to_status(self) -> dict[str, object]:
        """The JSON body for the custom resource's status subresource."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# The status of a session nobody has projected yet (an AgentSession the operator has not seen).
NOT_PROJECTED = SessionStatus(phase=Phase.PENDING, conditions=[], counts=Counts())
