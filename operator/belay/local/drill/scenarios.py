"""The drill's scenarios, each in a fresh home, and `run_drill`, which runs them in order: the
uninterrupted reference, a kill right after a sandbox tool request, (for a managed executor) a
kill between a tool's recorded result and its delivery, a kill right after an unsafe request whose
outcome cannot be asked, and a kill with nothing declared.

A scenario that does not apply (the session has nothing of its kind to interrupt, or the executor
has no such boundary) is skipped and named with why, never a failure; all of them are, when the
uninterrupted run did not complete. A run that waits on a person or runs past its limit is stopped
and fails its check with what it waited on and the command that answers it
(`belay.local.drill.waiting`); a scenario that breaks off for any other reason fails a check that
says why. The drill itself always ends with its report."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import yaml

from belay.harness.attempt import fault_key
from belay.journal.events import (
    CheckpointEvent,
    Event,
    LifecycleEvent,
    OperationOutcomeEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.verdicts import (
    attempts,
    completed,
    deliverables,
    deliveries,
    remote_sessions,
    steps_run_twice,
)
from belay.local.cli_process import RUN_TIMEOUT_S, read_events, run_belay, run_until_event, tickets_in
from belay.local.drill.children import drill_children
from belay.local.drill.handover import handover_checks, handover_provider_checks
from belay.local.drill.pages import after_resume, before_resume, read_page
from belay.local.drill.report import BeforeAfter, DrillReport
from belay.local.drill.run import Drill
from belay.local.drill.waiting import Watched, child_sessions
from belay.local.standin_process import provider_problems, provider_summary

E = TypeVar("E", bound=Event)


UNINTERRUPTED = "uninterrupted run completes"
AFTER_REQUEST = "kill after a tool request"
BEFORE_DELIVERY = "kill between a tool result and its delivery"
AFTER_UNSAFE = "kill after an unsafe request"
UNDECLARED = "kill after a verified checkpoint, nothing declared"
INTERRUPTED = "the drill interrupted the session at least once"


def run_drill(
    manifest: Path,
    workdir: Path,
    *,
    progress: bool = True,
    executor: str | None = None,
    handover_to: str | None = None,
    answer_waits: bool = False,
) -> DrillReport:
    drill = Drill(manifest, workdir, progress, executor, handover_to, answer_waits)
    scenarios: list[tuple[str, Callable[[Drill, list[Event]], None]]] = [
        (AFTER_REQUEST, kill_after_tool_request),
        (BEFORE_DELIVERY, kill_before_delivery),
        (AFTER_UNSAFE, unknown_external_outcome),
        (UNDECLARED, undeclared_state),
    ]
    try:
        try:
            reference = uninterrupted(drill)
        except Exception as error:
            drill.check(UNINTERRUPTED, False, broke_off(error))
            reference = None
        for scenario, run in scenarios:
            if scenario == BEFORE_DELIVERY and not drill.managed:
                drill.skip(scenario, f"not a boundary of the {drill.executor} executor")
            elif reference is None:
                drill.skip(scenario, "not run: the uninterrupted run did not complete")
            else:
                try:
                    run(drill, reference)
                except Exception as error:
                    drill.check(f"{scenario}: the scenario ran to its end", False, broke_off(error))
        if reference is not None and drill.children:
            drill_children(drill, drill.workdir / "reference")
        if reference is not None and not drill.points:
            drill.check(INTERRUPTED, False, nothing_interrupted(drill))
    finally:
        drill.stop_standins()
    return drill.report()


def nothing_interrupted(drill: Drill) -> str:
    """Why a drill that killed nothing checked nothing, so that it never passes."""
    skipped = "; ".join(f"{s.scenario}: {s.reason}" for s in drill.skipped)
    return f"no scenario killed and resumed it ({skipped or 'none reached its kill point'})"


def broke_off(error: Exception) -> str:
    return f"it broke off: {type(error).__name__}: {error}"


def ended(result: Watched, what: str) -> str:
    """A check's detail about a run: what the drill stopped it for, else `what`."""
    return result.stalled or what


