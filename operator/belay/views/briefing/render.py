"""The briefing's renderers: text, Markdown, JSON, and rows for the HTML report.

They read only the model (`belay.views.briefing.model`), so the page is the same wherever it was
built. Each section is a function giving (level, text) rows: level 0 is a section heading, 1 an
entry, 2 and deeper a detail under an entry.

A row is one line whatever its text holds: notes, titles, reasons and names were written by a
model, a plan or a sandbox, so every row goes through `belay.views.escaping` (newlines and control
characters shown escaped; in Markdown, markup too), and no text can open a section of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from belay.journal.events import CHILD_CONDITION_PREFIX
from belay.journal.handover import change_phrase
from belay.views import escaping
from belay.views.briefing.model import (
    Briefing,
    BudgetUsage,
    NoteItem,
    RequestDifference,
    ScopeChangeItem,
    StepVerdict,
)

Row = tuple[int, str]


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip() if moment else "no expiry"


def _quoted(text: str | None, limit: int = 400) -> str:
    if text is None:
        return "(none)"
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _difference(d: RequestDifference) -> str:
    if d.before is None:
        return f"{d.part}: added {_quoted(d.after)}"
    if d.after is None:
        return f"{d.part}: removed (was {_quoted(d.before)})"
    return f"{d.part}: {_quoted(d.before)} -> {_quoted(d.after)}"


def _verdict(v: StepVerdict) -> str:
    again = f", round {v.round}" if v.round > 1 else ""
    return f"{v.step} [now {v.status.value}{again}]: {v.why}"


def _heading(text: str) -> list[Row]:
    return [(0, text)]


def _header_rows(b: Briefing) -> list[Row]:
    step = f", step {b.current_step}" if b.current_step else ""
    return _heading(
        f"Session {b.session_id}: {b.phase.value} (attempt {b.recovery.attempt}{step}, seq {b.last_seq})"
    )


def _record_rows(b: Briefing) -> list[Row]:
    if not b.record:
        return []
    return [*_heading("Record"), (1, f"events: {b.record}"), (1, f"artifacts: {b.artifact_store}")]


def _request_rows(b: Briefing) -> list[Row]:
    rows = [*_heading(f"Asked (request v{b.request_version})"), (1, b.goal or "(no request recorded)")]
    rows += [(2, f"{name}: {text}") for name, text in b.request_parts.items()]
    return rows


def _scope_change_rows(b: Briefing) -> list[Row]:
    if not b.scope_changes:
        return []
    rows = _heading("Scope changes")
    if b.scope_changes_omitted:
        rows.append((1, f"... {b.scope_changes_omitted} earlier changes not shown"))
    for index, c in enumerate(b.scope_changes):
        who = f" by {c.by}" if c.by else ""
        when = f" at {_when(c.at)}" if c.at else ""
        rows.append((1, f"v{c.request_version}{when}{who}: {c.summary}"))
        differences = [_difference(d) for d in c.changes]
        if index < len(b.scope_changes) - 1:
            # An earlier change in two lines, so the page holds them all; --json has every detail.
            steps = ", ".join(v.step for v in c.invalid_steps)
            if c.invalid_steps_omitted:
                steps += f" and {c.invalid_steps_omitted:,} more"
            redone = f"; redone: {steps}" if steps else ""
            rows.append((2, "; ".join(differences) + f"; made {c.invalidated_count} results invalid{redone}"))
            continue
        rows += [(2, difference) for difference in differences]
        rows += [(level + 2, text) for level, text in change_verdict_rows(c)]
    return rows


def change_verdict_rows(c: ScopeChangeItem) -> list[Row]:
    """What a scope change made invalid and what stays reusable, each with why: the page's rows
    (level 0 a heading, 1 an item under it), and `belay amend`'s own output, one computation."""
    rows: list[Row] = []
    invalid = [_verdict(v) for v in c.invalid_steps]
    if c.invalid_steps_omitted:
        invalid.append(f"... and {c.invalid_steps_omitted:,} more steps")
    invalid += [f"{o.label} ({o.source}): {o.why}" for o in c.invalid_outputs]
    if c.invalid_outputs_omitted:
        invalid.append(f"... and {c.invalid_outputs_omitted} more")
    if invalid:
        listed = (
            len(c.invalid_steps)
            + c.invalid_steps_omitted
            + len(c.invalid_outputs)
            + c.invalid_outputs_omitted
        )
        rows.append(
            (
                0,
                f"made invalid ({listed} steps and outputs, of {c.invalidated_count} results; "
                "the steps are redone):",
            )
        )
    elif c.invalidated_count:
        rows.append(
            (0, f"made invalid: {c.invalidated_count} intermediate results, no step, artifact or note")
        )
    else:
        rows.append((0, "made invalid: nothing"))
    rows += [(1, line) for line in invalid]
    reusable = [_verdict(v) for v in c.reusable_steps]
    if c.reusable_steps_omitted:
        reusable.append(f"... and {c.reusable_steps_omitted} more steps")
    reusable += [f"{o.label} ({o.source})" for o in c.reusable_outputs]
    if c.reusable_outputs_omitted:
        reusable.append(f"... and {c.reusable_outputs_omitted} more")
    rows.append((0, "still reusable:" if reusable else "still reusable: nothing"))
    rows += [(1, line) for line in reusable]
    return rows


