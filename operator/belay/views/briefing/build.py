"""The briefing built from the fold: the sections the record gives, and the page around them.

`briefing(state)` is the page `belay brief` prints; `briefing_sections(state)` the part of it an
operator puts in an AgentSession's status, from which `belay.views.status.briefing` builds the
same page in a cluster. The briefing keeps what it shows, not the history: it reads the operations
and results it lists by key, and where it must look at every entry of a map (the plan, the notes,
the results for the scope changes shown) it streams the map, which keeps no page it read
(`SnapshotMap.items`).
"""

from __future__ import annotations

import bisect
import heapq
import posixpath
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.events import CHILD_CONDITION_PREFIX, ArtifactRef, NoteKind, TaskStatus
from belay.journal.phase import Liveness, interruption_of, phase_of, stalled_by_failure
from belay.journal.proof import deliverable_unproven, failed_verification
from belay.journal.state import (
    MAX_ATTEMPTS,
    ApprovalRecord,
    NoteRecord,
    OperationRecord,
    SessionLinkRecord,
    SessionState,
    TaskRecord,
)
from belay.views.briefing.changes import plan_order, rejection_item, scan_results, scope_change_item
from belay.views.briefing.classify import classify, of_state
from belay.views.briefing.model import (
    LIST_LIMIT,
    NOTE_LIMIT,
    SCOPE_CHANGE_LIMIT,
    STEP_LIMIT,
    ActionItem,
    AttentionItem,
    Briefing,
    BriefingSections,
    BudgetItem,
    BudgetUsage,
    CheckpointItem,
    ChildItem,
    DecisionItem,
    EffectItem,
    ExecutorMoveItem,
    ExternalItem,
    FetchItem,
    NoteItem,
    OpenItem,
    RecoveryItem,
    RemoteSessionItem,
    ReviewItem,
    RunningItem,
    SandboxItem,
    StepItem,
    UnknownOutcomeItem,
)

FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.CANCELLED)
# Where an artifact can be fetched from: a path, a presigned URL; None: the ref's own uri.
ArtifactLocator = Callable[[ArtifactRef], str]


def _select_steps(state: SessionState, limit: int) -> tuple[list[TaskRecord], Counter[TaskStatus]]:
    """Every active step first, then the most recent finished ones, in plan order; the earliest
    finished steps are the ones left out, counted by status. Streamed: only the steps shown are
    kept, whatever the length of the plan."""
    # One pass over the plan: the first `limit` active steps and the last `limit` finished ones,
    # each list kept in plan order.
    active: list[TaskRecord] = []
    finished: list[TaskRecord] = []
    omitted: Counter[TaskStatus] = Counter()
    for task in state.tasks.values():
        omitted[task.status] += 1
        if task.status in FINISHED:
            bisect.insort(finished, task, key=plan_order)
            if len(finished) > limit:
                del finished[0]
        else:
            bisect.insort(active, task, key=plan_order)
            if len(active) > limit:
                del active[-1]
    room = limit - len(active)
    kept = active + (finished[max(0, len(finished) - room) :] if room > 0 else [])
    omitted.subtract(t.status for t in kept)
    return sorted(kept, key=plan_order), omitted


def _latest_notes(state: SessionState, kind: NoteKind) -> tuple[list[NoteItem], int]:
    """The NOTE_LIMIT notes of one kind updated last, shown in the order they were first made."""
    count = 0

    def of_kind() -> Iterator[NoteRecord]:
        nonlocal count
        for note in state.notes.values():
            if note.kind == kind:
                count += 1
                yield note

    latest = heapq.nlargest(NOTE_LIMIT, of_kind(), key=lambda n: (n.last_seq, n.note_id))
    latest.sort(key=lambda n: (n.first_seq, n.note_id))
    return [_note_item(n, state) for n in latest], count - len(latest)


def _note_item(n: NoteRecord, state: SessionState) -> NoteItem:
    result = state.results.get(n.result_id) if n.result_id else None
    invalid = result.invalid_because or "invalid" if result is not None and not result.valid else None
    return NoteItem(note_id=n.note_id, text=n.text, status=n.status, invalid_because=invalid)


