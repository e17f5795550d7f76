"""What every open item of a session is: the one classification every view reads.

An item is a step, an operation, a wait, an approval or a deliverable, and it is exactly one of:
running, waiting on the person, waiting on an external condition, ready for review, needs
attention, done or invalid. `classify` decides it once, from the fold and what is known of the
attempt's liveness; the briefing's sections (`belay.views.briefing.build`), the status the fleet
and objective views read (`belay.views.status.build`) and so the report are cut from it, and none
decides again. What an item waits on carries the command that ends it, specific to its kind.

The rules, in words: a pending approval waits on you (the operation it holds is not also running);
a subagent whose turn ended without its deliverable waits on your message (never a done step);
an unknown outcome waits on your reconciliation; a wait on you that an approval or a
reconciliation answers is that approval or reconciliation; an external wait waits on its
condition, a deliverable on your review; an operation that waits (on a wait it opened, or a child
session) is its wait, not running. A coordinator's deliverables collected from its child sessions
(`<child>/<name>`) wait on your review as its own do, once the record holds the child's end with
those very bytes; a child reopened since (its part changed, or a person turned those bytes down at
the coordinator) makes the bytes collected before invalid, and a child that has not ended has
nothing collected yet. Nothing runs while no attempt is alive or once the session ended: what is
left open then needs attention (an interruption says how each is settled), or, in a session that
succeeded, is done. A failed delegation needs
attention; a step reopened by a scope change or a rejection is invalid until it is redone, and so
are the bytes a person rejected. What the record does not prove done (`belay.journal.proof`) is
never done nor ready for review: a step that failed, or whose verification failed, needs attention
while the session runs and after; a deliverable that is empty or was published by such a step
needs attention instead of your review; and once the run ended without proving everything it
owes (phase NeedsAttention), each thing missing needs attention, with the command that reopens it.
"""

from __future__ import annotations

from collections.abc import Iterator

from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.events import CHILD_CONDITION_PREFIX, CHILD_WAIT_PREFIX, TaskStatus, WaitKind
from belay.journal.phase import ENDED_PHASES, Liveness, Phase, interruption_of, phase_of
from belay.journal.proof import (
    deliverable_unproven,
    failed_verification,
    rejected_bytes,
    step_unproven,
    unproven,
)
from belay.journal.state import OperationRecord, SessionState, WaitRecord
from belay.journal.turns import message_command, turn_end_summary
from belay.views.briefing.model import ItemState, OpenItem

# Phases in which nothing runs.
ENDED = (*ENDED_PHASES, Phase.RECOVERY_FAILED)
WAIT_TOOLS = frozenset({"wait_on_user", "wait_on_external", "await_session", "request_approval"})


def _left_open(phase: Phase, stopped: bool) -> ItemState:
    """What an unfinished step or operation is: running while an attempt is alive and the session
    goes on; once it succeeded, done; otherwise it needs attention."""
    if not stopped:
        return "running"
    return "done" if phase == Phase.SUCCEEDED else "needs_attention"


def _waits_elsewhere(state: SessionState, op: OperationRecord, open_wait_ids: set[str]) -> bool:
    """An operation that waits: on the wait it opened, or on a child session."""
    if op.tool not in WAIT_TOOLS:
        return False
    if f"wait-{op.operation_id}" in open_wait_ids:
        return True
    return op.tool == "await_session" and any(w.startswith(CHILD_WAIT_PREFIX) for w in open_wait_ids)


def _wait_item(state: SessionState, w: WaitRecord, style: CommandStyle) -> OpenItem | None:
    """An open wait with the command that ends it; None when another item stands for it."""
    sid = state.session_id
    base = {"kind": "wait", "id": w.wait_id, "summary": w.reason}
    if w.kind == WaitKind.ON_USER and w.owed:
        return OpenItem(
            **{**base, "summary": turn_end_summary(w.reason)},
            state="waiting_on_you",
            ended_by="message",
            label=f"message {w.subagent or ''}".rstrip(),
            subagent=w.subagent,
            command=message_command(state, w, style),
            alternative=style(commands.reject(sid, w.wait_id)),
        )
    if w.kind == WaitKind.ON_USER:
        if w.condition is not None and w.condition in state.unknown_outcomes:
            return None  # the reconciliation of that operation settles it
        if any(a in w.wait_id or a in w.reason for a in state.pending_approvals):
            return None  # the approval it names answers it
        return OpenItem(
            **base,
            state="waiting_on_you",
            ended_by="answer",
            label=f"answer {w.wait_id}",
            command=style(commands.answer(sid, w.wait_id)),
            alternative=style(commands.reject(sid, w.wait_id)),
        )
    if w.kind == WaitKind.ON_EXTERNAL:
        condition = w.condition or ""
        if condition.startswith(CHILD_CONDITION_PREFIX):
            child = condition.removeprefix(CHILD_CONDITION_PREFIX)
            return OpenItem(
                **base,
                state="waiting_on_external",
                ended_by="child",
                label=condition,
                command=style(commands.brief(child)),
            )
        return OpenItem(
            **base,
            state="waiting_on_external",
            ended_by="condition",
            label=condition or w.wait_id,
            command=style(commands.condition_met(sid, w.wait_id)),
        )
    name = w.artifact or w.wait_id
    unproven_bytes = deliverable_unproven(state, name)
    if unproven_bytes is not None:
        # Never offered for review: bytes the record does not prove are no deliverable yet.
        return OpenItem(
            kind="deliverable",
            id=name,
            state="needs_attention",
            subagent=state.artifacts[name].subagent if name in state.artifacts else None,
            summary=unproven_bytes,
            label=name,
            command=style(_reopen_deliverable(state, name)),
        )
    return OpenItem(
        **base,
        state="ready_for_review",
        ended_by="review",
        label=name,
        subagent=state.artifacts[name].subagent if name in state.artifacts else None,
        command=style(commands.download(sid, name)),
        alternative=style(commands.reject(sid, name)),
    )


