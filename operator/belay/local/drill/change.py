"""The change drill (`belay drill --change`): the request changes, and the resumed session must
redo exactly what the change made invalid, reuse the rest, and deliver what an uninterrupted run of
the final request delivers.

Three scenarios, each in a fresh home, after two uninterrupted runs (the manifest as it is, and
the manifest with the changed request: the reference of the final request):

- amend while a step runs: the run is killed right after a sandbox call of a step that depends on
  what the change touches (after a step already done, where there is one), `belay amend`, `belay
  resume`;
- amend after the end: the run ends, `belay amend`, `belay resume`;
- reject a deliverable after the end: the run ends, `belay reject`, `belay resume`.

Each is judged by the same checks over every session of the objective (`belay.local.drill.
change_checks`), each naming the session, the step or the deliverable that differs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from belay.harness.attempt import fault_key
from belay.journal.events import ApprovalRequestEvent, Event, RejectionEvent, ToolRequestEvent
from belay.journal.state import fold
from belay.journal.verdicts import completed, deliverables, steps_depending_on, steps_done
from belay.local.cli_process import read_events, run_belay
from belay.local.drill.change_checks import Judged, judge_change, records, waits_on_unchanged_bytes
from belay.local.drill.report import DrillReport
from belay.local.drill.run import Drill
from belay.local.drill.scenarios import (
    INTERRUPTED,
    UNINTERRUPTED,
    broke_off,
    ended,
    nothing_interrupted,
    uninterrupted,
)
from belay.local.drill.waiting import Stalled

AMEND_DURING = "amend while a step runs"
AMEND_AFTER = "amend after the end"
REJECT_AFTER = "reject a deliverable after the end"
FINAL_REFERENCE = "uninterrupted run of the final request completes"
SANDBOX_TOOLS = ("write_file", "run_command")
# What the drill adds to the goal when it is told no other change: every step that reads the goal
# is invalid, the rest stays valid.
GOAL_ADDITION = "(Changed by the drill: the same work, for a request that changed.)"
REJECTION_REASON = "Rejected by the drill: do this step again."


@dataclass(frozen=True)
class Change:
    """What the drill changes: the goal and parts an amend sets (neither: the goal, with
    GOAL_ADDITION), and the deliverable a rejection turns down (None: one the drill picks)."""

    goal: str | None = None
    parts: dict[str, str] = field(default_factory=dict)
    reject: str | None = None

    def touched(self) -> set[str]:
        return ({"goal"} if self.goal is not None else set()) | set(self.parts)

    def amend_options(self) -> list[str]:
        options = ["--goal", self.goal] if self.goal is not None else []
        for key, value in self.parts.items():
            options += ["--part", f"{key}={value}"]
        return options


def parse_parts(parts: Sequence[str]) -> dict[str, str]:
    """`KEY=VALUE` options as a map; a malformed one is refused with its text."""
    parsed: dict[str, str] = {}
    for item in parts:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--change-part must be KEY=VALUE, got {item!r}")
        parsed[key.strip()] = value
    return parsed


def the_change(drill: Drill, change: Change) -> Change:
    """The change made concrete for this manifest: a goal to set when none was given."""
    if change.goal is None and not change.parts:
        goal = str(drill.data["spec"]["request"]["goal"]).strip()
        return Change(goal=f"{goal} {GOAL_ADDITION}", parts={}, reject=change.reject)
    return change


def final_manifest(drill: Drill, change: Change) -> Path:
    """The session's manifest with the changed request: what the reference of the final request runs."""
    data = json.loads(json.dumps(drill.data))
    request = data["spec"]["request"]
    if change.goal is not None:
        request["goal"] = change.goal
    if change.parts:
        request["parts"] = {**(request.get("parts") or {}), **change.parts}
    path = drill.workdir / f"session-{drill.executor}-changed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_change_drill(
    manifest: Path,
    workdir: Path,
    change: Change,
    *,
    progress: bool = True,
    executor: str | None = None,
    answer_waits: bool = False,
) -> DrillReport:
    drill = Drill(manifest, workdir, progress, executor, None, answer_waits)
    change = the_change(drill, change)
    try:
        reference: list[Event] | None = None
        final: dict[str, list[Event]] | None = None
        try:
            reference = uninterrupted(drill)
        except Exception as error:
            drill.check(UNINTERRUPTED, False, broke_off(error))
        try:
            final = final_reference(drill, change) if reference is not None else None
        except Exception as error:
            drill.check(FINAL_REFERENCE, False, broke_off(error))
        scenarios = (
            (AMEND_DURING, amend_during_a_step),
            (AMEND_AFTER, amend_after_the_end),
            (REJECT_AFTER, reject_after_the_end),
        )
        for scenario, run in scenarios:
            if reference is None or final is None:
                drill.skip(scenario, "not run: an uninterrupted run did not complete")
                continue
            try:
                run(drill, change, reference, final)
            except Exception as error:
                drill.check(f"{scenario}: the scenario ran to its end", False, broke_off(error))
        if reference is not None and final is not None and not drill.points:
            drill.check(INTERRUPTED, False, nothing_interrupted(drill))
    finally:
        drill.stop_standins()
    return drill.report()