def _step_items(state: SessionState) -> tuple[list[StepItem], Counter[TaskStatus]]:
    shown, omitted = _select_steps(state, STEP_LIMIT)
    items = [
        StepItem(
            task_id=t.task_id,
            title=t.title,
            owner=t.owner,
            status=_shown_status(state, t),
            verified=t.status == TaskStatus.VERIFIED and not _missing(state, t),
            deliverable=t.deliverable,
            round=t.round,
            reopened_because=t.reopened_because if t.status == TaskStatus.PLANNED and t.round > 1 else None,
            missing=_missing(state, t),
            verification_failed=t.verification_detail if failed_verification(t) else None,
        )
        for t in shown
    ]
    return items, omitted


def _shown_status(state: SessionState, task: TaskRecord) -> TaskStatus:
    """A step as the page shows it: failed when its verification failed, blocked while the
    deliverable its subagent owes is missing, else as recorded."""
    if failed_verification(task):
        return TaskStatus.FAILED
    return TaskStatus.BLOCKED if _missing(state, task) else task.status


def _missing(state: SessionState, task: TaskRecord) -> str | None:
    """The deliverable a subagent's task that stopped (its turn ended, or the record calls it done)
    owes while it does not exist, or the record does not prove it (empty, or published by a step
    whose verification failed): such a task is blocked, never done."""
    owed = task.deliverable if task.task_id == task.owner else None
    stopped = task.status in (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.BLOCKED)
    if not (stopped and owed):
        return None
    return owed if owed not in state.deliverables or deliverable_unproven(state, owed) else None


def _fetch_items(state: SessionState, approval: ApprovalRecord, style: CommandStyle) -> list[FetchItem]:
    session_id = state.session_id
    items = []
    if approval.content_ref is not None:
        name = approval.content_name or approval.content_ref.sha256[:12]
        # Under the approval's own directory: two approvals of a file of one name (a retry, two
        # publishes) never write one file, nor does the deliverable it becomes.
        written = f"{approval.approval_id}/{posixpath.basename(name)}"
        items.append(
            FetchItem(
                what=f"the bytes it sends out ({name})",
                sha256=approval.content_ref.sha256,
                size=approval.content_ref.size,
                command=style(commands.fetch(session_id, approval.content_ref.sha256, written)),
            )
        )
    if approval.payload_ref is not None:
        filename = f"{approval.approval_id}.json"
        items.append(
            FetchItem(
                what="the operation as approved (its sha256 is the payload's)",
                sha256=approval.payload_ref.sha256,
                size=approval.payload_ref.size,
                command=style(commands.fetch(session_id, approval.payload_ref.sha256, filename)),
            )
        )
    return items


def _latest_retry(state: SessionState, operation_id: str) -> ApprovalRecord | None:
    retries = [a for a in state.approvals_for(operation_id) if a.kind == "retry"]
    return retries[-1] if retries else None


def _effect_item(state: SessionState, op: OperationRecord) -> EffectItem:
    base = {"operation_id": op.operation_id, "tool": op.tool, "subagent": op.subagent}
    if op.operation_id in state.unknown_outcomes:
        return EffectItem(**base, outcome="unknown", detail=op.outcome_detail)
    if op.has_result and op.ok:
        ref = ", ".join(op.effects) if op.effects else op.effect_ref
        return EffectItem(**base, outcome="made", ref=ref, at=op.result_at)
    if op.has_result:
        detail = op.error or ""
        retry = _latest_retry(state, op.operation_id)
        if retry is not None and retry.decision == "rejected":
            said = f": {retry.decision_reason}" if retry.decision_reason else ""
            detail += f"; {retry.decided_by or 'you'} chose to go on without it{said}"
        elif retry is not None and retry.decision == "granted":
            detail += f"; {retry.decided_by or 'you'} asked to try it again"
        return EffectItem(**base, outcome="failed", at=op.result_at, detail=detail)
    if op.outcome == "reconciled":
        outcome: Literal["made", "pending"] = "made" if op.reconciled_succeeded else "pending"
        return EffectItem(**base, outcome=outcome, detail=f"reconciled: {op.outcome_detail}".rstrip(": "))
    pending = any(a.pending for a in state.approvals_for(op.operation_id))
    return EffectItem(**base, outcome="pending", detail="awaiting approval" if pending else "")