def uninterrupted(drill: Drill) -> list[Event] | None:
    """The reference: the session run to its end without a kill."""
    home = drill.home("reference")
    env = drill.environment(home)
    started = time.monotonic()
    result = drill.watch(home, ["run", "--quiet", str(drill.manifest)], env)
    drill.reference_run_s = round(time.monotonic() - started, 2)
    events = read_events(home, drill.session_id)
    drill.reference_events = len(events)
    drill.children = child_sessions(events)
    ok = result.returncode == 0 and completed(events)
    detail = f"{len(events)} events, deliverables {sorted(deliverables(events))}"
    if not ok:
        detail = ended(result, f"exit {result.returncode}: {(result.stderr or result.stdout)[-400:]}")
    if not drill.check(UNINTERRUPTED, ok, detail):
        return None
    if drill.managed:
        stats = drill.standins[home].stats()
        problems = provider_problems(stats, drill.subagents)
        drill.check(
            "the provider saw each input and each tool result once (uninterrupted)",
            not problems,
            "; ".join(problems) or provider_summary(stats),
        )
    return events


def first_kill_point(
    drill: Drill, scenario: str, name: str, candidates: Sequence[E], missing: str
) -> E | None:
    """The first of the events a scenario could kill at, checked; with none, the scenario does
    not apply to this session and is skipped, saying why."""
    if not candidates:
        drill.skip(scenario, missing)
        return None
    drill.check(name, True, f"kill point {fault_key(candidates[0])}")
    return candidates[0]


def managed_checks(
    drill: Drill, home: Path, before: Sequence[Event], after: Sequence[Event], operation: str
) -> bool:
    """After a kill and a resume: the provider saw each input and result once, the remote
    session is the one the record held before the kill, and the operation's result went out
    once. Across a handover the remote session cannot be the same: A's are left behind and B's
    provider saw what it was given once (`belay.local.drill.handover`)."""
    if drill.handover_to:
        return handover_provider_checks(drill, home, before, after)
    stats = drill.standins[home].stats()
    problems = provider_problems(stats, drill.subagents)
    once = drill.check(
        "the provider saw each input and each tool result once",
        not problems,
        "; ".join(problems) or provider_summary(stats),
    )
    held, now = remote_sessions(before), remote_sessions(after)
    same = drill.check(
        "the remote session id is the same before and after",
        bool(held) and held.items() <= now.items() and len(now) == drill.subagents,
        f"before the kill {held}, after the resume {now}",
    )
    sent = deliveries(after, operation)
    delivered = drill.check(
        f"the result of {operation} was delivered once",
        len(sent) == 1,
        "; ".join(f"seq {e.seq} attempt {e.actor.attempt} key {e.payload.idempotency_key}" for e in sent)
        or "never delivered",
    )
    return once and same and delivered


def resumed_checks(
    drill: Drill, home: Path, before: Sequence[Event], after: Sequence[Event], operation: str
) -> bool:
    """What a resumed run adds to its scenario's checks: the provider's (where a managed executor
    ran), and across a handover the handover's."""
    passed = True
    if drill.managed or drill.handover_to:
        passed = managed_checks(drill, home, before, after, operation)
    if drill.handover_to:
        passed = handover_checks(drill, before, after) and passed
    return passed


# --------------------------------------------------------------------------------------------------
# A kill right after a sandbox tool request


def sandbox_requests_after_verified_checkpoint(reference: Sequence[Event]) -> list[ToolRequestEvent]:
    """The requests of sandbox tools made after a verified checkpoint of the same subagent."""
    verified = {
        e.payload.subagent
        for e in reference
        if isinstance(e, CheckpointEvent) and e.payload.verified and e.payload.subagent
    }
    return [
        e
        for e in reference
        if isinstance(e, ToolRequestEvent)
        and e.payload.tool in ("write_file", "run_command")
        and e.payload.subagent in verified
        and any(
            isinstance(c, CheckpointEvent) and c.payload.verified and c.payload.subagent == e.payload.subagent
            for c in reference
            if c.seq < e.seq
        )
    ]


def check_sandboxes_replaced(drill: Drill, resumed: Sequence[Event]) -> None:
    replaced = [e for e in resumed if isinstance(e, LifecycleEvent) and e.payload.kind == "sandbox_replaced"]
    subagents = {e.payload.subagent for e in resumed if isinstance(e, LifecycleEvent) and e.payload.subagent}
    drill.check(
        "every sandbox replaced with a clean one",
        len(replaced) == len(subagents) and len(replaced) > 0,
        "; ".join(e.payload.detail for e in replaced if e.payload.subagent) or "no sandbox_replaced event",
    )