def final_reference(drill: Drill, change: Change) -> dict[str, list[Event]] | None:
    """The manifest with the changed request, run to its end without a kill: every session's record."""
    home = drill.home("reference-final")
    env = drill.environment(home)
    result = drill.watch(home, ["run", "--quiet", str(final_manifest(drill, change))], env)
    final = records(home, drill)
    ok = result.returncode == 0 and all(completed(events) for events in final.values())
    detail = f"{', '.join(f'{s}: {sorted(deliverables(e))}' for s, e in final.items())}"
    if not ok:
        detail = ended(result, f"exit {result.returncode}: {(result.stderr or result.stdout)[-400:]}")
    return final if drill.check(FINAL_REFERENCE, ok, detail) else None


# --------------------------------------------------------------------------------------------------
# The three scenarios


def amend(drill: Drill, home: Path, env: dict[str, str] | None, change: Change) -> None:
    amended = run_belay(
        home,
        "amend",
        drill.session_id,
        *change.amend_options(),
        "-m",
        "the drill changes the request",
        "--by",
        "drill",
        environment=env,
    )
    if amended.returncode != 0:
        raise Stalled(f"`belay amend` failed: {(amended.stderr or amended.stdout).strip()[-300:]}")


def kill_point(drill: Drill, change: Change, reference: Sequence[Event]) -> ToolRequestEvent | None:
    """A sandbox call of a step that depends on what the change touches: preferably one made after
    another step was done (so that the resume has work to reuse), and in the first such step of
    its subagent (so that the step interrupted is the one the change reaches first)."""
    depending = steps_depending_on(reference, change.touched())
    first: dict[str, str] = {}  # subagent -> its first step that depends on the change
    for e in reference:
        if isinstance(e, ToolRequestEvent) and e.payload.step in depending and e.payload.subagent:
            first.setdefault(e.payload.subagent, e.payload.step)
    candidates = [
        e
        for e in reference
        if isinstance(e, ToolRequestEvent) and e.payload.tool in SANDBOX_TOOLS and e.payload.step in depending
    ]
    after_done = [e for e in candidates if steps_done([c for c in reference if c.seq < e.seq])]
    first_steps = [e for e in after_done if e.payload.step in first.values()]
    chosen = first_steps or after_done or candidates
    return chosen[0] if chosen else None


def amend_during_a_step(
    drill: Drill, change: Change, reference: list[Event], final: dict[str, list[Event]]
) -> None:
    request = kill_point(drill, change, reference)
    if request is None and drill.children:
        amend_while_a_child_works(drill, change, reference, final)
        return
    if request is None:
        touched = ", ".join(sorted(change.touched()))
        drill.skip(AMEND_DURING, f"no step that depends on {touched} makes a sandbox call")
        return
    point = fault_key(request)
    home = drill.home("amend-during-a-step")
    env = drill.environment(home)
    reached, before = drill.kill_run_at(home, env, point)
    drill.check(
        f"{AMEND_DURING}: SIGKILL while {request.payload.step} runs",
        reached and bool(before) and fault_key(before[-1]) == point,
        f"killed at {point}; the record ends with seq {len(before)}",
    )
    lengths = {session: len(events) for session, events in records(home, drill).items()}
    amend(drill, home, env, change)
    finish(drill, AMEND_DURING, home, env, lengths, final, point)


def amend_while_a_child_works(
    drill: Drill, change: Change, reference: list[Event], final: dict[str, list[Event]]
) -> None:
    """A coordinator's steps make no sandbox call: its children do the work. The objective's
    processes are killed once a child (one whose part the change touches, if any) has asked for its
    first sandbox call, as the children's drill does (`belay.local.drill.children`); then the
    coordinator's request is amended and the coordinator resumed."""
    parts = {
        str(e.payload.arguments.get("name")): str(e.payload.arguments.get("part"))
        for e in reference
        if isinstance(e, ToolRequestEvent) and e.payload.tool == "start_session"
    }
    children = records(drill.workdir / "reference", drill)
    working = {
        child: requests[0]
        for child in drill.children
        if (
            requests := [
                e
                for e in children[child]
                if isinstance(e, ToolRequestEvent) and e.payload.tool in SANDBOX_TOOLS
            ]
        )
    }
    if not working:
        drill.skip(AMEND_DURING, "no child session makes a sandbox call")
        return
    child = next((c for c in working if parts.get(c) in change.touched()), next(iter(working)))
    point = fault_key(working[child])
    home = drill.home("amend-during-a-step")
    env = drill.environment(home)
    killed = drill.watch(home, ["run", "--quiet", str(drill.manifest)], env, kill_when=(child, point))
    if killed.stalled:
        raise Stalled(f"before {child} recorded {point}, {killed.stalled}")
    before = read_events(home, child)
    drill.check(
        f"{AMEND_DURING}: SIGKILL while {child} runs {working[child].payload.step}",
        killed.reached,
        f"killed once {child}'s record held {point}; its record ends at seq {len(before)}",
    )
    lengths = {session: len(events) for session, events in records(home, drill).items()}
    amend(drill, home, env, change)
    finish(drill, AMEND_DURING, home, env, lengths, final, f"{child}: {point}")