def _attention(state: SessionState, style: CommandStyle) -> tuple[list[AttentionItem], int]:
    """What needs attention, and how many earlier failed effects nobody is asked about are left out."""
    sid = state.session_id
    items: list[AttentionItem] = []
    # A reconcile probe found several effects of one operation: a person undoes the extra ones.
    for op_id in sorted(state.repeated_effects, key=lambda o: (state.repeated_effects[o], o)):
        op = state.operations[op_id]
        made = list(op.effects)
        items.append(
            AttentionItem(
                kind="repeated_effect",
                id=op_id,
                summary=f"{op.tool or 'operation'} {op_id} took effect {len(made)} times "
                f"({', '.join(made)}): undo the extra ones in that system by hand",
                effects=made,
            )
        )
    # Every unknown outcome and every failure that waits on a person's retry decision (both also
    # wait on you); of the failures nobody is asked about, the latest LIST_LIMIT, the rest counted.
    # Only the operations shown are read.
    requested = state.external_operations
    shown: list[tuple[int, str, ApprovalRecord | None]] = [
        (requested[o], o, None) for o in state.unknown_outcomes if o in requested
    ]
    failed: list[tuple[int, str]] = []
    for op_id, seq in state.failed_external_operations.items():
        if op_id in state.unknown_outcomes:
            continue
        retry = _latest_retry(state, op_id)
        if retry is None:
            failed.append((seq, op_id))
        elif retry.pending:
            shown.append((seq, op_id, retry))
    failed.sort()
    shown += [(seq, op_id, None) for seq, op_id in failed[-LIST_LIMIT:]]
    for _, op_id, retry in sorted(shown, key=lambda s: (s[0], s[1])):
        op = state.operations[op_id]
        if op_id not in state.unknown_outcomes and (not op.has_result or op.ok):
            continue  # requested again since it failed: it runs, or ran, once more
        if op_id in state.unknown_outcomes:
            items.append(
                AttentionItem(
                    kind="unknown_effect",
                    id=op_id,
                    summary=f"{op.tool} ({op_id}): outcome unknown, never repeated blindly; did it "
                    "take effect?",
                    command=style(commands.reconcile(sid, op_id)),
                    alternative=style(commands.reconcile(sid, op_id, succeeded=False)),
                )
            )
            continue
        summary = f"{op.tool} ({op_id}) failed and took no effect: {op.error or 'no reason given'}"
        if retry is None:
            items.append(AttentionItem(kind="failed_effect", id=op_id, summary=summary))
            continue
        items.append(
            AttentionItem(
                kind="failed_effect",
                id=op_id,
                summary=summary + "; the session waits for you",
                command=style(commands.approve(sid, retry.approval_id)) + "  (try it once more)",
                alternative=style(commands.reject(sid, retry.approval_id)) + "  (go on without it)",
            )
        )
    return items, max(0, len(failed) - LIST_LIMIT)


def _session_failed(state: SessionState, style: CommandStyle) -> list[AttentionItem]:
    """Why a failed session failed, as its record says; for one that exhausted
    recovery.maxAttempts on this machine, the resume that gives it a fresh budget."""
    lc = state.lifecycle
    if not lc.failed:
        return []
    again = lc.end_reason == MAX_ATTEMPTS and style is commands.local
    return [
        AttentionItem(
            kind="session_failed",
            id=lc.end_reason or "failed",
            summary=lc.end_detail or "the record gives no reason",
            command=style(commands.resume(state.session_id))
            + "  (a resume by hand gives it recovery.maxAttempts more attempts)"
            if again
            else None,
        )
    ]


def _running(items: list[OpenItem]) -> list[RunningItem]:
    """The steps and operations the classification says run."""
    return [
        RunningItem(
            kind="task" if i.kind == "step" else "operation",
            id=i.id,
            description=i.summary,
            subagent=i.subagent,
        )
        for i in of_state(items, "running")
    ]