def render_change_verdicts(c: ScopeChangeItem) -> str:
    """`change_verdict_rows` as text, as the page indents them under the change."""
    return "\n".join("  " * level + escaping.inline(text) for level, text in change_verdict_rows(c))


def _rejection_rows(b: Briefing) -> list[Row]:
    if not b.rejections:
        return []
    rows = _heading("Rejections")
    if b.rejections_omitted:
        rows.append((1, f"... {b.rejections_omitted} earlier rejections not shown"))
    for rejection in b.rejections:
        who = f" by {rejection.by}" if rejection.by else ""
        when = f" at {_when(rejection.at)}" if rejection.at else ""
        what = "deliverable" if rejection.kind == "deliverable" else "operation awaiting approval"
        reason = rejection.reason or "no reason given"
        rows.append(
            (1, f"{rejection.item} ({what}, sha256 {_short(rejection.sha256)}) rejected{who}{when}: {reason}")
        )
        if rejection.child:
            rows.append((2, f"reopened child session {rejection.child}: it runs again with the reason"))
        rows += [(2, "redo " + _verdict(v).split(": ", 1)[0]) for v in rejection.steps]
    return rows


def _decided_rows(b: Briefing) -> list[Row]:
    """What people decided: who, when, why."""
    if not b.decided:
        return []
    rows = _heading("Decided by people")
    if b.decided_omitted:
        rows.append((1, f"... {b.decided_omitted} earlier decisions not shown; `{b.every_event}` lists them"))
    for d in b.decided:
        who = d.by or "someone"
        why = f": {d.reason}" if d.reason and d.reason != d.outcome else ""
        rows.append(
            (1, f"{d.kind} {d.item}: {d.outcome} by {who} at {_when_exactly(d.at)} (seq {d.seq}){why}")
        )
    return rows


def _step_rows(b: Briefing) -> list[Row]:
    rows = _heading("Steps")
    if b.steps_omitted:
        rows.append(
            (
                1,
                f"... {b.steps_omitted} earlier steps not shown "
                f"({b.steps_omitted_done} done, {b.steps_omitted_verified} verified)",
            )
        )
    stopped = {s.owner for s in b.steps if s.missing and s.task_id == s.owner}
    unproven = {a.id for a in b.needs_attention if a.kind == "unproven"}
    for s in b.steps:
        owner = f" [{s.owner}]" if s.owner else ""
        deliverable = f" -> {s.deliverable}" if s.deliverable else ""
        if s.missing:
            why = "not proven, see Needs attention" if s.missing in unproven else "not published"
            deliverable = f" (owes {s.missing}: {why})"
        again = f" (round {s.round})" if s.round > 1 else ""
        if s.status.value == "running" and s.owner in stopped:
            again += "; its turn ended, nothing runs"
        if s.verification_failed:
            again += f"; its verification {s.verification_failed} failed"
        rows.append(
            (1, f"{s.status.value:<9} {s.task_id}: {s.title or s.task_id}{owner}{deliverable}{again}")
        )
        if s.reopened_because:
            rows.append((2, f"to redo: {s.reopened_because}"))
    if not b.steps:
        rows.append((1, "no plan recorded"))
    return rows


