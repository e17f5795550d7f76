"""`approve`, `reject`, `answer`, `reconcile`: what the id a person typed names, or why it names
nothing that waits on them.

Both command lines read the same facts of a session (`OpenItems`): locally from the folded record,
in a cluster from the AgentSession's status. What the id names decides what is recorded: an
approval or a rejection of a pending operation (bound to its payload hash), a rejection of a
published deliverable (bound to its bytes), a yes, a no or an answer to a wait, the verdict on an
unknown outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from belay.cli.core.errors import CommandError
from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.events import WaitKind
from belay.journal.state import SessionState
from belay.views.status.model import SessionStatus


@dataclass(frozen=True)
class PendingApproval:
    approval_id: str
    operation_id: str
    tool: str
    payload_sha256: str


@dataclass(frozen=True)
class OpenWait:
    wait_id: str
    kind: WaitKind
    condition: str | None = None
    artifact: str | None = None
    owed: str | None = None  # its subagent's turn ended without this deliverable
    subagent: str | None = None


@dataclass(frozen=True)
class Published:
    """A published deliverable: its name and the sha256 of its bytes."""

    name: str
    sha256: str


@dataclass(frozen=True)
class OpenItems:
    """What a person can decide in one session now."""

    session: str
    approvals: Sequence[PendingApproval]
    waits: Sequence[OpenWait]
    deliverables: Sequence[Published]
    unknown_outcomes: Sequence[str]
    # Artifacts that are no deliverable now (rejected, or withdrawn by a scope change), where the
    # record shows them.
    withdrawn: Sequence[Published] = ()
    style: CommandStyle = commands.local  # how the commands an error names are spelled
    # Deliverables collected from child sessions (`<child>/<name>`), by name: the child that made
    # each. Turning one down reopens its child, which whoever records the decision must be able
    # to do (`reopens_children`): the embedded runtime can, the operator cannot yet.
    collected: Mapping[str, str] = field(default_factory=dict)
    reopens_children: bool = True
    # What people already decided, by the id they decided on (an approval also by its operation):
    # "granted by dana at ...", so an id typed a second time is answered with the decision that
    # stands rather than "no such approval".
    decided: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_state(cls, state: SessionState) -> OpenItems:
        return cls(
            session=state.session_id,
            approvals=[
                PendingApproval(a.approval_id, a.operation_id, a.tool, a.payload_sha256)
                for a in state.pending_approval_records()
            ],
            waits=[
                OpenWait(w.wait_id, w.kind, w.condition, w.artifact, w.owed, w.subagent)
                for w in state.open_wait_records()
            ],
            deliverables=[
                Published(name, state.artifacts[name].ref.sha256)
                for name in sorted(state.deliverables, key=lambda n: (state.deliverables[n], n))
            ],
            unknown_outcomes=sorted(state.unknown_outcomes),
            withdrawn=[
                Published(name, record.ref.sha256)
                for name, record in state.artifacts.items()
                if name not in state.deliverables
            ],
            collected={
                name: link.session
                for name in state.deliverables
                if (link := state.collected_from(name)) is not None
            },
            decided=_decided(state.decisions),
        )

    @classmethod
    def of_status(cls, name: str, status: SessionStatus) -> OpenItems:
        return cls(
            session=name,
            approvals=[
                PendingApproval(a.approval_id, a.operation_id, a.tool, a.payload_sha256)
                for a in status.pending_approvals
            ],
            waits=[
                OpenWait(w.wait_id, w.kind, w.condition, w.artifact, w.owed, w.subagent) for w in status.waits
            ],
            deliverables=[Published(d.name, d.sha256) for d in status.deliverables],
            unknown_outcomes=list(status.unknown_outcomes),
            style=commands.in_cluster,
            collected={
                d.name: d.name.partition("/")[0]
                for d in status.deliverables
                if d.name.partition("/")[0] in {c.session for c in status.children if c.phase}
            },
            reopens_children=False,
            decided=_decided(status.briefing.decided if status.briefing else ()),
        )

    def waiting(self) -> str:
        """Every id that waits on a person, for an error message."""
        ids = [a.approval_id for a in self.approvals] + [w.wait_id for w in self.waits]
        return ", ".join(ids) or "nothing waits on you"


@dataclass(frozen=True)
class OnApproval:
    """The id names a pending approval (by its approval id or its operation's id)."""

    approval: PendingApproval


@dataclass(frozen=True)
class OnWait:
    """The id names an open wait: approve is a yes, reject a no (with the reason as its text)."""

    wait: OpenWait


@dataclass(frozen=True)
class OnDeliverable:
    """The id names a published deliverable (or the wait for its review): rejecting it redoes the
    step that made it, with the reason."""

    deliverable: Published
    reason: str
    # The child session that made it, for a deliverable collected from one: it is reopened with
    # the reason, and the step that awaited it waits for its next end.
    child: str = ""


class Decided(Protocol):
    """A decision as the record (`DecisionRecord`) and the status (`DecisionItem`) both hold it."""

    @property
    def kind(self) -> str: ...
    @property
    def item(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def by(self) -> str: ...
    @property
    def at(self) -> datetime | None: ...


def _decided(decisions: Iterable[Decided]) -> dict[str, str]:
    """Each decided id (the latest decision on it), as the sentence an error quotes."""
    said: dict[str, str] = {}
    for d in decisions:
        if d.kind not in ("approval", "answer", "reconciliation", "rejection"):
            continue
        when = f" at {d.at.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}" if d.at else ""
        sentence = f"{d.kind} {d.item}: {d.outcome} by {d.by or 'someone'}{when}"
        said[d.item] = sentence
        if d.kind == "approval":
            said[d.item.removeprefix("approve-")] = sentence
    return said


def _not_open(items: OpenItems, item_id: str) -> CommandError | None:
    """The error for an id that was decided already: the decision that stands, nothing recorded."""
    decided = items.decided.get(item_id)
    if decided is None:
        return None
    return CommandError(
        f"already decided in session {items.session}: {decided}; nothing was recorded "
        f"(pending: {items.waiting()})"
    )


def _approval(items: OpenItems, item_id: str) -> PendingApproval | None:
    return next((a for a in items.approvals if item_id in (a.approval_id, a.operation_id)), None)


def _wait(items: OpenItems, item_id: str) -> OpenWait | None:
    return next((w for w in items.waits if w.wait_id == item_id), None)


def to_approve(items: OpenItems, item_id: str) -> OnApproval | OnWait:
    """What `approve ID` grants: a pending approval, or a yes to an open wait (an external wait:
    its condition holds)."""
    approval = _approval(items, item_id)
    if approval is not None:
        return OnApproval(approval)
    wait = _wait(items, item_id)
    if wait is not None:
        return OnWait(wait)
    raise _not_open(items, item_id) or CommandError(
        f"no approval or wait {item_id!r} in session {items.session} (pending: {items.waiting()})"
    )


def to_reject(items: OpenItems, item_id: str, reason: str) -> OnApproval | OnWait | OnDeliverable:
    """What `reject ID` turns down: a published deliverable (by name, or by the id of the wait for
    its review; a reason is required, the step is redone with it), a pending approval, or an open
    wait (a no)."""
    named = next((d for d in items.deliverables if d.name == item_id), None)
    review = _wait(items, item_id)
    if named is None and review is not None and review.kind == WaitKind.READY_FOR_REVIEW:
        named = next((d for d in items.deliverables if d.name == review.artifact), None)
    if named is not None:
        if not reason.strip():
            raise CommandError(
                f'say why with --reason "...": the step that made {named.name} is redone with it'
            )
        child = items.collected.get(named.name, "")
        if child and not items.reopens_children:
            raise CommandError(
                f"{named.name} was collected from child session {child}: turning it down reopens "
                f"{child}, which the operator does not do yet (an edit of spec.request does not reopen "
                "children either); nothing was recorded. Fetch it with "
                f"`{items.style(commands.download(items.session, named.name))}`"
            )
        return OnDeliverable(named, reason.strip(), child)
    approval = _approval(items, item_id)
    if approval is not None:
        return OnApproval(approval)
    if review is not None:
        return OnWait(review)
    withdrawn = next((d for d in items.withdrawn if d.name == item_id), None)
    if withdrawn is not None:
        raise CommandError(
            f"{withdrawn.name} (sha256 {withdrawn.sha256}) is not a published deliverable now: it was "
            f"rejected, or a scope change withdrew it; `{items.style(commands.brief(items.session))}` "
            "shows where its step stands"
        )
    published = ", ".join(d.name for d in items.deliverables) or "none"
    raise _not_open(items, item_id) or CommandError(
        f"no approval, wait or deliverable {item_id!r} in session {items.session} "
        f"(pending: {items.waiting()}; deliverables: {published})"
    )


def collected_by_parent(target: OnDeliverable, child: str, parent: OpenItems) -> OnDeliverable | None:
    """A rejection of a child's deliverable whose end its coordinator (`parent`) collected, these
    very bytes: the same rejection at the coordinator, which reopens the child and redoes the
    coordinator's step that awaited it (in the child alone, the coordinator would go on listing the
    rejected bytes). None when the coordinator holds no such deliverable."""
    name = f"{child}/{target.deliverable.name}"
    collected = next((d for d in parent.deliverables if d.name == name), None)
    if (
        collected is None
        or parent.collected.get(name) != child
        or collected.sha256 != target.deliverable.sha256
    ):
        return None
    found = to_reject(parent, name, target.reason)
    return found if isinstance(found, OnDeliverable) else None


def to_answer(items: OpenItems, wait_id: str) -> OpenWait:
    """The open wait `answer WAIT TEXT` answers."""
    wait = _wait(items, wait_id)
    if wait is None:
        open_waits = ", ".join(w.wait_id for w in items.waits) or "none"
        raise _not_open(items, wait_id) or CommandError(
            f"no wait {wait_id!r} in session {items.session} (open waits: {open_waits})"
        )
    return wait


def to_reconcile(items: OpenItems, operation_id: str) -> str:
    """The operation `reconcile OPERATION --succeeded|--failed` settles."""
    if operation_id not in items.unknown_outcomes:
        unknown = ", ".join(items.unknown_outcomes) or "none"
        raise _not_open(items, operation_id) or CommandError(
            f"operation {operation_id!r} has no unknown outcome (unknown outcomes: {unknown})"
        )
    return operation_id