def _waiting_on_you(state: SessionState, items: list[OpenItem], style: CommandStyle) -> list[ActionItem]:
    """Every approval pending, every question a person answers, every unknown outcome to reconcile:
    the items the classification says wait on you, each with the command that ends it."""
    actions: list[ActionItem] = []
    for item in of_state(items, "waiting_on_you"):
        command = item.command or ""
        if item.kind == "approval":
            a = state.approvals[item.id]
            actions.append(
                ActionItem(
                    kind="approval",
                    id=a.approval_id,
                    summary=item.summary,
                    command=command,
                    alternative=item.alternative,
                    payload_sha256=a.payload_sha256,
                    expires_at=a.request_expires_at,
                    fetch=_fetch_items(state, a, style),
                )
            )
        elif item.ended_by == "message":
            actions.append(
                ActionItem(
                    kind="message",
                    id=item.id,
                    summary=item.summary,
                    command=command,
                    alternative=item.alternative,
                    also=style(commands.amend(state.session_id)),
                )
            )
        elif item.ended_by == "reconcile":
            op = state.operations[item.id]
            summary = f"{op.tool or 'operation'} outcome unknown" + (
                f" ({op.outcome_detail})" if op.outcome_detail else ""
            )
            actions.append(
                ActionItem(
                    kind="reconciliation",
                    id=item.id,
                    summary=f"{summary}; did it take effect?",
                    command=command,
                    alternative=item.alternative,
                )
            )
        else:
            actions.append(
                ActionItem(
                    kind="decision",
                    id=item.id,
                    summary=item.summary,
                    command=command,
                    alternative=item.alternative,
                )
            )
    return actions


def _external(items: list[OpenItem], state: SessionState) -> list[ExternalItem]:
    return [
        ExternalItem(wait_id=i.id, reason=i.summary, condition=state.waits[i.id].condition, command=i.command)
        for i in of_state(items, "waiting_on_external")
    ]


def _rejected_before(state: SessionState, name: str, sha256: str) -> str | None:
    """Who rejected these very bytes under this name, and why; None when nobody did."""
    for r in reversed(state.rejections):
        if r.kind == "deliverable" and r.item == name and r.sha256 == sha256:
            return (
                f"{r.by or 'you'}"
                + (f" at {r.at:%Y-%m-%d %H:%M %Z}".rstrip() if r.at else "")
                + (f": {r.reason}" if r.reason else "")
            )
    return None


def _reviews(state: SessionState, items: list[OpenItem], locate: ArtifactLocator | None) -> list[ReviewItem]:
    """What the classification says waits on your review: a deliverable published here (its review
    wait) or collected from a child session, each with its bytes and where to fetch them."""
    reviews: list[ReviewItem] = []
    for item in of_state(items, "ready_for_review"):
        name = item.label
        command = item.command or ""
        artifact = state.artifacts.get(name)
        if artifact is None:
            reviews.append(
                ReviewItem(name=name, description=item.summary, command=command, alternative=item.alternative)
            )
            continue
        ref = artifact.ref
        reviews.append(
            ReviewItem(
                name=name,
                description=artifact.description or item.summary,
                subagent=artifact.subagent,
                sha256=ref.sha256,
                size=ref.size,
                media_type=ref.media_type,
                location=locate(ref) if locate is not None else (ref.uri or None),
                command=command,
                alternative=item.alternative,
                rejected_before=_rejected_before(state, name, ref.sha256),
            )
        )
    return reviews


def _left_open(state: SessionState, items: list[OpenItem], interrupted: bool) -> list[AttentionItem]:
    """What needs attention that is no failed effect: a failed delegation, what the record does not
    prove done, and what was left open in a session that failed (an interruption lists what it
    left open itself)."""
    delegations = set(state.failed_delegations.values())
    shown = []
    for item in of_state(items, "needs_attention"):
        task = state.tasks.get(item.id) if item.kind == "step" else None
        if item.kind == "operation" and item.id in delegations:
            shown.append(AttentionItem(kind="failed_delegation", id=item.id, summary=item.summary))
        elif item.kind in ("deliverable", "child") or (
            item.kind == "step" and (task is None or task.status != TaskStatus.RUNNING)
        ):
            # Not proven done (belay.journal.proof): listed whether or not an attempt is alive.
            shown.append(
                AttentionItem(kind="unproven", id=item.id, summary=item.summary, command=item.command)
            )
        elif not interrupted:
            what = "step" if item.kind == "step" else "operation"
            summary = f"{what} {item.summary} was left without an end when the session stopped"
            shown.append(AttentionItem(kind="left_open", id=item.id, summary=summary))
    return shown