def check_restored_from_last_verified(
    drill: Drill, before: Sequence[Event], resumed: Sequence[Event]
) -> None:
    last_verified = {
        c.payload.subagent: c.payload.checkpoint_id
        for c in before
        if isinstance(c, CheckpointEvent) and c.payload.subagent and c.payload.verified
    }
    restored = [e for e in resumed if isinstance(e, LifecycleEvent) and e.payload.kind == "restored"]
    from_last_verified = all(
        e.payload.checkpoint_id == last_verified[e.payload.subagent]
        for e in restored
        if e.payload.subagent in last_verified
    )
    drill.check(
        "declared artifacts restored from the last verified checkpoint and verification re-run",
        bool(restored) and from_last_verified,
        "; ".join(f"{e.payload.subagent}: {e.payload.checkpoint_id} ({e.payload.detail})" for e in restored),
    )


def kill_after_tool_request(drill: Drill, reference: list[Event]) -> None:
    request = first_kill_point(
        drill,
        AFTER_REQUEST,
        "a sandbox tool request after a verified checkpoint",
        sandbox_requests_after_verified_checkpoint(reference),
        "the session makes no sandbox tool request after a verified checkpoint",
    )
    if request is None:
        return
    point, operation = fault_key(request), request.payload.operation_id
    home = drill.home("kill-after-request")
    env = drill.environment(home)
    reached, before = drill.kill_run_at(home, env, point)
    drill.check(
        "SIGKILL right after a tool request; the request is in the record outside the sandbox",
        reached and bool(before) and fault_key(before[-1]) == point,
        f"killed at {point}; the record (in {home / 'events.db'}) ends with seq {len(before)}",
    )
    page_before = read_page(home, drill.session_id)
    result, after, resumed_s = drill.resume(home, env)
    page_after = read_page(home, drill.session_id)
    drill.pages.append(
        BeforeAfter(
            scenario=AFTER_REQUEST,
            before=before_resume(page_before, home),
            after=after_resume(page_after, page_before, home, after, len(before)),
        )
    )
    resumed = [e for e in after if e.seq > len(before)]
    check_sandboxes_replaced(drill, resumed)
    check_restored_from_last_verified(drill, before, resumed)
    twice = steps_run_twice(after)
    drill.check("no completed step ran twice", not twice, ", ".join(twice) or "each step completed once")
    same = drill.same_deliverables(reference, after, AFTER_REQUEST)
    done = result.returncode == 0 and completed(after) and same
    drill.check(
        "the resumed session completes with the same deliverables",
        done,
        ended(result, f"exit {result.returncode}; {deliverables(after)}"),
    )
    reran = [e for e in resumed if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation]
    observed = (
        f"attempt {attempts(after)} ran {operation} again ({request.payload.effect.value}) on a "
        f"restored sandbox: result at seq {reran[0].seq if reran else '-'}; "
        f"{'completed' if completed(after) else 'not completed'}"
    )
    passed = done and len(reran) == 1 and not twice
    passed = resumed_checks(drill, home, before, after, operation) and passed
    drill.report_point(
        AFTER_REQUEST,
        point,
        before,
        after,
        f"{operation} runs again by its effect class on a restored sandbox, once; the session completes "
        "with the same deliverables",
        observed,
        passed,
        resumed_s,
    )


# --------------------------------------------------------------------------------------------------
# A kill between a tool's recorded result and its delivery to the provider


def delivered_sandbox_results(reference: Sequence[Event]) -> list[ToolResultEvent]:
    """The results of `run_command` calls that the record shows delivered to the provider."""
    return [
        e
        for e in reference
        if isinstance(e, ToolResultEvent)
        and any(
            isinstance(r, ToolRequestEvent)
            and r.payload.operation_id == e.payload.operation_id
            and r.payload.tool == "run_command"
            for r in reference
        )
        and deliveries(reference, e.payload.operation_id)
    ]