def _running_rows(b: Briefing) -> list[Row]:
    rows = _heading("Running now")
    for r in b.running:
        who = f" [{r.subagent}]" if r.subagent else ""
        rows.append((1, f"{r.kind} {r.id}: {r.description}{who}"))
    if b.interruption is not None:
        rows.append((1, f"nothing: attempt {b.interruption.attempt} is interrupted (see above)"))
    elif not b.running:
        rows.append((1, "nothing"))
    return rows


def _waiting_rows(b: Briefing) -> list[Row]:
    rows = _heading("Waiting on you")
    for a in b.waiting_on_you:
        rows.append((1, f"{a.kind} {a.id}: {a.summary}"))
        if a.kind == "message":
            rows.append((2, f"run: {a.command}  (its next turn: your message)"))
            rows.append((2, f"or: {a.also}  (change the request; it goes on with the new one)"))
            rows.append((2, f"or: {a.alternative}  (end the session without it)"))
            continue
        if a.payload_sha256:
            rows.append((2, f"payload sha256 {a.payload_sha256}, expires {_when(a.expires_at)}"))
        rows += [(2, f"read {f.what}: {f.command}  ({f.size} bytes, sha256 {f.sha256})") for f in a.fetch]
        rows.append((2, f"run: {a.command}" + (f"  (or: {a.alternative})" if a.alternative else "")))
    if not b.waiting_on_you:
        rows.append((1, "nothing"))
    return rows


def _attention_rows(b: Briefing) -> list[Row]:
    rows = _heading("Needs attention")
    if b.needs_attention_omitted:
        rows.append(
            (
                1,
                f"... {b.needs_attention_omitted:,} earlier failed effects not shown; "
                f"`{b.every_event}` lists every one",
            )
        )
    for attention in b.needs_attention:
        rows.append((1, f"{attention.kind.replace('_', ' ')} {attention.id}: {attention.summary}"))
        if attention.command:
            alternative = f"  (or: {attention.alternative})" if attention.alternative else ""
            rows.append((2, f"run: {attention.command}{alternative}"))
    if not b.needs_attention:
        rows.append((1, "nothing"))
    return rows


def _effect_rows(b: Briefing) -> list[Row]:
    if not b.effects:
        return []
    rows = _heading("Effects in the world")
    if b.effects_omitted:
        rows.append((1, f"... {b.effects_omitted} earlier effects not shown"))
    for effect in b.effects:
        made = f" -> {effect.ref}" if effect.ref else ""
        when = f" at {_when(effect.at)}" if effect.at else ""
        detail = f": {effect.detail}" if effect.detail else ""
        rows.append((1, f"{effect.outcome:<7} {effect.tool} {effect.operation_id}{made}{when}{detail}"))
    return rows


def _external_rows(b: Briefing) -> list[Row]:
    rows = _heading("Waiting on external conditions")
    stopped = {f"{CHILD_CONDITION_PREFIX}{c.session}" for c in b.children if c.command}
    for e in b.waiting_on_external:
        rows.append((1, f"{e.wait_id}: {e.reason}" + (f" [{e.condition}]" if e.condition else "")))
        if e.command and e.condition in stopped:
            rows.append((2, f"it is not running (the wait ends when it ends): run: {e.command}"))
        elif e.command and (e.condition or "").startswith(CHILD_CONDITION_PREFIX):
            rows.append((2, f"ends when that session ends: {e.command}"))
        elif e.command:
            rows.append((2, f"once it holds, run: {e.command}"))
    if not b.waiting_on_external:
        rows.append((1, "nothing"))
    return rows