def _decided(state: SessionState) -> list[DecisionItem]:
    """Approvals, answers and reconciliations people made (amends and rejections have their own
    sections, with who, when and why)."""
    return [
        DecisionItem(
            seq=d.seq, kind=d.kind, item=d.item, outcome=d.outcome, by=d.by, at=d.at, reason=d.reason
        )
        for d in state.decisions
        if d.kind in ("approval", "answer", "reconciliation")
    ]


def _recovery(state: SessionState) -> RecoveryItem:
    lc = state.lifecycle
    restored_from = next(
        (e.checkpoint_id for e in reversed(lc.recent) if e.kind == "restored" and e.checkpoint_id), None
    )
    failure = lc.last_recovery_failure
    stalled = stalled_by_failure(state)
    return RecoveryItem(
        attempt=lc.attempt,
        model=lc.model_id,
        harness_lost=lc.harness_lost,
        restores=lc.restores,
        recovery_restores=lc.recovery_restores,
        sandbox_replaced=lc.sandbox_replaced,
        recovery_failures=lc.recovery_failures,
        last_failure=(
            f"{stalled[0]}: {stalled[1]}".strip(": ")
            if stalled
            else f"{failure.reason}: {failure.detail}".strip(": ")
            if failure
            else None
        ),
        restored_from=restored_from,
        unknown_outcomes=[
            UnknownOutcomeItem(
                operation_id=o, tool=state.operations[o].tool, detail=state.operations[o].outcome_detail
            )
            for o in sorted(state.unknown_outcomes)
        ],
        reconciled=sorted(state.reconciled_operations),
        executor_moves=[
            ExecutorMoveItem(
                from_type=c.from_type,
                from_model=c.from_model,
                to_type=c.to_type,
                to_model=c.to_model,
                at_seq=c.at_seq,
                by=c.by,
                reason=c.reason,
            )
            for c in state.executor_changes
        ],
    )


def _remote_sessions(state: SessionState) -> list[RemoteSessionItem]:
    return [
        RemoteSessionItem(
            subagent=r.subagent,
            executor=r.executor,
            remote_session_id=r.remote_session_id,
            endpoint=r.endpoint,
            calls=r.calls,
            delivered=r.delivered,
            refused=r.refused,
            not_run=r.not_run,
            interruptions=r.interruptions,
            failure=r.failure,
            replaced=list(r.replaced),
            replaced_because=r.replaced_because,
        )
        for r in sorted(state.remote_sessions.values(), key=lambda r: r.subagent)
    ]


def _recorded_sandboxes(state: SessionState) -> list[SandboxItem]:
    """Each subagent's sandbox as the record tells it: who started it, what its start recorded,
    what it was restored from."""
    items = []
    for name in sorted(state.subagents):
        record = state.subagents[name]
        if not record.sandbox_starts:
            items.append(SandboxItem(subagent=name))
            continue
        items.append(
            SandboxItem(
                subagent=name,
                started_by_attempt=record.sandbox_attempt,
                recorded=record.sandbox_detail,
                # The first restore only seeds a sandbox; a later one recovered it.
                restored_from=record.last_restored_from if record.sandbox_starts > 1 else None,
                tools_changed=record.tools_changed,
            )
        )
    return items


def _usage(state: SessionState) -> BudgetUsage:
    steps = sum(
        t.status in (TaskStatus.DONE, TaskStatus.VERIFIED)
        for t in state.tasks.values()
        if t.task_id != t.owner
    )
    return BudgetUsage(
        model_calls=state.model_calls,
        tokens=state.input_tokens + state.output_tokens,
        input_tokens=state.input_tokens,
        cached_input_tokens=state.cached_input_tokens,
        steps=steps,
        started_at=state.started_at,
    )


def _checkpoints(state: SessionState) -> list[CheckpointItem]:
    items = []
    for key in sorted(state.verified_checkpoints):
        record = state.verified_checkpoints[key]
        cp = record.checkpoint
        items.append(
            CheckpointItem(
                checkpoint_id=cp.checkpoint_id,
                subagent=cp.subagent,
                seq=record.seq,
                covers_seq=cp.covers_seq,
                verification=cp.verification.command if cp.verification else None,
                next_step=cp.next_step,
            )
        )
    return items


