"""The drill of a coordinator: its child sessions do the work, so the drill interrupts them.

A coordinator's own record holds only the starting and the awaiting of its children
(`start_session`, `await_session`); the steps, the sandbox calls and the deliverables are in each
child's record, in the same home. For each child, the drill runs the coordinator (`belay run`,
which starts the children in processes of the same process group), kills the whole group as soon
as that child's record holds its first sandbox tool request, and resumes the coordinator
(`belay resume`, which starts again whatever child has not ended). The kill is made from outside,
as soon as the drill reads the point in the child's record (the children do not inherit the
harness's stop point), so the child may have gone a few events past it: the report names the
event its record ended with. Every run is watched with the children's records
(`belay.local.drill.waiting`): a wait in a child is named, or answered with `--answer-waits`.

Then the checks read every session of the objective, each named where it differs: every session
completed; no session ran a completed step (or an operation) twice; no unsafe call ran twice nor
filed more tickets than the uninterrupted run; and every deliverable the uninterrupted run left,
in the coordinator's record (the children's, collected) and in each child's, is there with the
same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from belay.harness.attempt import fault_key
from belay.journal.events import Event, ToolRequestEvent, ToolResultEvent
from belay.journal.verdicts import completed, deliverables, steps_run_twice
from belay.local.cli_process import read_events, tickets_in
from belay.local.drill.run import Drill
from belay.local.drill.waiting import Stalled

CHILD_REQUEST = "kill in a child session after a tool request"
SANDBOX_TOOLS = ("write_file", "run_command")


def sessions_of(drill: Drill) -> list[str]:
    return [drill.session_id, *drill.children]


def records(home: Path, sessions: Sequence[str]) -> dict[str, list[Event]]:
    return {session: read_events(home, session) for session in sessions}


def drill_children(drill: Drill, reference_home: Path) -> None:
    """One scenario per child: killed right after its first sandbox tool request, the coordinator
    resumed, every session of the objective checked."""
    reference = records(reference_home, sessions_of(drill))
    for child in drill.children:
        scenario = f"{CHILD_REQUEST} ({child})"
        requests = [
            e for e in reference[child] if isinstance(e, ToolRequestEvent) and e.payload.tool in SANDBOX_TOOLS
        ]
        if not requests:
            drill.skip(scenario, f"the child session {child} makes no sandbox tool request")
            continue
        try:
            kill_in_child(drill, scenario, child, fault_key(requests[0]), reference)
        except Exception as error:
            drill.check(f"{scenario}: the scenario ran to its end", False, f"it broke off: {error}")


def kill_in_child(
    drill: Drill, scenario: str, child: str, point: str, reference: dict[str, list[Event]]
) -> None:
    home = drill.home(f"kill-in-{child}")
    env = drill.environment(home)
    run = ["run", "--quiet", str(drill.manifest)]
    killed = drill.watch(home, run, env, kill_when=(child, point))
    if killed.stalled:
        raise Stalled(f"before {child} recorded {point}, {killed.stalled}")
    reached = killed.reached
    before = read_events(home, child)
    last = fault_key(before[-1]) if before else "nothing"
    drill.check(
        f"SIGKILL of the objective's processes once {child} has requested a sandbox tool",
        reached,
        f"killed once {child}'s record held {point}; its record ends at seq {len(before)} ({last})",
    )
    result, _, resumed_s = drill.resume(home, env)
    after = records(home, sessions_of(drill))
    unfinished = [s for s, events in after.items() if not completed(events)]
    done = result.returncode == 0 and not unfinished
    detail = f"{', '.join(after)} completed"
    if not done:
        detail = result.stalled or f"exit {result.returncode}; not completed: {', '.join(unfinished) or '-'}"
    drill.check("the resumed coordinator and every child session complete", done, detail)
    redone = [f"{s}: {', '.join(twice)}" for s, events in after.items() if (twice := steps_run_twice(events))]
    once = drill.check(
        "no session ran a completed step or an operation twice",
        not redone,
        "; ".join(redone) or "each step and operation once in every session",
    )
    repeated = unsafe_repeated(home, reference, after)
    safe = drill.check(
        "no unsafe call ran twice in any session",
        not repeated,
        "; ".join(repeated) or "each unsafe call at most once, tickets as in the uninterrupted run",
    )
    differ = deliverables_differing(reference, after)
    drill.differing += [f"{scenario}: {d}" for d in differ]
    owed = drill.check(
        "every deliverable is there, collected by the coordinator, with the uninterrupted run's bytes",
        not differ,
        "; ".join(differ) or ", ".join(f"{s}: {sorted(deliverables(events))}" for s, events in after.items()),
    )
    drill.report_point(
        scenario,
        point,
        before,
        after[child],
        f"{child} resumes from its record; nothing verified is redone, no unsafe call repeated, and the "
        "coordinator collects every deliverable with the same bytes",
        f"{child}'s record ended at {last} when killed; "
        + ("every session completed" if not unfinished else f"not completed: {', '.join(unfinished)}"),
        done and once and safe and owed,
        resumed_s,
    )


def unsafe_repeated(
    home: Path, reference: Mapping[str, list[Event]], after: Mapping[str, list[Event]]
) -> list[str]:
    """Per session: each unsafe operation answered more than once, and more tickets than the
    uninterrupted run filed."""
    found: list[str] = []
    for session, events in after.items():
        unsafe = {
            e.payload.operation_id
            for e in events
            if isinstance(e, ToolRequestEvent) and e.payload.effect == "unsafe"
        }
        for op in sorted(unsafe):
            results = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == op]
            if len(results) > 1:
                found.append(f"{session}: {op} answered {len(results)} times")
        expected = sum(
            1
            for e in reference.get(session, [])
            if isinstance(e, ToolRequestEvent) and e.payload.tool == "create_ticket"
        )
        if tickets_in(home, session) > expected:
            found.append(
                f"{session}: {tickets_in(home, session)} tickets, the uninterrupted run filed {expected}"
            )
    return found


def deliverables_differing(
    reference: Mapping[str, list[Event]], after: Mapping[str, list[Event]]
) -> list[str]:
    """Per session, each deliverable of the uninterrupted run missing after the resume, or there
    with other bytes."""
    found: list[str] = []
    for session, events in reference.items():
        now = deliverables(after.get(session, []))
        for name, sha256 in sorted(deliverables(events).items()):
            if name not in now:
                found.append(f"{session}: {name} missing")
            elif now[name] != sha256:
                found.append(
                    f"{session}: {name} differs (sha256 {now[name][:12]}, uninterrupted {sha256[:12]})"
                )
    return found