def _decisions(state: SessionState, style: CommandStyle) -> Iterator[OpenItem]:
    """What waits on the person: approvals, reconciliations, questions."""
    sid = state.session_id
    for a in state.pending_approval_records():
        op = state.operations.get(a.operation_id)
        yield OpenItem(
            kind="approval",
            id=a.approval_id,
            state="waiting_on_you",
            ended_by="approval",
            label=f"approval {a.approval_id}",
            subagent=op.subagent if op is not None else None,
            summary=f"{a.summary or a.tool} (operation {a.operation_id}, tool {a.tool})",
            command=style(commands.approve(sid, a.approval_id)),
            alternative=style(commands.reject(sid, a.approval_id)),
        )
    for op_id in sorted(state.unknown_outcomes, key=lambda o: (state.unknown_outcomes[o], o)):
        op = state.operations.get(op_id)
        yield OpenItem(
            kind="operation",
            id=op_id,
            state="waiting_on_you",
            ended_by="reconcile",
            label=f"reconcile {op_id}",
            subagent=op.subagent if op is not None else None,
            summary=f"{op.tool if op else 'operation'} outcome unknown",
            command=style(commands.reconcile(sid, op_id)),
            alternative=style(commands.reconcile(sid, op_id, succeeded=False)),
        )


def _work(state: SessionState, phase: Phase, stopped: bool, style: CommandStyle) -> Iterator[OpenItem]:
    """Operations without a result and steps in progress or reopened."""
    held = {a.operation_id for a in state.pending_approval_records()}
    open_wait_ids = set(state.open_waits)
    # A subagent whose turn ended without its deliverable runs nothing: its wait stands for it.
    stopped_short = {w.subagent for w in state.open_wait_records() if w.owed}
    for op in state.open_operation_records():
        if op.operation_id in held or op.operation_id in state.unknown_outcomes:
            continue
        if _waits_elsewhere(state, op, open_wait_ids):
            continue
        yield OpenItem(
            kind="operation",
            id=op.operation_id,
            state=_left_open(phase, stopped),
            subagent=op.subagent,
            summary=f"{op.tool} [{op.effect.value}]",
        )
    for delegation, op_id in sorted(state.failed_delegations.items()):
        failed = state.operations.get(op_id)
        yield OpenItem(
            kind="operation",
            id=op_id,
            state="needs_attention",
            subagent=failed.subagent if failed is not None else None,
            summary=f"{delegation} failed: {(failed.error if failed else '') or 'no reason given'}",
        )
    for task in sorted(state.tasks.values(), key=lambda t: (t.first_seq, t.task_id)):
        if task.status == TaskStatus.RUNNING and task.owner in stopped_short:
            continue
        summary, command = task.title or task.task_id, None
        if task.status == TaskStatus.RUNNING:
            state_of: ItemState = _left_open(phase, stopped)
        elif task.status == TaskStatus.PLANNED and task.round > 1 and task.reopened_because:
            state_of = "invalid"
        elif task.status == TaskStatus.FAILED or failed_verification(task):
            # A step that failed, or whose verification failed, is never done.
            state_of, summary = "needs_attention", step_unproven(task) or summary
            # A change of the request is what has it redone, whether the run ended or still waits
            # (on a person, or for a resume that would only restore it failed again).
            command = commands.amend(state.session_id)
        else:
            continue
        yield OpenItem(
            kind="step",
            id=task.task_id,
            state=state_of,
            subagent=task.owner,
            summary=summary,
            command=style(command) if command else None,
        )


def _reopen_deliverable(state: SessionState, name: str) -> str:
    """The command that has a published deliverable the record does not prove made again: rejected
    with the reason; but one redone with the very bytes rejected is amended, since rejecting it
    again would only make the same bytes again: the request must say what is to change."""
    artifact = state.artifacts.get(name)
    if artifact is not None and rejected_bytes(state, name, artifact.ref.sha256) is not None:
        return commands.amend(state.session_id)
    return commands.reject(state.session_id, name)


