"""What a managed executor's remote agent is told: the first message of its remote session, and,
when that session replaces one the provider lost, where the work stands according to the record.

The record is authoritative and the remote session is a cache. When the provider no longer has the
remote session (a 404: expired, deleted, a provider that lost it) or it cannot go on (failed,
terminated), the executor starts a new remote session on the same executor and seeds its first
message with the record's projection: the goal and every scope change, each step of this subagent
as the record has it, the last verified checkpoint, the evidence and notes, and the recent events
(`belay.journal.context`). A real model reads that text as it is; the local stand-ins' remote agent
reads only its step lines, one per step the record knows, in the order the steps began:

    - step inspect: verified
    - step report: done
    - step reproduce: running, 1 call settled
    - step fix: planned again (round 2): <why its earlier work is invalid>
    - step report: planned again (round 2, after a rejection): <the rejection>

When a scope change or a rejection reopens steps of a subagent whose remote session is not new
since, the remote agent is told so as a user message of that session (`reopening_text`, sent by
`ManagedExecutor.tell_reopening`): what was reopened, the request as it stands and the steps to do
again, in the same step lines; the stand-ins' remote agent does those steps again, in their new
round, the way the plan does them for that goal and that round (`redone_steps`, `goal_of`).

A call is settled when the record holds it: its result, its reconciliation, or an unknown outcome
that waits on one (never to be asked again). The calls counted are those of the step's current
round; a running step's own `update_plan` start is not among them (it is why the step runs).
"""

from __future__ import annotations

import json
import re
from typing import Any

from belay.executors.provider import TaskBrief
from belay.harness.executor import ExecutorContext
from belay.journal.context import build_context
from belay.journal.events import TaskStatus
from belay.journal.state import SessionState, TaskRecord
from belay.journal.tools import TOOLS

SEED_BUDGET_TOKENS = 6000
# A result is handed to the remote agent as text, at most this long.
MAX_RESULT_CHARS = 32_000
SEED_HEADER = "Where the work stands, from Belay's record"
# One step line, as `step_lines` writes it and the stand-ins' remote agent reads it.
STEP_LINE = re.compile(
    r"^- step (?P<step>[a-z0-9][-a-z0-9_]*): (?P<status>verified|done|running)"
    r"(?:, (?P<settled>\d+) calls? settled)?",
    re.MULTILINE,
)
# A step to do again, as `step_lines` and `reopening_text` write it.
AGAIN_LINE = re.compile(
    r"^- step (?P<step>[a-z0-9][-a-z0-9_]*): planned again "
    r"\(round (?P<round>\d+)(?P<rejected>, after a rejection)?\)",
    re.MULTILINE,
)
GOAL_LINE = re.compile(r"^Goal: (?P<goal>.*)$", re.MULTILINE)
# How a call the remote agent asked for in a turn that a change overtook is answered (not run):
# the turn ends, and the change is its next message.
NOT_RUN = "not run: a change reopened this work after your turn began"


def not_run_text(seq: int) -> str:
    return f"{NOT_RUN} (seq {seq}); end your turn: the next message says what to do again"


def task_brief(context: ExecutorContext, state: SessionState, seed: str = "") -> TaskBrief:
    """The remote agent's instructions, tools and first message; `seed` (from `seed_text`) goes
    after the request when the session replaces a lost one."""
    session, sub = context.session, context.subagent
    executor = session.spec.executor
    instructions = (
        f"You are {sub.name}, one subagent of the Belay session {session.session_id}"
        + (f": {sub.role}." if sub.role else ".")
        + " Every tool you call runs in your own sandboxed workspace, recorded, under Belay's "
        "effect classes and approvals. Frame each step of your work with update_plan (running, "
        "then done with a verification command). Record hypotheses, decisions and findings with "
        "record_note, citing the file, test or output behind each in its evidence."
        + (
            f" Publish your deliverable {sub.deliverable} with publish_deliverable."
            if sub.deliverable
            else ""
        )
    )
    lines = [f"Goal: {state.request.goal}"]
    lines += [f"{name}: {text}" for name, text in sorted(state.request.parts.items())]
    if sub.deliverable:
        lines.append(f"Your deliverable: {sub.deliverable}")
    if seed:
        lines += ["", seed]
    return TaskBrief(
        model=executor.model or "",
        name=f"belay-{session.session_id}-{sub.name}",
        instructions=instructions,
        message="\n".join(lines),
        tools=tuple(TOOLS.values()),
    )


def settled_calls(state: SessionState, task: TaskRecord) -> int:
    """The calls of the step's current round that the record holds (see the module's docstring).
    It walks every operation: it runs only when a remote session is replaced."""
    since = (task.reopened_seq or 0) if task.round > 1 else 0
    return sum(1 for op in state.operations.values() if op.step == task.task_id and op.request_seq > since)