def run_to_the_end(drill: Drill, home: Path, env: dict[str, str] | None) -> dict[str, int]:
    result = drill.watch(home, ["run", "--quiet", str(drill.manifest)], env)
    if result.returncode != 0 or result.stalled:
        raise Stalled(ended(result, f"the run before the change: exit {result.returncode}"))
    return {session: len(events) for session, events in records(home, drill).items()}


def amend_after_the_end(
    drill: Drill, change: Change, reference: list[Event], final: dict[str, list[Event]]
) -> None:
    home = drill.home("amend-after-the-end")
    env = drill.environment(home)
    lengths = run_to_the_end(drill, home, env)
    amend(drill, home, env, change)
    finish(drill, AMEND_AFTER, home, env, lengths, final, "the end of the run")


def rejected_deliverable(drill: Drill, change: Change, reference: Sequence[Event]) -> str | None:
    """The deliverable to reject: the one named, else the first the manifest's subagents owe whose
    publication asked for no approval (a new one would wait on the person), else the first of the
    others (a coordinator's collected ones by the order it started their children)."""
    published = deliverables(reference)
    if change.reject is not None:
        return change.reject
    owed = [str(s["deliverable"]) for s in drill.data["spec"]["subagents"] if s.get("deliverable")]
    state = fold(reference)
    approved = {e.payload.operation_id for e in reference if isinstance(e, ApprovalRequestEvent)}

    def free(name: str) -> bool:
        artifact = state.artifacts.get(name)
        return artifact is None or artifact.result_id not in approved

    # Collected deliverables (`<child>/<name>`) in the order the coordinator started their
    # children, never the order they were published in: two children race to publish, and the drill
    # must reject the same one on every run.
    started = {child: i for i, child in enumerate(drill.children)}
    others = sorted(
        (n for n in published if n not in owed),
        key=lambda n: (started.get(n.partition("/")[0], len(started)), n),
    )
    ordered = [n for n in owed if n in published] + others
    return next((n for n in ordered if free(n)), ordered[0] if ordered else None)


def reject_after_the_end(
    drill: Drill, change: Change, reference: list[Event], final: dict[str, list[Event]]
) -> None:
    name = rejected_deliverable(drill, change, reference)
    if name is None:
        drill.skip(REJECT_AFTER, "the session publishes no deliverable")
        return
    home = drill.home("reject-after-the-end")
    env = drill.environment(home)
    lengths = run_to_the_end(drill, home, env)
    rejected = run_belay(
        home, "reject", drill.session_id, name, "-m", REJECTION_REASON, "--by", "drill", environment=env
    )
    if rejected.returncode != 0:
        raise Stalled(f"`belay reject {name}` failed: {(rejected.stderr or rejected.stdout).strip()[-300:]}")
    # The final request is the first one: the reference is the uninterrupted run as it was, whose
    # rejected deliverable the resumed run must publish anew.
    original = records(drill.workdir / "reference", drill)
    finish(drill, REJECT_AFTER, home, env, lengths, original, f"the end of the run, {name} rejected", name)


def finish(
    drill: Drill,
    scenario: str,
    home: Path,
    env: dict[str, str] | None,
    lengths: dict[str, int],
    reference: dict[str, list[Event]],
    point: str,
    rejected: str | None = None,
) -> None:
    """Resume after the change and judge every session of the objective."""
    started = time.monotonic()
    result, _, _ = drill.resume(home, env)
    resumed_s = time.monotonic() - started
    after = records(home, drill)
    judged: Judged = judge_change(drill, scenario, home, lengths, reference, after, rejected)
    unchanged = rejected is not None and waits_on_unchanged_bytes(drill.session_id, after)
    done = drill.check(
        f"{scenario}: the resumed session completes",
        (result.returncode == 0 or unchanged) and not result.stalled,
        ended(result, f"exit {result.returncode}")
        + (
            "; the redo made the very bytes rejected, and the page waits on you for that" if unchanged else ""
        ),
    )
    own = after[drill.session_id]
    change_seq = next((e.seq for e in own if e.seq > lengths[drill.session_id] and is_change(e)), 0)
    drill.report_point(
        scenario,
        point,
        own[: lengths[drill.session_id]],
        own,
        "the steps the change made invalid are redone, the rest reused; the deliverables are those of an "
        "uninterrupted run of the final request; no unsafe call repeated; the page's phase proven",
        f"change at seq {change_seq}; " + judged.summary,
        done and judged.passed,
        resumed_s,
    )


def is_change(event: Event) -> bool:
    return event.type == "scope_change" or isinstance(event, RejectionEvent)
