"""The briefing's model: what a person coming back needs, without reading the conversation.

It answers the questions a returning person asks (docs/cli.md, "Reading the record"): what was
asked and every scope change since (when, by whom, the difference in the request, and under it what
became invalid and what stays reusable, and why); what was rejected and is being redone; which
steps are done and verified; what is running; what waits on the person (approvals, with the command
that fetches what they bind, decisions, reconciliations) with the exact command to act; what needs
attention (an external effect that failed, whose outcome is unknown, or that took effect more than
once, with what to do); the effects made in the world; what waits on an external condition; what
is ready for review and where to download it; which findings are hypotheses and which are accepted
decisions; the attempts, recoveries and unknown outcomes; and how many secrets were redacted before
they were recorded. When no attempt proves it is alive it says so first: since when, what the
attempt was doing, what will happen to each operation it left without a result, and the exact
command that continues the session. Its resources: each subagent's sandbox (where, network
profile, alive or not), the budgets used and left, and every subagent's last verified checkpoint.

`BriefingSections` is what the record says; a `Briefing` adds the header, the request and what the
builder observes where the session runs (its sandboxes, its budgets against the clock). The
builders fill it from the fold (`belay.views.briefing.build`) or from an AgentSession's typed
status, which carries the sections as the operator built them (`belay.views.status.briefing`);
the renderers (`belay.views.briefing.render`) read only the model, so `belay brief` and `kubectl
belay brief` print the same page. Every list is capped so a long session still fits on a page, and
what is left out is counted ("... and N more"). Field names are snake_case in `belay brief --json`
and camelCase inside a status, as Kubernetes objects spell them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from belay.journal.events import TaskStatus
from belay.journal.phase import Interruption, Phase, StatusModel

LIST_LIMIT = 8  # entries per section before "... and N more"
STEP_LIMIT = 12
RESULT_LIMIT = 16
NOTE_LIMIT = 5
SCOPE_CHANGE_LIMIT = 6  # the most recent ones


class Model(StatusModel):
    pass


class RequestDifference(Model):
    part: str  # a request part, or "goal"
    before: str | None = None  # None: the part did not exist
    after: str | None = None  # None: the part was removed


class StepVerdict(Model):
    """A step a scope change or a rejection touched (or spared), where it stands now, and why."""

    step: str
    title: str = ""
    status: TaskStatus
    round: int = 1
    why: str


class OutputVerdict(Model):
    """An artifact, note or external effect a change touched (or spared), and why."""

    result_id: str
    label: str
    source: str
    why: str


class ScopeChangeItem(Model):
    request_version: int
    seq: int
    summary: str
    new_goal: str | None = None
    changed_parts: list[str]
    removed_parts: list[str]
    invalidated: list[str]  # the first RESULT_LIMIT, in recording order
    invalidated_count: int = 0
    by: str = ""
    at: datetime | None = None
    changes: list[RequestDifference] = []
    invalid_steps: list[StepVerdict] = []  # the first STEP_LIMIT steps it reopened
    invalid_steps_omitted: int = 0
    invalid_outputs: list[OutputVerdict] = []
    invalid_outputs_omitted: int = 0
    reusable_steps: list[StepVerdict] = []
    reusable_steps_omitted: int = 0
    reusable_outputs: list[OutputVerdict] = []
    reusable_outputs_omitted: int = 0


class RejectionItem(Model):
    kind: Literal["deliverable", "approval"]
    item: str
    sha256: str
    reason: str
    by: str = ""
    at: datetime | None = None
    steps: list[StepVerdict] = []  # what is redone because of it
    invalidated_count: int = 0
    # A deliverable collected from a child session: the child it reopened, with the reason.
    child: str = ""


# What an open item is, decided once (`belay.views.briefing.classify`) and read by every view.
ItemState = Literal[
    "running",
    "waiting_on_you",
    "waiting_on_external",
    "ready_for_review",
    "needs_attention",
    "done",
    "invalid",
]
ITEM_STATES: tuple[ItemState, ...] = (
    "running",
    "waiting_on_you",
    "waiting_on_external",
    "ready_for_review",
    "needs_attention",
    "done",
    "invalid",
)
# child: a child session that did not end Succeeded, or whose collected bytes are not its latest.
ItemKind = Literal["step", "operation", "wait", "approval", "deliverable", "child"]
# How a person ends a wait: approve or reject an approval, answer a question, reconcile an unknown
# outcome, mark an external condition met, review a deliverable, send a message to a subagent whose
# turn ended without its deliverable; a child session ends by itself.
EndedBy = Literal["approval", "answer", "reconcile", "condition", "child", "review", "message"]


class OpenItem(Model):
    """One item of the session and the one thing it is now."""

    kind: ItemKind
    id: str
    state: ItemState
    ended_by: EndedBy | None = None  # set on every wait (what the person runs to end it)
    subagent: str | None = None
    summary: str = ""
    label: str = ""  # how a table names it: "approval ID", a condition, a deliverable's name
    command: str | None = None  # the command that ends it, spelled for where the session runs
    alternative: str | None = None


class DecisionItem(Model):
    """A decision a person made: who, when and why."""

    seq: int
    kind: Literal["approval", "rejection", "answer", "reconciliation", "amend"]
    item: str
    outcome: str
    by: str = ""
    at: datetime | None = None
    reason: str = ""


class StepItem(Model):
    task_id: str
    title: str
    owner: str | None
    status: TaskStatus
    verified: bool
    deliverable: str | None = None
    round: int = 1
    reopened_because: str | None = None  # set while a reopened step waits to be done again
    # The deliverable it owes does not exist (its turn ended without it): not done, whatever the
    # record's last word on it.
    missing: str | None = None
    # Its verification failed in this round (the command and its exit): not done, whatever the
    # record's status says (belay.journal.proof); shown failed.
    verification_failed: str | None = None


class RunningItem(Model):
    kind: Literal["task", "operation"]
    id: str
    description: str
    subagent: str | None = None


class FetchItem(Model):
    """What an approval binds, and the command that downloads it to read before deciding."""

    what: str
    sha256: str
    size: int
    command: str


class ActionItem(Model):
    """Something only the person can unblock, and the command that does it."""

    # message: a subagent ended its turn without its deliverable; `command` sends it a message,
    # `also` amends the request, `alternative` ends the session without the deliverable.
    kind: Literal["approval", "decision", "reconciliation", "message"]
    id: str
    summary: str
    command: str
    alternative: str | None = None
    also: str | None = None
    payload_sha256: str | None = None
    expires_at: datetime | None = None
    fetch: list[FetchItem] = []


class AttentionItem(Model):
    """An external effect that went wrong, what it is, and what to do about it."""

    # session_failed: why the session failed (its reason and detail), with the resume that gives it
    # a fresh budget when it exhausted recovery.maxAttempts on this machine;
    # left_open: an operation or a step without an end in a session that ended or failed;
    # failed_delegation: a child session that could not be started or awaited; unproven: what the
    # record does not prove done (a step or its verification failed, an empty or unverified
    # deliverable, a child that did not succeed), with the command that reopens it.
    kind: Literal[
        "session_failed",
        "failed_effect",
        "unknown_effect",
        "repeated_effect",
        "left_open",
        "failed_delegation",
        "unproven",
    ]
    id: str  # the operation
    summary: str
    command: str | None = None
    alternative: str | None = None
    effects: list[str] = []  # a repeated effect: what each time made, as the external system names it


class EffectItem(Model):
    """An operation with an effect in the world (unsafe or keyed) and what became of it."""

    operation_id: str
    tool: str
    subagent: str | None = None
    outcome: Literal["made", "failed", "unknown", "pending"]
    ref: str = ""  # what it made, as the external system names it (a ticket id)
    at: datetime | None = None
    detail: str = ""


class ExternalItem(Model):
    wait_id: str
    reason: str
    condition: str | None = None
    command: str | None = None  # what marks the condition met (a child session ends by itself)


class ReviewItem(Model):
    name: str
    description: str = ""
    subagent: str | None = None
    sha256: str | None = None
    size: int | None = None
    media_type: str | None = None
    location: str | None = None
    command: str
    alternative: str | None = None  # what turns it down
    # These very bytes were rejected before (by whom and why): republished unchanged.
    rejected_before: str | None = None


class NoteItem(Model):
    note_id: str
    text: str
    status: str
    invalid_because: str | None = None  # a scope change or rejection invalidated what it rests on


class UnknownOutcomeItem(Model):
    operation_id: str
    tool: str
    detail: str = ""


class ExecutorMoveItem(Model):
    """The session moved to another executor (or model) from its next attempt on."""

    from_type: str
    from_model: str | None = None
    to_type: str
    to_model: str | None = None
    at_seq: int = 0
    by: str = ""
    reason: str = ""


class RecoveryItem(Model):
    attempt: int = 0
    model: str = ""  # what the latest attempt started deciding with (a local stand-in says so)
    harness_lost: int = 0
    restores: int = 0  # every restore, the first seeding of each sandbox included
    recovery_restores: int = 0  # restores into a sandbox that replaced an earlier one
    sandbox_replaced: int = 0
    recovery_failures: int = 0
    last_failure: str | None = None
    restored_from: str | None = None
    unknown_outcomes: list[UnknownOutcomeItem] = []
    reconciled: list[str] = []
    executor_moves: list[ExecutorMoveItem] = []  # oldest first


class CheckpointItem(Model):
    checkpoint_id: str
    subagent: str | None = None
    seq: int
    covers_seq: int
    verification: str | None
    next_step: str | None


class SandboxItem(Model):
    """One subagent's sandbox: where it runs, its network profile, and whether it is alive."""

    subagent: str
    where: str = ""  # a local workspace (and pid), or a pod
    network_profile: str = ""
    alive: bool | None = None  # None: not observed by whoever built the briefing
    started_by_attempt: int | None = None
    recorded: str = ""  # what its start recorded: pid, profile, isolation
    restored_from: str | None = None
    # The latest change of one of its tool servers' listings between two attempts.
    tools_changed: str = ""