def briefing_sections(
    state: SessionState,
    *,
    locate: ArtifactLocator | None = None,
    liveness: Liveness | None = None,
    style: CommandStyle = commands.local,
) -> BriefingSections:
    """The sections of the briefing, from the fold. `locate` turns an artifact ref into a download
    location (a path, or a presigned URL); without it the ref's own uri is shown. `liveness` says
    whether an attempt is alive (without it the record alone decides): nothing is shown running
    while none is. `style` spells every command for where the session runs."""
    steps, omitted = _step_items(state)
    hypotheses, h_omitted = _latest_notes(state, NoteKind.HYPOTHESIS)
    decisions, d_omitted = _latest_notes(state, NoteKind.DECISION)
    findings, f_omitted = _latest_notes(state, NoteKind.FINDING)
    attention, attention_omitted = _attention(state, style)
    shown_changes = state.scope_changes[-SCOPE_CHANGE_LIMIT:]
    parts_by_step, scans = scan_results(state, shown_changes)
    latest_effects = state.recent_external_operations[-LIST_LIMIT:]
    # Nothing runs while no attempt is alive: what the dead one left open is in its interruption.
    interrupted = interruption_of(state, liveness) is not None
    items = classify(state, liveness, style)
    return BriefingSections(
        items=items,
        decided=_decided(state),
        decided_omitted=state.decision_count - len(state.decisions),
        scope_changes=[scope_change_item(state, scan, parts_by_step) for scan in scans],
        scope_changes_omitted=max(0, len(state.scope_changes) - SCOPE_CHANGE_LIMIT),
        rejections=[rejection_item(state, r) for r in state.rejections[-SCOPE_CHANGE_LIMIT:]],
        rejections_omitted=max(0, len(state.rejections) - SCOPE_CHANGE_LIMIT),
        steps=steps,
        steps_omitted=omitted.total(),
        steps_omitted_done=omitted[TaskStatus.DONE],
        steps_omitted_verified=omitted[TaskStatus.VERIFIED],
        running=_running(items),
        waiting_on_you=_waiting_on_you(state, items, style),
        needs_attention=_session_failed(state, style) + attention + _left_open(state, items, interrupted),
        needs_attention_omitted=attention_omitted,
        effects=[_effect_item(state, state.operations[op]) for op in latest_effects],
        effects_omitted=len(state.external_operations) - len(latest_effects),
        waiting_on_external=_external(items, state),
        ready_for_review=_reviews(state, items, locate),
        hypotheses=hypotheses,
        decisions=decisions,
        findings=findings,
        notes_omitted=h_omitted + d_omitted + f_omitted,
        hypotheses_omitted=h_omitted,
        decisions_omitted=d_omitted,
        findings_omitted=f_omitted,
        recovery=_recovery(state),
        sandboxes=_recorded_sandboxes(state),
        checkpoints=_checkpoints(state),
        secrets_redacted=state.secrets_redacted,
        remote_sessions=_remote_sessions(state),
        usage=_usage(state),
        every_event=style(commands.events(state.session_id)),
    )


def observed_sandboxes(recorded: Sequence[SandboxItem], observed: Sequence[SandboxItem]) -> list[SandboxItem]:
    """The observed sandboxes (where each runs, its network profile, whether it is alive), with
    what the record says of each; subagents the caller did not observe are listed from the record
    alone."""
    by_name = {item.subagent: item for item in recorded}
    seen = {item.subagent: item for item in observed}
    items = []
    for name in sorted(set(by_name) | set(seen)):
        item = seen.get(name) or SandboxItem(subagent=name)
        record = by_name.get(name)
        if record is not None:
            item = item.model_copy(
                update={
                    "started_by_attempt": record.started_by_attempt,
                    "recorded": record.recorded,
                    "restored_from": record.restored_from,
                    "tools_changed": record.tools_changed,
                }
            )
        items.append(item)
    return items


def budget_items(usage: BudgetUsage, limits: Mapping[str, int], now: datetime | None) -> list[BudgetItem]:
    """Each budget that is set (by its manifest name), with what the record shows used: model
    calls and tokens as recorded, steps completed, wall clock since the first event."""
    used: dict[str, int | None] = {
        "maxModelCalls": usage.model_calls,
        "maxTokens": usage.tokens,
        "maxSteps": usage.steps,
        "maxWallClockS": int((now - usage.started_at).total_seconds()) if now and usage.started_at else None,
    }
    items = []
    for name, limit in limits.items():
        amount = used.get(name)
        if amount is None:
            continue
        items.append(BudgetItem(name=name, limit=limit, used=amount, left=max(0, limit - amount)))
    return items


