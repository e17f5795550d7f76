"""A person's decision on what a session waits on, as the events that record it: an approval or
a rejection of a pending operation (bound to the payload hash it was requested with), a yes, a no
or an answer to a wait, the verdict on an operation whose outcome is unknown. Pure: the local CLI
appends what this returns for `belay approve|reject|answer|reconcile`, and the operator for the
same decisions written into an AgentSession's `spec.decisions` by `kubectl belay`. Each decision
is appended under its claim, so of two decisions on one item exactly one is recorded."""

from __future__ import annotations

from dataclasses import dataclass

from belay.journal.claims import approval_claim, reconcile_claim, wait_claim
from belay.journal.events import (
    Actor,
    Approval,
    EventDraft,
    OperationOutcome,
    UserMessage,
    Wait,
)
from belay.journal.state import SessionState, WaitRecord


class DecisionError(ValueError):
    """The decision names nothing that waits, or something already decided."""


@dataclass(frozen=True)
class DecisionWrite:
    drafts: tuple[EventDraft, ...]
    claim: str
    outcome: str  # what was decided, for the person who decided


def decision_write(state: SessionState, item_id: str, granted: bool, reason: str, by: str) -> DecisionWrite:
    """`item_id` is an approval id (granted: approve; else reject) or a wait id (a yes or a no, with
    `reason` as the answer's text; for a `reconcile-<operation>` wait, yes means it took effect)."""
    user = Actor(kind="user", name=by)
    approval = state.approvals.get(item_id)
    wait = state.waits.get(item_id)
    if approval is not None:
        if approval.decision is not None:
            raise DecisionError(
                f"approval {item_id} was already {approval.decision} by {approval.decided_by or 'someone'}"
            )
        draft = EventDraft(
            payload=Approval(
                approval_id=item_id,
                operation_id=approval.operation_id,
                payload_sha256=approval.payload_sha256,
                granted=granted,
                by=by,
                reason=reason,
            ),
            actor=user,
            parent_seq=approval.requested_seq,
        )
        outcome = (
            f"{'approved' if granted else 'rejected'} {item_id} (payload sha256 {approval.payload_sha256})"
        )
        return DecisionWrite((draft,), approval_claim(item_id), outcome)
    if wait is not None and wait.owed and granted and not wait.resolved:
        # A yes to a turn's end (an approve, an answer) is a message: its text, or "go on".
        return message_write(state, item_id, reason or "Go on.", by)
    if wait is not None:
        if wait.resolved:
            raise DecisionError(f"{item_id} is already resolved")
        claim = wait_claim(item_id)
        if wait.condition is not None and wait.condition in state.unknown_outcomes:
            # The same claim as a reconcile without a wait: one verdict per unknown outcome.
            claim = reconcile_claim(wait.condition, state.unknown_outcomes[wait.condition])
        drafts = []
        if wait.kind == "on_user" and item_id.startswith("reconcile-") and wait.condition:
            verdict = "took effect" if granted else "did not take effect"
            drafts.append(
                EventDraft(
                    payload=OperationOutcome(
                        operation_id=wait.condition,
                        outcome="reconciled",
                        succeeded=granted,
                        detail=f"{by}: it {verdict}. {reason}".strip(),
                        by=by,
                    ),
                    actor=user,
                )
            )
        answer = f"{'yes' if granted else 'no'} ({by}) {reason}"
        drafts.append(EventDraft(payload=resolved_wait(wait, answer), actor=user))
        return DecisionWrite(tuple(drafts), claim, f"resolved {item_id}: {'yes' if granted else 'no'}")
    pending = sorted(state.pending_approvals) + sorted(state.open_waits)
    known = ", ".join(pending) if pending else "nothing waits on you"
    raise DecisionError(f"no approval or wait {item_id!r} in session {state.session_id} (pending: {known})")


def reconcile_write(
    state: SessionState, operation_id: str, succeeded: bool, detail: str, by: str
) -> DecisionWrite:
    """The verdict on an operation whose outcome is unknown: through its wait when one is open."""
    if operation_id not in state.unknown_outcomes:
        unknown = ", ".join(sorted(state.unknown_outcomes)) or "none"
        raise DecisionError(
            f"operation {operation_id!r} has no unknown outcome (unknown outcomes: {unknown})"
        )
    wait_id = next((w.wait_id for w in state.open_wait_records() if w.condition == operation_id), None)
    if wait_id is not None:
        return decision_write(state, wait_id, succeeded, detail, by)
    outcome = OperationOutcome(
        operation_id=operation_id,
        outcome="reconciled",
        succeeded=succeeded,
        detail=f"{by}: {detail}".rstrip(": "),
        by=by,
    )
    claim = reconcile_claim(operation_id, state.unknown_outcomes[operation_id])
    draft = EventDraft(payload=outcome, actor=Actor(kind="user", name=by))
    return DecisionWrite(
        (draft,), claim, f"reconciled {operation_id}: {'succeeded' if succeeded else 'failed'}"
    )


def resolved_wait(wait: WaitRecord, answer: str) -> Wait:
    """The open wait `wait` resolved, its reason ending with what answered it."""
    return Wait(
        wait_id=wait.wait_id,
        kind=wait.kind,
        reason=f"{wait.reason} -> {answer}".strip(),
        resolved=True,
        condition=wait.condition,
        artifact=wait.artifact,
        owed=wait.owed,
    )


def message_write(state: SessionState, wait_id: str, text: str, by: str) -> DecisionWrite:
    """A person's message to the subagent whose turn's end opened `wait_id`: the message (the
    subagent's next user turn) and the wait answered, under the wait's claim."""
    wait = state.waits.get(wait_id)
    if wait is None or not wait.owed or not wait.subagent:
        raise DecisionError(f"{wait_id!r} is no wait for a message in session {state.session_id}")
    if wait.resolved:
        raise DecisionError(f"{wait_id} is already answered")
    if not text.strip():
        raise DecisionError("say something: the message is the agent's next turn")
    user = Actor(kind="user", name=by)
    drafts = (
        EventDraft(
            payload=UserMessage(subagent=wait.subagent, wait_id=wait_id, text=text, by=by), actor=user
        ),
        EventDraft(payload=resolved_wait(wait, f"message ({by}) {text}"), actor=user),
    )
    return DecisionWrite(drafts, wait_claim(wait_id), f"sent to {wait.subagent}, which goes on ({wait_id})")
