"""`belay drill --compare`: the same short task on the self-hosted executor and on a managed one,
each killed at the same point of its record and resumed, and one table of figures per side.

The kill point is the drill's first (a sandbox tool request after a verified checkpoint), taken
from an uninterrupted self-hosted run: operation ids are the same on every executor, so it names
the same call on both sides. Every figure is measured, never written: from each side's record
(events lost and steps repeated across the kill, where each tool ran, the approvals and when
they were granted, model calls and tokens, how long the remote sessions were held, who decided
and where the conversation is kept, the sandboxes started), and for the managed side from the
provider's own API (the session's history, read with the provider's SDK as a person would read
it: what the provider keeps that the record does not).
"""

from __future__ import annotations

import asyncio
import re
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from belay.harness.attempt import fault_key
from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    Event,
    LifecycleEvent,
    ModelOutputEvent,
    RemoteEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.tools import TOOLS
from belay.journal.verdicts import completed, deliverables
from belay.local.cli_process import read_events
from belay.local.drill.run import Drill
from belay.local.drill.scenarios import sandbox_requests_after_verified_checkpoint
from belay.local.drill.waiting import run_watched

WALLS = re.compile(r"walls: ([^:;]+)")


class SideFigures(BaseModel):
    """One executor's run of the task, killed and resumed, as its record (and provider) show it."""

    executor: str
    completed: bool
    deliverables: dict[str, str]
    killed_at_seq: int
    events_before_kill: int
    events_lost: int  # events recorded before the kill that the record no longer holds as they were
    steps_repeated: int  # steps completed more than once
    operations_repeated: int  # operations with more than one result
    tool_calls: int
    in_sandbox: int  # calls run in Belay's sandboxes
    in_harness: int  # calls run in Belay's harness (plan, notes, deliverables)
    at_provider: int  # calls the provider's history shows that the record does not (run there)
    walls: str  # the sandboxes' walls, as their start recorded them
    provider_history: int | None  # entries the provider keeps for the remote sessions
    mirrored: int  # of those, what the record holds too: each call and each delivered result
    only_at_provider: int  # provider entries the record does not hold
    approvals_requested: int
    approvals_before_run: int  # granted before the operation ran (enforced by Belay)
    approvals_at_provider: int  # approval items in the provider's history
    model_calls: int
    input_tokens: int
    output_tokens: int
    remote_session_s: float  # how long the record shows each remote session held, summed
    remote_sessions: int
    decided_by: list[str]  # the model ids the record names
    conversation: str  # where the conversation is kept
    sandboxes_started: int
    sandboxes_replaced: int  # by the resume: clean ones, restored from the record
    run_s: float
    resume_s: float


class CompareReport(BaseModel):
    manifest: str
    kill_point: str
    same_deliverables: bool
    sides: list[SideFigures]


def run_compare(manifest: Path, workdir: Path, managed: str, *, progress: bool = True) -> CompareReport:
    reference = Drill(manifest, workdir / "reference", progress, "self-hosted")
    home = reference.home("reference")
    run_watched(home, ["run", "--quiet", str(reference.manifest)], reference.session_id)
    events = read_events(home, reference.session_id)
    if not completed(events):
        raise ValueError(f"the uninterrupted self-hosted run of {manifest} did not complete (in {home})")
    candidates = sandbox_requests_after_verified_checkpoint(events)
    if not candidates:
        raise ValueError(f"{manifest}: no sandbox tool request after a verified checkpoint to kill at")
    point = fault_key(candidates[0])
    sides = [
        measure(Drill(manifest, workdir / side, progress, side), point) for side in ("self-hosted", managed)
    ]
    named = {str(s["deliverable"]) for s in reference.data["spec"]["subagents"] if s.get("deliverable")}
    work = [{n: sha for n, sha in side.deliverables.items() if n in named} for side in sides]
    return CompareReport(
        manifest=str(manifest), kill_point=point, same_deliverables=work[0] == work[1], sides=sides
    )


def measure(drill: Drill, point: str) -> SideFigures:
    home = drill.home("compare")
    env = drill.environment(home)
    try:
        started = time.monotonic()
        _, before = drill.kill_run_at(home, env, point)
        run_s = time.monotonic() - started
        _, after, resume_s = drill.resume(home, env)
        history = provider_history(drill, home, after) if drill.managed else None
    finally:
        drill.stop_standins()
    return figures(drill.executor_label, before, after, history, run_s, resume_s)