def step_lines(state: SessionState, subagent: str) -> list[str]:
    prefix = f"{subagent}/"
    steps = sorted(
        (t for t in state.tasks.values() if t.task_id.startswith(prefix) and t.owner == subagent),
        key=lambda t: t.first_seq,
    )
    lines = []
    for task in steps:
        step = task.task_id.removeprefix(prefix)
        if task.status == TaskStatus.RUNNING:
            settled = settled_calls(state, task)
            lines.append(f"- step {step}: running, {settled} call{'s' if settled != 1 else ''} settled")
        elif task.status == TaskStatus.PLANNED and task.round > 1:
            lines.append(again_line(step, task))
        else:
            lines.append(f"- step {step}: {task.status.value}")
    return lines


def again_line(step: str, task: TaskRecord) -> str:
    rejected = ", after a rejection" if task.reopened_by_rejection else ""
    return f"- step {step}: planned again (round {task.round}{rejected}): {task.reopened_because}"


def steps_to_redo(state: SessionState, subagent: str, since: int) -> list[str]:
    """The subagent's steps reopened after seq `since` and not done again yet, as step lines."""
    prefix = f"{subagent}/"
    reopened = sorted(
        (
            t
            for t in state.tasks.values()
            if t.task_id.startswith(prefix)
            and t.owner == subagent
            and t.round > 1
            and (t.reopened_seq or 0) > since
            and t.status in (TaskStatus.PLANNED, TaskStatus.RUNNING)
        ),
        key=lambda t: t.first_seq,
    )
    return [again_line(t.task_id.removeprefix(prefix), t) for t in reopened]


def reopening_text(state: SessionState, subagent: str, since: int) -> str:
    """What the remote agent is told when a scope change or a rejection reopened its work after
    its remote session began (at seq `since`): the request as it stands, and what to do again."""
    lines = [
        f"Your work was reopened after your turn ended (the request is at version "
        f"{state.request.version} now). What was done before stays done, except these steps, whose "
        "earlier work is invalid now: do each again, framed with update_plan, then publish what "
        "you owe again.",
        *steps_to_redo(state, subagent, since),
        f"Goal: {state.request.goal}",
        *(f"{name}: {text}" for name, text in sorted(state.request.parts.items())),
    ]
    return "\n".join(lines)


def redone_steps(message: str) -> dict[str, tuple[int, bool]]:
    """The steps a message says to do again: step id -> (its round, whether a rejection opened it)."""
    return {m["step"]: (int(m["round"]), bool(m["rejected"])) for m in AGAIN_LINE.finditer(message)}


def goal_of(message: str) -> str:
    """The goal a message states (its last `Goal:` line); empty when it states none."""
    goals = GOAL_LINE.findall(message)
    return goals[-1] if goals else ""


async def seed_text(context: ExecutorContext, state: SessionState, lost: str, why: str) -> str:
    """Where the work stands, for the remote session that replaces `lost` (gone for `why`), or,
    with no `lost`, that takes the work over after the session moved here (`why`: the move)."""
    sub = context.subagent.name
    came = f"the remote session {lost} that held this work is gone: {why}" if lost else why
    lines = [
        f"{SEED_HEADER} ({came}). Go on "
        "from here: never redo a step that is done or verified, nor a settled call; a running "
        "step goes on after its settled calls.",
    ]
    if state.scope_changes:
        lines.append(f"Scope changes (the goal above is request v{state.request.version}):")
        lines += [
            f"- v{c.request_version}" + (f" by {c.by}" if c.by else "") + f": {c.summary}"
            for c in state.scope_changes
        ]
    said = sorted((m for m in state.user_messages.values() if m.subagent == sub), key=lambda m: m.seq)
    if said:
        lines.append("What the person told you when your turns ended:")
        lines += [f"- {m.by or 'a person'}: {m.text}" for m in said]
    steps = step_lines(state, sub)
    lines += ["Steps:", *steps] if steps else ["Steps: none begun yet."]
    verified = state.verified_checkpoints.get(sub)
    if verified is not None:
        checkpoint = verified.checkpoint
        done = ", ".join(checkpoint.completed_steps) or "none"
        lines.append(
            f"Last verified checkpoint: {checkpoint.checkpoint_id} (covers seq {checkpoint.covers_seq}; "
            f"done: {done}; next: {checkpoint.next_step})"
        )
    projection = await build_context(context.store, context.session.session_id, state, SEED_BUDGET_TOKENS)
    return "\n".join(lines + projection.history_lines("Evidence and notes:"))


def seeded_steps(message: str) -> dict[str, tuple[str, int]]:
    """The step lines of a seeded first message: step id -> (status, calls settled)."""
    return {m["step"]: (m["status"], int(m["settled"] or 0)) for m in STEP_LINE.finditer(message)}


def result_text(output: Any) -> str:
    text = output if isinstance(output, str) else json.dumps(output, sort_keys=True, default=str)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters]"
    return text


def plain_name(name: str) -> str:
    """A remote file's base name as a deliverable name: one plain file name."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base).lstrip(".") or "output"