class ChildItem(Model):
    """A child session this coordinator started, as its own record says (read where the page is
    built, beside the coordinator's record): its phase, and when no attempt of it is alive, since
    when, why and the command that resumes it; and its hypotheses and decisions, which the
    coordinator's page lists under the child's name."""

    session: str
    part: str
    phase: Phase | None = None  # None: no record of it here yet
    summary: str  # what its record says, in words
    command: str | None = None  # what a person runs to move it on, when nothing runs it
    hypotheses: list[NoteItem] = []
    decisions: list[NoteItem] = []
    hypotheses_omitted: int = 0
    decisions_omitted: int = 0


class BudgetItem(Model):
    name: str  # as in spec.budgets
    limit: int
    used: int
    left: int


class RemoteSessionItem(Model):
    """A provider's session a managed executor holds for one subagent."""

    subagent: str
    executor: str
    remote_session_id: str
    endpoint: str
    calls: int
    delivered: int
    refused: int
    interruptions: int
    not_run: int = 0  # calls asked on work a change reopened, answered "not run"
    failure: str = ""
    # The remote sessions it replaced (each lost), oldest first, and why the last one was lost:
    # the executor started this one seeded from the record.
    replaced: list[str] = []
    replaced_because: str = ""


class BudgetUsage(Model):
    """What the record shows used of what a budget can limit; the wall clock is counted from
    `started_at` by whoever builds the briefing, against its own `now`."""

    model_calls: int = 0
    tokens: int = 0  # input and output, as the model adapters recorded them
    input_tokens: int = 0
    cached_input_tokens: int = 0  # of input_tokens, read from the provider's prompt cache
    steps: int = 0  # steps completed (a subagent's own task is not a step)
    started_at: datetime | None = None  # the first event