def kill_before_delivery(drill: Drill, reference: list[Event]) -> None:
    """Kill the adapter between a tool's recorded result and its delivery to the provider."""
    targets = delivered_sandbox_results(reference)
    run_commands = [
        e for e in reference if isinstance(e, ToolRequestEvent) and e.payload.tool == "run_command"
    ]
    if run_commands and not targets:
        drill.check(
            "a sandbox tool result delivered to the provider",
            False,
            f"the record shows no delivery of the result of {run_commands[0].payload.operation_id} or any "
            "other run_command",
        )
        return
    target = first_kill_point(
        drill,
        BEFORE_DELIVERY,
        "a sandbox tool result delivered to the provider",
        targets,
        "the session runs no run_command",
    )
    if target is None:
        return
    point, operation = fault_key(target), target.payload.operation_id
    home = drill.home("kill-before-delivery")
    env = drill.environment(home)
    reached, before = drill.kill_run_at(home, env, point)
    undelivered = reached and bool(before) and fault_key(before[-1]) == point
    drill.check(
        "SIGKILL between a tool's recorded result and its delivery to the provider",
        undelivered and not deliveries(before, operation),
        f"killed at {point}; the record ends with seq {len(before)}; nothing delivered",
    )
    result, after, resumed_s = drill.resume(home, env)
    same = drill.same_deliverables(reference, after, BEFORE_DELIVERY)
    done = result.returncode == 0 and completed(after) and same
    drill.check(
        "the resumed session delivers the result and completes with the same deliverables",
        done,
        ended(result, f"exit {result.returncode}; {deliverables(after)}"),
    )
    provider_ok = resumed_checks(drill, home, before, after, operation)
    reran = [e for e in after if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation]
    drill.check(
        "the tool did not run again", len(reran) == 1, f"{len(reran)} results recorded for {operation}"
    )
    sent = deliveries(after, operation)
    observed = (
        f"attempt {sent[0].actor.attempt} delivered the result recorded at seq {target.seq} under key "
        f"{sent[0].payload.idempotency_key}"
        if sent
        else f"no delivery: {drill.handover_to} read the result from the record"
        if drill.handover_to
        else "never delivered"
    )
    drill.report_point(
        BEFORE_DELIVERY,
        point,
        before,
        after,
        f"the result of {operation}, recorded before the kill, is delivered once by the next attempt "
        "under its record-derived key; the tool does not run again; the same remote session completes"
        if not drill.handover_to
        else f"the result of {operation}, recorded before the kill, reaches {drill.handover_to} from the "
        "record; the tool does not run again; the session completes there",
        observed,
        done and provider_ok and len(reran) == 1,
        resumed_s,
    )


# --------------------------------------------------------------------------------------------------
# A kill right after an unsafe request, its outcome unknown