def _unproven(state: SessionState, style: CommandStyle) -> Iterator[OpenItem]:
    """What a run that ended did not prove done, each with the command that reopens it: a
    deliverable (or a collected one) as `_reopen_deliverable` says, anything else is amended."""
    for missing in unproven(state):
        published = missing.kind == "deliverable" and missing.id in state.deliverables
        reopen = _reopen_deliverable(state, missing.id) if published else commands.amend(state.session_id)
        yield OpenItem(
            kind=missing.kind,
            id=missing.id,
            state="needs_attention",
            summary=missing.what,
            label=missing.id,
            command=style(reopen),
        )


def _collected(state: SessionState, name: str, style: CommandStyle) -> OpenItem | None:
    """A deliverable collected from a child session (`<child>/<its name>`): ready for your review
    while the record holds the child's end with these very bytes (fetched from this session, and
    turned down here: that reopens the child with the reason); invalid once the child was reopened
    or ended with other bytes. None for any other deliverable."""
    child, _, own_name = name.partition("/")
    link = state.children.get(child) if own_name else None
    if link is None:
        return None
    artifact = state.artifacts[name]
    base = {"kind": "deliverable", "id": name, "subagent": artifact.subagent, "label": name}
    delivered = dict(link.deliverables).get(own_name)
    if state.collected_from(name) is not None:
        return OpenItem(
            **base,
            state="ready_for_review",
            ended_by="review",
            summary=artifact.description or f"{own_name}, the deliverable of child session {child}",
            command=style(commands.download(state.session_id, name)),
            alternative=style(commands.reject(state.session_id, name)),
        )
    if not link.phase:
        why = f"child session {child} runs again (round {link.round}): how it ended no longer stands"
    else:
        other = "other bytes of" if delivered else "no"
        why = f"child session {child} ended {link.phase.lower()} with {other} {own_name}"
    return OpenItem(**base, state="invalid", summary=why)


def _deliverables(state: SessionState, style: CommandStyle) -> Iterator[OpenItem]:
    """Published deliverables that wait on no review (done), those collected from child sessions,
    and rejected bytes still named by an artifact (invalid)."""
    reviewed = {w.artifact for w in state.open_wait_records() if w.kind == WaitKind.READY_FOR_REVIEW}
    for name in sorted(state.deliverables, key=lambda n: (state.deliverables[n], n)):
        if name in reviewed:
            continue
        collected = _collected(state, name, style)
        if collected is not None:
            yield collected
            continue
        subagent = state.artifacts[name].subagent
        why = deliverable_unproven(state, name)
        if why is not None:
            yield OpenItem(
                kind="deliverable",
                id=name,
                state="needs_attention",
                subagent=subagent,
                summary=why,
                label=name,
                command=style(_reopen_deliverable(state, name)),
            )
            continue
        yield OpenItem(kind="deliverable", id=name, state="done", subagent=subagent)
    for rejection in state.rejections:
        if rejection.kind != "deliverable" or rejection.item in state.deliverables:
            continue
        artifact = state.artifacts.get(rejection.item)
        if artifact is None or artifact.ref.sha256 != rejection.sha256:
            continue
        summary = f"rejected by {rejection.by or 'you'}: {rejection.reason}"
        child = state.children.get(rejection.item.partition("/")[0]) if "/" in rejection.item else None
        if child is not None and not child.phase:
            summary += f"; child session {child.session} runs again (round {child.round}) with the reason"
        yield OpenItem(
            kind="deliverable",
            id=rejection.item,
            state="invalid",
            subagent=artifact.subagent,
            summary=summary,
        )


def classify(
    state: SessionState, liveness: Liveness | None = None, style: CommandStyle = commands.local
) -> list[OpenItem]:
    """Every open item of the session, each once, with what it is now; waits first, in the order
    they opened, then the work, then the deliverables."""
    phase = phase_of(state, liveness)
    stopped = phase in ENDED or interruption_of(state, liveness) is not None
    items = list(_decisions(state, style))
    for w in state.open_wait_records():
        item = _wait_item(state, w, style)
        if item is not None:
            items.append(item)
    items += _work(state, phase, stopped, style)
    seen = {(i.kind, i.id) for i in items}
    items += [d for d in _deliverables(state, style) if (d.kind, d.id) not in seen]
    if phase == Phase.NEEDS_ATTENTION:
        placed = {i.id for i in items}
        items += [u for u in _unproven(state, style) if u.id not in placed]
    return items


def of_state(items: list[OpenItem], state: ItemState) -> list[OpenItem]:
    return [item for item in items if item.state == state]


def ready_for_review(state: SessionState) -> set[str]:
    """The names of the deliverables that wait on your review, as `classify` finds them: what a
    table of deliverables marks for review."""
    return {item.label for item in classify(state) if item.state == "ready_for_review"}