def figures(
    executor: str,
    before: Sequence[Event],
    after: Sequence[Event],
    history: list[str] | None,
    run_s: float,
    resume_s: float,
) -> SideFigures:
    held = {e.seq: e for e in after}
    requests = {e.payload.operation_id: e.payload.tool for e in after if isinstance(e, ToolRequestEvent)}
    results = [e.payload.operation_id for e in after if isinstance(e, ToolResultEvent)]
    done = [
        e.payload.task_id
        for e in after
        if isinstance(e, TaskEvent) and "/" in e.payload.task_id and e.payload.status in ("done", "verified")
    ]
    remote = [e for e in after if isinstance(e, RemoteEvent)]
    calls = [e for e in remote if e.payload.kind == "call"]
    delivered = [e for e in remote if e.payload.kind == "result_delivered"]
    asked_there = sum(1 for entry in history or () if entry in ("function_call", "agent.custom_tool_use"))
    outputs = [e for e in after if isinstance(e, ModelOutputEvent)]
    started = [e for e in after if isinstance(e, LifecycleEvent) and e.payload.kind == "sandbox_started"]
    walls = sorted({m.group(1).strip() for e in started for m in WALLS.finditer(e.payload.detail)})
    sessions = [e for e in remote if e.payload.kind == "session"]
    return SideFigures(
        executor=executor,
        completed=completed(after),
        deliverables=deliverables(after),
        killed_at_seq=before[-1].seq if before else 0,
        events_before_kill=len(before),
        events_lost=sum(1 for e in before if held.get(e.seq) != e),
        steps_repeated=sum(1 for step in set(done) if done.count(step) > 1),
        operations_repeated=sum(1 for op in set(results) if results.count(op) > 1),
        tool_calls=len(requests),
        in_sandbox=sum(1 for tool in requests.values() if tool in TOOLS and TOOLS[tool].where == "sandbox"),
        in_harness=sum(
            1 for tool in requests.values() if tool not in TOOLS or TOOLS[tool].where == "harness"
        ),
        at_provider=max(0, asked_there - len(calls)),
        walls=", ".join(walls) or "none recorded",
        provider_history=len(history) if history is not None else None,
        mirrored=len(calls) + len(delivered),
        only_at_provider=max(0, len(history) - len(calls) - len(delivered)) if history is not None else 0,
        approvals_requested=sum(1 for e in after if isinstance(e, ApprovalRequestEvent)),
        approvals_before_run=approvals_before_run(after),
        approvals_at_provider=sum(
            1 for entry in history or () if "approval" in entry or "confirmation" in entry
        ),
        model_calls=len(outputs),
        input_tokens=sum(e.payload.input_tokens for e in outputs),
        output_tokens=sum(e.payload.output_tokens for e in outputs),
        remote_session_s=round(held_for(remote), 2),
        remote_sessions=len({e.payload.remote_session_id for e in sessions}),
        decided_by=sorted({e.actor.model_id for e in outputs if e.actor.model_id}),
        conversation=", ".join(
            sorted({f"{e.payload.remote_session_id} at {e.payload.endpoint}" for e in sessions})
        )
        or "the record (each turn's context is rebuilt from it)",
        sandboxes_started=len(started),
        sandboxes_replaced=sum(
            1 for e in after if isinstance(e, LifecycleEvent) and e.payload.kind == "sandbox_replaced"
        ),
        run_s=round(run_s, 2),
        resume_s=round(resume_s, 2),
    )


def approvals_before_run(events: Sequence[Event]) -> int:
    """Grants recorded before the operation they cover has a result: enforced before it ran."""
    granted = {
        e.payload.operation_id: e.seq for e in events if isinstance(e, ApprovalEvent) and e.payload.granted
    }
    ran = {}
    for e in events:
        if isinstance(e, ToolResultEvent) and e.payload.operation_id not in ran:
            ran[e.payload.operation_id] = e.seq
    return sum(1 for op, seq in granted.items() if op in ran and seq < ran[op])


def held_for(remote: Sequence[RemoteEvent]) -> float:
    """Seconds from each remote session's record to the last remote event naming it, summed."""
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    for e in remote:
        sid = e.payload.remote_session_id
        if not sid:
            continue
        first.setdefault(sid, e.created_at)
        last[sid] = e.created_at
    return sum((last[sid] - first[sid]).total_seconds() for sid in first)