def page(
    sections: BriefingSections,
    *,
    observed: Sequence[SandboxItem],
    limits: Mapping[str, int],
    now: datetime | None,
    **header: Any,
) -> Briefing:
    """The briefing around its sections: the header fields of `Briefing` (`header`), each sandbox
    as the record tells it with what the caller observed of it, and each budget set in `limits`
    against the caller's `now`. Both builders end here, so both pages are built alike."""
    return Briefing(
        **{**dict(sections), "sandboxes": observed_sandboxes(sections.sandboxes, observed)},
        budgets=budget_items(sections.usage, limits, now),
        **header,
    )


def child_item(link: SessionLinkRecord, child: SessionState | None, liveness: Liveness | None) -> ChildItem:
    """A child session as its own record says (`child`, None while it has no record here), with the
    liveness of its attempt: what the coordinator's page says of it, never what the coordinator's
    record last knew (a child killed after its coordinator began waiting on it is not running)."""
    if child is None or not child.last_seq:
        return ChildItem(session=link.session, part=link.part, summary="not started yet")
    phase = phase_of(child, liveness)
    gone = interruption_of(child, liveness)
    hypotheses, h_omitted = _latest_notes(child, NoteKind.HYPOTHESIS)
    decisions, d_omitted = _latest_notes(child, NoteKind.DECISION)
    summary, command = phase.value, None
    if gone is not None:
        since = f" since {gone.since:%Y-%m-%d %H:%M:%S %Z}".rstrip() if gone.since else ""
        summary, command = f"{phase.value}{since}: {gone.why}", gone.command
    return ChildItem(
        session=link.session,
        part=link.part,
        phase=phase,
        summary=summary,
        command=command,
        hypotheses=hypotheses,
        decisions=decisions,
        hypotheses_omitted=h_omitted,
        decisions_omitted=d_omitted,
    )


def _children_said(sections: BriefingSections, children: Sequence[ChildItem]) -> BriefingSections:
    """The waits on child sessions, each in the words of the child's own record: the reason the
    coordinator recorded when it began waiting ("runs") stands only while the child runs."""
    by_condition = {f"{CHILD_CONDITION_PREFIX}{c.session}": c for c in children}
    external = []
    for wait in sections.waiting_on_external:
        child = by_condition.get(wait.condition or "")
        if child is not None and child.phase is not None:
            wait = wait.model_copy(
                update={
                    "reason": f"child session {child.session} ({child.part}): {child.summary}",
                    "command": child.command or wait.command,
                }
            )
        external.append(wait)
    return sections.model_copy(update={"waiting_on_external": external})


def briefing(
    state: SessionState,
    *,
    locate: ArtifactLocator | None = None,
    artifact_store: str = "",
    record: str = "",
    liveness: Liveness | None = None,
    sandboxes: Sequence[SandboxItem] = (),
    budgets: Mapping[str, int] | None = None,
    children: Sequence[ChildItem] = (),
) -> Briefing:
    """The page `belay brief` prints. `artifact_store` names the store for the reader, `record` the
    event store when the reader would not look for it in the home; `sandboxes` are the sandboxes
    as the caller observes them, one per subagent; `budgets` the limits of `spec.budgets` that are
    set, by their manifest name; `children` a coordinator's child sessions as their own records
    say (`child_item`)."""
    gone = interruption_of(state, liveness)
    if gone is not None and gone.command:
        # The coordinator's resume resumes every child not running: one command, not one each.
        children = [
            c.model_copy(update={"command": None, "summary": f"{c.summary}; `{gone.command}` resumes it"})
            if c.command
            else c
            for c in children
        ]
    return page(
        _children_said(briefing_sections(state, locate=locate, liveness=liveness), children),
        observed=sandboxes,
        limits=budgets or {},
        now=liveness.now if liveness else None,
        session_id=state.session_id,
        phase=phase_of(state, liveness),
        current_step=state.current_step,
        last_seq=state.last_seq,
        goal=state.request.goal,
        request_version=state.request.version,
        request_parts=dict(sorted(state.request.parts.items())),
        artifact_store=artifact_store,
        record=record,
        interruption=gone,
        children=list(children),
    )