def _review_rows(b: Briefing) -> list[Row]:
    rows = _heading("Ready for review")
    for review in b.ready_for_review:
        sizes = f"{review.size} bytes" if review.size is not None else ""
        facts = ", ".join(x for x in (sizes, review.media_type or "", review.subagent or "") if x)
        label = f"{review.name} ({facts})" if facts else review.name
        rows.append((1, f"{label}: {review.description}"))
        place = review.location or b.artifact_store or "the artifact store"
        rows.append((2, f"download: {review.command}  (sha256 {_short(review.sha256)}, at {place})"))
        if review.rejected_before:
            rows.append((2, f"these are the bytes rejected before, unchanged (by {review.rejected_before})"))
        if review.alternative:
            rows.append((2, f"or turn it down: {review.alternative}"))
    if not b.ready_for_review:
        rows.append((1, "nothing"))
    return rows


def _note_row(n: NoteItem, owner: str = "") -> Row:
    stale = f" (invalid: {n.invalid_because})" if n.invalid_because else ""
    return (1, f"{owner}{n.note_id} [{n.status}]: {n.text}{stale}")


def _note_rows(b: Briefing) -> list[Row]:
    """The session's hypotheses, decisions and findings; a coordinator's page adds each child's
    hypotheses and decisions, under the child's name ("child session C: ...")."""
    sections: list[tuple[str, list[NoteItem], int, bool]] = [
        ("Hypotheses (not yet accepted)", b.hypotheses, b.hypotheses_omitted, True),
        ("Decisions", b.decisions, b.decisions_omitted, True),
        ("Findings", b.findings, b.findings_omitted, False),
    ]
    of_children = {
        sections[0][0]: [(c.session, c.hypotheses, c.hypotheses_omitted) for c in b.children],
        sections[1][0]: [(c.session, c.decisions, c.decisions_omitted) for c in b.children],
    }
    rows: list[Row] = []
    for title, notes, omitted, always in sections:
        if not notes and not always:
            continue
        rows += _heading(title)
        if omitted:
            rows.append((1, f"... {omitted} older not shown"))
        rows += [_note_row(n) for n in notes]
        shown = bool(notes)
        for child, child_notes, child_omitted in of_children.get(title, []):
            if child_omitted:
                rows.append((1, f"... {child_omitted} older of child session {child} not shown"))
            rows += [_note_row(n, f"child session {child}: ") for n in child_notes]
            shown = shown or bool(child_notes)
        if not shown:
            rows.append((1, "none"))
    return rows


def _children_rows(b: Briefing) -> list[Row]:
    """A coordinator's child sessions, each as its own record says, with the command that moves a
    child nothing runs."""
    if not b.children:
        return []
    rows = _heading("Child sessions")
    for child in b.children:
        rows.append((1, f"{child.session} (part {child.part}): {child.summary}"))
        if child.command:
            rows.append((2, f"run: {child.command}"))
    return rows