def provider_history(drill: Drill, home: Path, events: Sequence[Event]) -> list[str]:
    """The type of each entry the provider keeps for the record's remote sessions, read through
    the provider's own SDK at the session's stand-in."""
    base_url = drill.standins[home].base_url
    sessions = sorted(
        {
            e.payload.remote_session_id
            for e in events
            if isinstance(e, RemoteEvent) and e.payload.kind == "session"
        }
    )
    return asyncio.run(_history(drill.executor, base_url, sessions))


async def _history(executor: str, base_url: str, sessions: list[str]) -> list[str]:
    entries: list[str] = []
    if executor == "openai-agents":
        from openai import AsyncOpenAI

        openai = AsyncOpenAI(base_url=base_url, api_key="drill")
        try:
            for sid in sessions:
                entries += [i.type async for i in openai.beta.agents.sessions.items.list(sid, limit=100)]
                entries += ["turn" async for _ in openai.beta.agents.sessions.turns.list(sid, limit=100)]
        finally:
            await openai.close()
        return entries
    from anthropic import AsyncAnthropic

    anthropic = AsyncAnthropic(base_url=base_url, api_key="drill")
    try:
        for sid in sessions:
            entries += [e.type async for e in anthropic.beta.sessions.events.list(sid, limit=1000)]
    finally:
        await anthropic.close()
    return entries


# --------------------------------------------------------------------------------------------------
# The table

CELL = 44  # characters of one side's column


def rows_of(side: SideFigures) -> list[tuple[str, str]]:
    """Each figure of one side, in words around the measured numbers."""
    history = (
        f"{side.only_at_provider} of the provider's {side.provider_history} history entries (its "
        f"agent's messages, turns); it and the record both hold the {side.mirrored} calls and results"
        if side.provider_history is not None
        else "nothing: every turn is rebuilt from the record, which holds it"
    )
    session_time = (
        f"{side.remote_session_s} s, {side.remote_sessions} remote session(s) held (the record's times)"
        if side.remote_sessions
        else "none: no remote session"
    )
    return [
        (
            "durability: events lost at the kill",
            f"{side.events_lost} of the {side.events_before_kill} recorded before it",
        ),
        (
            "durability: repeated after the kill",
            f"{side.steps_repeated} steps, {side.operations_repeated} operations",
        ),
        (
            "where tools ran",
            f"{side.in_sandbox} of {side.tool_calls} calls in Belay's sandboxes ({side.walls}), "
            f"{side.in_harness} in Belay's harness, {side.at_provider} at the provider",
        ),
        ("observable only at the provider", history),
        (
            "where approvals were enforced",
            f"Belay: {side.approvals_before_run} of {side.approvals_requested} granted before the call ran; "
            f"provider: {side.approvals_at_provider}",
        ),
        ("cost: model calls", str(side.model_calls)),
        ("cost: tokens", f"{side.input_tokens} in, {side.output_tokens} out (as recorded)"),
        ("cost: provider session time", session_time),
        (
            "who operates what",
            f"decides: {', '.join(side.decided_by) or 'nothing recorded'}; conversation: "
            f"{side.conversation}; Belay: the record, {side.sandboxes_started} sandboxes started and "
            f"{side.sandboxes_replaced} replaced after the kill, {side.tool_calls} tool calls, "
            f"{side.approvals_requested} approval(s)",
        ),
        ("wall time: run to the kill, resume", f"{side.run_s} s, {side.resume_s} s"),
        (
            "completed",
            f"{'yes' if side.completed else 'no'}; deliverables {', '.join(sorted(side.deliverables))}",
        ),
    ]


def compare_table(report: CompareReport) -> str:
    left, right = report.sides
    head = f"belay drill --compare: {report.manifest}, each side killed at {report.kill_point}, then resumed"
    lines = [head, _line("", left.executor, right.executor)]
    for (label, a), (_, b) in zip(rows_of(left), rows_of(right), strict=True):
        lines.append(_line(label, a, b))
    same = "the same" if report.same_deliverables else "DIFFERENT"
    lines.append(f"deliverables of the work: {same} on both sides")
    return "\n".join(lines)


def _line(label: str, a: str, b: str) -> str:
    columns = [
        textwrap.wrap(label, 24) or [""],
        textwrap.wrap(a, CELL) or [""],
        textwrap.wrap(b, CELL) or [""],
    ]
    height = max(len(c) for c in columns)
    labels, lefts, rights = (c + [""] * (height - len(c)) for c in columns)
    return "\n".join(f"{labels[i]:<25}{lefts[i]:<{CELL}} | {rights[i]}".rstrip() for i in range(height))