class BriefingSections(Model):
    """What the record says, as of its last event, in every section of the briefing that the rest
    of a status does not carry; an AgentSession's status carries it as `briefing`, built by the
    operator with the commands spelled for `kubectl belay`."""

    # Every open item and what it is: the one classification the sections below are cut from.
    items: list[OpenItem] = []
    decided: list[DecisionItem] = []  # what people decided, the latest ones, oldest first
    decided_omitted: int = 0
    scope_changes: list[ScopeChangeItem] = []
    scope_changes_omitted: int = 0  # the earliest ones
    rejections: list[RejectionItem] = []
    rejections_omitted: int = 0  # the earliest ones
    steps: list[StepItem] = []
    steps_omitted: int = 0  # the earliest finished steps make room for the active ones
    steps_omitted_done: int = 0
    steps_omitted_verified: int = 0
    running: list[RunningItem] = []
    waiting_on_you: list[ActionItem] = []
    needs_attention: list[AttentionItem] = []
    needs_attention_omitted: int = 0  # the earliest failed effects nobody is asked about
    effects: list[EffectItem] = []
    effects_omitted: int = 0  # the earliest ones
    waiting_on_external: list[ExternalItem] = []
    ready_for_review: list[ReviewItem] = []
    hypotheses: list[NoteItem] = []
    decisions: list[NoteItem] = []
    findings: list[NoteItem] = []
    notes_omitted: int = 0
    hypotheses_omitted: int = 0  # each list keeps its most recently updated notes
    decisions_omitted: int = 0
    findings_omitted: int = 0
    recovery: RecoveryItem = RecoveryItem()
    sandboxes: list[SandboxItem] = []  # as the record tells them: who started each, from what
    checkpoints: list[CheckpointItem] = []  # every subagent's last verified checkpoint
    secrets_redacted: int = 0
    remote_sessions: list[RemoteSessionItem] = []
    usage: BudgetUsage = BudgetUsage()
    every_event: str = ""  # the command that lists the whole record, where a section counts


class Briefing(BriefingSections):
    """The page: the header and the request, the sections, and what the builder observed."""

    session_id: str
    phase: Phase
    current_step: str | None
    last_seq: int
    goal: str
    request_version: int
    request_parts: dict[str, str]
    artifact_store: str = ""
    record: str = ""  # where the event record is, when not in the home's own events.db
    interruption: Interruption | None = None  # no attempt proves it is alive
    # sandboxes: as the record tells them, with what the builder observed of each
    budgets: list[BudgetItem] = []
    # A coordinator's child sessions as their own records say, where the builder read them.
    children: list[ChildItem] = []