def unknown_external_outcome(drill: Drill, reference: list[Event]) -> None:
    unsafe = [e for e in reference if isinstance(e, ToolRequestEvent) and e.payload.effect == "unsafe"]
    if not unsafe:
        drill.skip(AFTER_UNSAFE, "the session makes no unsafe external operation to interrupt")
        return
    drill.check(
        "the session has an unsafe external operation",
        True,
        f"{unsafe[0].payload.tool} ({unsafe[0].payload.operation_id})",
    )
    request = unsafe[0]
    op = request.payload.operation_id
    home = drill.home("unknown-outcome")
    env = drill.environment(home)
    reached, before = drill.kill_run_at(home, env, fault_key(request))
    page_before = read_page(home, drill.session_id)

    def while_it_waits() -> None:  # the page after the resume, as it waits on the person
        page = read_page(home, drill.session_id)
        events = read_events(home, drill.session_id)
        after = after_resume(page, page_before, home, events, len(before))
        drill.pages.append(
            BeforeAfter(scenario=AFTER_UNSAFE, before=before_resume(page_before, home), after=after)
        )

    # The external system cannot be asked: its outcome stays unknown.
    waiting = run_until_event(
        home,
        drill.resume_args(home, "--no-ticket-service"),
        drill.session_id,
        f"wait:reconcile-{op}",
        RUN_TIMEOUT_S,
        environment=env,
        when_reached=while_it_waits,
    )
    events = read_events(home, drill.session_id)
    unknown = [e for e in events if isinstance(e, OperationOutcomeEvent) and e.payload.outcome == "unknown"]
    requests = [e for e in events if isinstance(e, ToolRequestEvent) and e.payload.operation_id == op]
    results = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == op]
    brief = run_belay(home, "brief", drill.session_id)
    shown = drill.check(
        "an unknown external outcome is shown for reconciliation, not repeated",
        reached
        and waiting
        and bool(unknown)
        and len(requests) == 1
        and not results
        and tickets_in(home, drill.session_id) == 0
        and op in brief.stdout,
        f"{op}: outcome unknown, waits on the user (reconcile-{op}); requests {len(requests)}, "
        f"results {len(results)}, tickets {tickets_in(home, drill.session_id)}",
    )
    answer = run_belay(home, "reject", drill.session_id, f"reconcile-{op}", "-m", "no ticket exists")
    result, after, resumed_s = drill.resume(home, env)
    one = drill.check(
        "after the user reconciles it, the session completes with exactly one ticket",
        answer.returncode == 0 and result.returncode == 0 and tickets_in(home, drill.session_id) == 1,
        ended(result, f"tickets {tickets_in(home, drill.session_id)}, exit {result.returncode}"),
    )
    passed = shown and one
    passed = resumed_checks(drill, home, before, after, op) and passed
    drill.report_point(
        AFTER_UNSAFE,
        fault_key(request),
        before,
        after,
        f"{op} is never repeated blindly: its outcome is unknown until a person reconciles it; "
        "rejected, it runs once and the session completes with one ticket",
        f"outcome unknown and waiting: {bool(unknown) and waiting}; tickets after the reconciliation "
        f"{tickets_in(home, drill.session_id)}; {'completed' if completed(after) else 'not completed'}",
        passed,
        resumed_s,
    )


# --------------------------------------------------------------------------------------------------
# A kill after a verified checkpoint, with nothing declared


def requests_after_first_verified_checkpoint(reference: Sequence[Event]) -> list[ToolRequestEvent]:
    """The first verified checkpoint whose verification looks at the workspace, then the next
    requests of the same subagent: a restore from it needs what the work produced."""
    verified = [
        e
        for e in reference
        if isinstance(e, CheckpointEvent)
        and e.payload.verified
        and not e.payload.checkpoint_id.endswith("/inputs")
    ]
    return [
        e
        for e in reference
        if isinstance(e, ToolRequestEvent)
        and verified
        and e.seq > verified[0].seq
        and e.payload.subagent == verified[0].payload.subagent
    ]


def undeclared_state(drill: Drill, reference: list[Event]) -> None:
    manifest = json.loads(json.dumps(drill.data))
    for sub in manifest["spec"]["subagents"]:
        sub["declared"] = []  # nothing the work produced survives a sandbox replacement
    home = drill.home("undeclared-state")
    env = drill.environment(home)
    copy = home / "session-undeclared.yaml"
    copy.write_text(yaml.safe_dump(manifest, sort_keys=False))
    request = first_kill_point(
        drill,
        UNDECLARED,
        "a verified checkpoint followed by more work",
        requests_after_first_verified_checkpoint(reference),
        "no work follows a verified checkpoint",
    )
    if request is None:
        return
    reached, before = drill.kill_run_at(home, env, fault_key(request), manifest=copy)
    result, events, resumed_s = drill.resume(home, env)
    failed = [
        e
        for e in events
        if isinstance(e, LifecycleEvent)
        and e.payload.kind == "recovery_failed"
        and e.payload.reason == "UndeclaredState"
    ]
    brief = run_belay(home, "brief", drill.session_id)
    if drill.handover_to:
        handover_checks(drill, before, events)
    passed = drill.check(
        "a recovery that needs an undeclared file fails visibly (RecoveryFailed UndeclaredState)",
        reached and result.returncode != 0 and bool(failed) and "UndeclaredState" in brief.stdout,
        failed[0].payload.detail
        if failed
        else ended(result, f"exit {result.returncode}: {result.stderr[-300:]}"),
    )
    drill.report_point(
        UNDECLARED,
        fault_key(request),
        before,
        events,
        "the restore cannot reproduce the verified checkpoint: RecoveryFailed (UndeclaredState), visibly",
        failed[0].payload.detail if failed else f"no recovery_failed event; exit {result.returncode}",
        passed,
        resumed_s,
    )