def _when_exactly(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if moment else "an unknown time"


def _interruption_rows(b: Briefing) -> list[Row]:
    """First thing after the heading: no attempt is alive, since when, and what to do."""
    gone = b.interruption
    if gone is None:
        return []
    title = f"{b.phase.value} since {_when_exactly(gone.since)}: {gone.why}"
    rows: list[Row] = [(0, title)]
    rows.append((1, f"it was doing: {gone.doing}"))
    for op in gone.operations:
        who = f" [{op.subagent}]" if op.subagent else ""
        rows.append((1, f"operation {op.operation_id} ({op.tool}{who}): {op.settled}"))
    if gone.operations_omitted:
        rows.append((1, f"... and {gone.operations_omitted} more operations"))
    rows.append((1, f"next: {gone.next}"))
    if gone.command:
        rows.append((2, f"run: {gone.command}"))
    return rows


def _recovery_rows(b: Briefing) -> list[Row]:
    """What happened to the attempts: only what did happen."""
    rec = b.recovery
    rows: list[Row] = [(0, "Attempts and recovery")]
    happened = []
    if rec.harness_lost:
        happened.append(f"harness lost {rec.harness_lost}x")
    if rec.sandbox_replaced:
        happened.append(f"sandboxes replaced {rec.sandbox_replaced}x")
    if rec.recovery_restores:
        restored = ""
        if rec.restored_from:
            restored = (
                f" from {rec.restored_from}"
                if rec.recovery_restores == 1
                else f" (last from {rec.restored_from})"
            )
        happened.append(f"restored {rec.recovery_restores}x{restored}")
    if rec.recovery_failures:
        happened.append(f"recovery failures {rec.recovery_failures}")
    attempt = f"attempt {rec.attempt}" + (" (interrupted, see above)" if b.interruption else "")
    if rec.model:
        attempt += f", model {rec.model}"
    if not happened and b.interruption is None:
        happened = ["no attempt lost, no sandbox replaced"]
    elif not happened:
        happened = ["no sandbox replaced"]
    rows.append((1, f"{attempt}; " + "; ".join(happened)))
    if rec.last_failure:
        rows.append((2, f"last recovery failure: {rec.last_failure}"))
    for move in rec.executor_moves:
        rows.append(
            (
                1,
                change_phrase(
                    move.from_type,
                    move.from_model,
                    move.to_type,
                    move.to_model,
                    by=move.by,
                    at_seq=move.at_seq,
                    reason=move.reason,
                ),
            )
        )
    if rec.unknown_outcomes:
        rows.append(
            (
                1,
                "unknown outcomes to reconcile: "
                + ", ".join(f"{u.operation_id} ({u.tool})" for u in rec.unknown_outcomes),
            )
        )
    if rec.reconciled:
        rows.append((1, "reconciled: " + ", ".join(rec.reconciled)))
    for cp in b.checkpoints:
        verification = f", verified by `{cp.verification}`" if cp.verification else ""
        nxt = f", next step {cp.next_step}" if cp.next_step else ""
        owner = f"{cp.subagent}: " if cp.subagent else ""
        rows.append(
            (
                1,
                f"last verified checkpoint {owner}{cp.checkpoint_id} "
                f"(covers seq {cp.covers_seq}{verification}{nxt})",
            )
        )
    if not b.checkpoints:
        rows.append((1, "no verified checkpoint yet"))
    return rows


def token_usage(usage: BudgetUsage) -> str:
    """The model tokens the record counts, and how many of the input a prompt cache served (once
    the provider said any: a scripted plan's and many servers' answers say nothing of a cache)."""
    output_tokens = usage.tokens - usage.input_tokens
    text = (
        f"{usage.model_calls} model calls, {usage.input_tokens} input tokens, {output_tokens} output tokens"
    )
    if usage.input_tokens and usage.cached_input_tokens:
        share = 100 * usage.cached_input_tokens // usage.input_tokens
        text += f"; {usage.cached_input_tokens} input tokens ({share}%) read from the provider's prompt cache"
    return text


def _resource_rows(b: Briefing) -> list[Row]:
    """Each subagent's sandbox and the budgets."""
    if not b.sandboxes and not b.budgets and not b.usage.tokens:
        return []
    rows: list[Row] = [(0, "Resources")]
    if b.usage.tokens:
        rows.append((1, "usage: " + token_usage(b.usage)))
    for sandbox in b.sandboxes:
        state = {True: "alive", False: "not running", None: "not observed"}[sandbox.alive]
        facts = [
            f
            for f in (sandbox.where, f"profile {sandbox.network_profile}" if sandbox.network_profile else "")
            if f
        ]
        started = f"; started by attempt {sandbox.started_by_attempt}" if sandbox.started_by_attempt else ""
        restored = f", restored from {sandbox.restored_from}" if sandbox.restored_from else ""
        text = f"sandbox {sandbox.subagent}: {state}" + (f" ({', '.join(facts)})" if facts else "")
        rows.append((1, text + started + restored))
        if sandbox.recorded:
            rows.append((2, f"recorded: {sandbox.recorded}"))
        if sandbox.tools_changed:
            rows.append((2, sandbox.tools_changed))
    for budget in b.budgets:
        rows.append((1, f"budget {budget.name}: {budget.used} used, {budget.left} left of {budget.limit}"))
    return rows


def _redaction_rows(b: Briefing) -> list[Row]:
    """A line for the secrets kept out of the record (`belay.harness.redaction`), when any were."""
    if not b.secrets_redacted:
        return []
    count = b.secrets_redacted
    what = f"{count} secret{'s' if count != 1 else ''} redacted"
    return [
        (0, "Secrets"),
        (1, f"{what} from tool requests and results before they were recorded"),
    ]


def _remote_rows(b: Briefing) -> list[Row]:
    """Each managed executor's remote session: its id, the endpoint used, what went through it."""
    if not b.remote_sessions:
        return []
    rows: list[Row] = [(0, "Managed executors")]
    for remote in b.remote_sessions:
        where = f"{remote.executor} session {remote.remote_session_id} at {remote.endpoint}"
        rows.append((1, f"{remote.subagent}: {where}"))
        counts = (
            f"{remote.calls} calls asked for, {remote.delivered} results delivered, "
            f"{remote.refused} refused for their arguments, "
            + (f"{remote.not_run} not run (asked on work a change reopened), " if remote.not_run else "")
            + f"{remote.interruptions} interruptions"
        )
        rows.append((2, counts + (f"; failed: {remote.failure}" if remote.failure else "")))
        if remote.replaced:
            rows.append(
                (
                    2,
                    f"a new remote session, seeded from the record, in place of {remote.replaced[-1]} "
                    f"(lost: {remote.replaced_because or 'unknown'})"
                    + (f"; {len(remote.replaced)} replaced in all" if len(remote.replaced) > 1 else ""),
                )
            )
    return rows


# The sections in the order of the page.
SECTIONS: tuple[Callable[[Briefing], list[Row]], ...] = (
    _header_rows,
    _interruption_rows,
    _record_rows,
    _request_rows,
    _scope_change_rows,
    _rejection_rows,
    _decided_rows,
    _step_rows,
    _running_rows,
    _waiting_rows,
    _attention_rows,
    _effect_rows,
    _external_rows,
    _children_rows,
    _review_rows,
    _note_rows,
    _recovery_rows,
    _resource_rows,
    _redaction_rows,
    _remote_rows,
)


def render_rows(b: Briefing) -> list[Row]:
    """(level, text) rows for a renderer elsewhere (the HTML report): level 0 is a section
    heading, 1 an entry, 2 a detail under an entry. Each text is one line (`escaping.inline`)."""
    return [(level, escaping.inline(text)) for section in SECTIONS for level, text in section(b)]


def section_titles(b: Briefing) -> list[str]:
    """The headings of the page, in order."""
    return [text for level, text in render_rows(b) if level == 0]


def render_text(b: Briefing) -> str:
    out = [text if level == 0 else "  " * level + text for level, text in render_rows(b)]
    return "\n".join(out) + "\n"


def render_markdown(b: Briefing) -> str:
    out = []
    for index, (level, text) in enumerate(render_rows(b)):
        shown = escaping.markdown(text)
        if level == 0:
            out.append(f"# {shown}" if index == 0 else f"\n## {shown}")
        else:
            out.append("  " * (level - 1) + f"- {shown}")
    return "\n".join(out) + "\n"


def render_json(b: Briefing) -> str:
    return b.model_dump_json(indent=2)
