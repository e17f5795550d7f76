"""What the reconciler keeps of each session between its passes (`SessionMemory`: the folded
record, what it applied and created, the records of the sessions it coordinates), and what one
pass returns to the handler that made it (`PassResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from belay.api.status import AgentSessionStatus, DrillStatus, EventsExport, ForkStatus, OperatorReason
from belay.controller.recovery import HarnessDecision
from belay.controller.status import OperatorProblem, TransitionEvent
from belay.journal.events import ArtifactRef
from belay.journal.state import EMPTY, SessionState


@dataclass
class SessionMemory:
    state: SessionState = EMPTY
    applied_digest: str = ""
    applied_at: float = 0.0
    status: dict[str, Any] | None = None
    forked_from: ForkStatus | None = None
    fork_error: str = ""
    # Why an artifact input cannot be pinned (`belay.controller.artifact_inputs`); "" when none.
    input_error: str = ""
    tokens_created: frozenset[str] = frozenset()  # subagents whose sandbox token Secret exists
    policies_applied: bool = False  # the session's NetworkPolicies, before any pool pod is claimed
    store_unavailable: bool = False  # the status says the store did not answer: a pass clears it
    # Current sandbox pods seen running or pending: one that disappears afterwards is lost.
    seen_sandboxes: set[str] = field(default_factory=set)
    # Child sessions whose AgentSession this operator created or found, and their folded records.
    children_created: set[str] = field(default_factory=set)
    child_states: dict[str, SessionState] = field(default_factory=dict)
    # A child's coordinator's folded record, read once a person's change reopened the child.
    parent_state: SessionState = EMPTY
    # `spec.rejections` entries (item/sha256) this operator records nothing for, reported already.
    rejections_reported: set[str] = field(default_factory=set)
    # The drill asked for with the annotation: its copy's folded record and where it stands.
    drill_state: SessionState = EMPTY
    drill: DrillStatus | None = None
    # The last events export asked for with the annotation, and the blob that answers it.
    events_export: tuple[EventsExport, ArtifactRef] | None = None
    # The seq of the latest repeated failure, and when this operator first saw it (its backoff).
    repeat_seen: tuple[int, datetime] | None = None
    # The uid the record is bound to (`belay.controller.ownership`); nothing of a record bound to
    # another is folded: `foreign` says so, with its owner (None: it names none).
    owner: str | None = None
    foreign: bool = False
    foreign_owner: str | None = None
    # Whether the record under the session's bare name was looked at, and left there (not the
    # session's: looked at again once the spec adopts it).
    legacy_checked: bool = False
    legacy_left: bool = False

    def source_problem(self) -> OperatorProblem | None:
        """What another session's record lacks that this one needs before its first harness pod:
        a fork's checkpoint, an artifact input's proven deliverable."""
        if self.fork_error:
            return OperatorProblem(OperatorReason.FORK_SOURCE_MISSING, self.fork_error)
        if self.input_error:
            return OperatorProblem(OperatorReason.ARTIFACT_INPUT_REFUSED, self.input_error)
        return None


@dataclass
class PassResult:
    decision: HarnessDecision
    status: AgentSessionStatus
    transitions: list[TransitionEvent] = field(default_factory=list)
    # A harness renews the session's lease: only a clock notices it stop, so passes must keep
    # coming while nothing changes.
    follows_clock: bool = False
    # A backoff before the next attempt: the pass that starts it is due then, whatever else happens.
    next_pass_in_s: float | None = None
