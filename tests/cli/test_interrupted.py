"""SIGKILL `belay run` and ask the very next command where the session stands.

Right after each kill, before any resume, `belay brief --json` must say `Interrupted`, give the
exact resume command, show no operation as running, and still list the pending approvals and
reviews; and no process of the killed run's sandboxes may be alive once that command has run.

The kill points are events of an uninterrupted run, drawn by a seeded random generator: the seed
is printed (and named in every failure), and `BELAY_KILL_SEED=<seed>` replays the same points.
The harness stops itself right after recording the chosen event (BELAY_FAULT_STOP_AFTER); the test
counts the run's processes while it is stopped, then kills the `belay run` process alone (not its
process group), as `kill -9 <pid>` would.

Processes are counted without trusting the sandbox's own bookkeeping alone: the pids its server
records name, every descendant of those (from each process's parent pid in /proc), and every
process whose working directory or command line lies in the run's home.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from belay.harness.attempt import fault_key
from belay.journal.events import Event, Lifecycle, LifecycleKind, UserInput, WaitKind
from belay.journal.recovery import recovery_plan
from belay.journal.state import fold
from belay.lifetime import process_table
from tests.belay_cli import read_events, run_belay, start_belay, wait_until_stopped
from tests.cli.test_decisions import SESSION as DECISIONS
from tests.cli.test_decisions import write
from tests.cli.test_follow import dead_holder, take_lease
from tests.harness.example import MANIFEST, SESSION, run_example
from tests.testenv.polling import settle

KILLS = 20
SEED_ENV = "BELAY_KILL_SEED"
# How long the kernel may take to kill a walled sandbox after its harness died.
DEATH_SETTLE_S = 5.0
STOP_TIMEOUT_S = 120.0  # a guard against a hang, never a timing assertion
RESUME = f"belay resume {SESSION}"
SETTLED_ON_RESUME = "interrupted, will be settled on resume: "


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[Event]:
    result, events = run_example(tmp_path_factory.mktemp("reference"), "--quiet")
    assert result.returncode == 0, result.stderr
    return events


def kill_points(events: list[Event]) -> list[str]:
    """Every event the harness records before it ends the session, by its fault key (the first
    event with a key is where a stop lands)."""
    points: list[str] = []
    for event in events:
        if event.type == "lifecycle" and event.payload.kind == "session_completed":
            break
        if event.actor.kind == "harness":
            points.append(fault_key(event))
    return list(dict.fromkeys(points))


# --------------------------------------------------------------------------------------------------
# Counting processes


@dataclass(frozen=True)
class Process:
    pid: int
    start: int  # clock ticks since boot: a pid given to another process later does not match


def lies_in(pid: int, home: Path) -> bool:
    root = str(home)
    try:
        if os.readlink(f"/proc/{pid}/cwd").startswith(root):
            return True
        return root.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def run_processes(home: Path, *, besides: set[int]) -> set[Process]:
    """The run's sandbox processes: the pids the server records name, their descendants, and
    whatever works in or names the home. `besides`: pids that are not the run's sandboxes."""
    table = process_table()
    recorded = set()
    for record in home.glob("sessions/*/sandboxes/*/server.json"):
        try:
            pid = json.loads(record.read_text()).get("pid")
        except (OSError, ValueError):  # being written or removed: the other signs still count
            continue
        if pid in table:
            recorded.add(pid)
    found = recorded | {pid for pid in table if lies_in(pid, home)}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    frontier = list(found)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return {Process(pid, table[pid][1]) for pid in found - besides if pid in table}


def still_alive(processes: set[Process]) -> set[Process]:
    table = process_table()
    return {p for p in processes if p.pid in table and table[p.pid][1] == p.start}


# --------------------------------------------------------------------------------------------------
# One kill


@dataclass
class Kill:
    point: str
    before_kill: set[Process]  # the run's sandbox processes while the harness was stopped
    after_kill: set[Process]  # those still alive once the harness was dead
    brief: subprocess.CompletedProcess[str]
    events: list[Event]


def kill_run_at(point: str, home: Path, *style: str) -> Kill:
    process = start_belay(home, "run", "--quiet", str(MANIFEST), stop_after=point)
    try:
        wait_until_stopped(process, point, timeout=STOP_TIMEOUT_S)
        before = run_processes(home, besides={os.getpid(), process.pid})
        os.kill(process.pid, signal.SIGKILL)  # the `belay run` process alone
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # A walled sandbox dies with the harness (bubblewrap's --die-with-parent): the kernel delivers
    # that kill on its own time, so let it land before asking who is left for `belay` to stop.
    after = settle(
        lambda: still_alive(before), until=lambda left: not left, timeout=DEATH_SETTLE_S, interval=0.05
    )
    brief = run_belay(home, "brief", SESSION, *style)
    return Kill(point, before, after, brief, read_events(home, SESSION))


def problems_after(kill: Kill, home: Path) -> list[str]:
    """What the brief and the process table get wrong right after one kill."""
    problems = []
    brief = json.loads(kill.brief.stdout)
    state = fold(kill.events)
    if brief["phase"] != "Interrupted":
        problems.append(f"phase {brief['phase']}")
    interruption = brief["interruption"] or {}
    if interruption.get("command") != RESUME:
        problems.append(f"resume command {interruption.get('command')!r}")
    if brief["running"]:
        problems.append(f"shown running: {brief['running']}")
    open_operations = {a.operation_id for a in recovery_plan(state).actions} - set(state.unknown_outcomes)
    settled = {o["operation_id"]: o["settled"] for o in interruption.get("operations", [])}
    if set(settled) != open_operations or not all(s.startswith(SETTLED_ON_RESUME) for s in settled.values()):
        problems.append(f"interrupted operations {settled}, expected {sorted(open_operations)}")
    approvals = [a["id"] for a in brief["waiting_on_you"] if a["kind"] == "approval"]
    if approvals != [a.approval_id for a in state.pending_approval_records()]:
        problems.append(f"approvals {approvals}")
    reviews = [r["name"] for r in brief["ready_for_review"]]
    expected_reviews = [w.artifact for w in state.open_wait_records() if w.kind == WaitKind.READY_FOR_REVIEW]
    if reviews != expected_reviews:
        problems.append(f"reviews {reviews}, expected {expected_reviews}")
    survivors = still_alive(kill.before_kill) | run_processes(home, besides={os.getpid()})
    if survivors:
        problems.append(f"alive after `belay brief`: {sorted(p.pid for p in survivors)}")
        for survivor in survivors:  # this test started them: it does not leave them running
            with contextlib.suppress(ProcessLookupError):
                os.kill(survivor.pid, signal.SIGKILL)
    if kill.after_kill and "sandbox process(es) it left running" not in kill.brief.stderr:
        problems.append(f"stopped {len(kill.after_kill)} processes without saying so: {kill.brief.stderr!r}")
    return [f"{kill.point}: {p}" for p in problems]


@pytest.mark.slow
def test_right_after_any_kill_the_brief_says_interrupted_and_no_sandbox_outlives_it(
    reference: list[Event], tmp_path: Path
) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    print(f"kill points drawn with {SEED_ENV}={seed}")
    points = random.Random(seed).sample(kill_points(reference), KILLS)
    problems = []
    counted = 0
    for number, point in enumerate(points):
        home = tmp_path / f"kill-{number}"
        kill = kill_run_at(point, home, "--json")
        assert kill.brief.returncode == 0, f"{SEED_ENV}={seed} {point}: {kill.brief.stderr}"
        problems += problems_after(kill, home)
        counted += bool(kill.before_kill)
    assert not problems, f"{SEED_ENV}={seed}\n" + "\n".join(problems)
    # The count sees the sandboxes at all: most points lie after both sandbox servers started.
    assert counted, f"{SEED_ENV}={seed}: no kill point had a sandbox process to count"


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["tool_request:researcher.diagnose.4", "approval_request:implementer.publish.3"]
)
def test_the_brief_after_a_kill_tells_a_person_what_happened_and_what_to_run(
    point: str, tmp_path: Path
) -> None:
    kill = kill_run_at(point, tmp_path, "--json")
    json_brief = json.loads(kill.brief.stdout)
    text = run_belay(tmp_path, "brief", SESSION).stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"Session {SESSION}: Interrupted (attempt 1")
    assert json_brief["interruption"]["since"] is not None
    assert lines[1].startswith("Interrupted since "), lines[1]
    assert ": attempt 1 is gone: its harness process " in lines[1], lines[1]
    assert lines[1].endswith(" no longer exists"), lines[1]
    assert f"run: {RESUME}" in text
    assert "Running now\n  nothing: attempt 1 is interrupted (see above)" in text
    for operation in json_brief["interruption"]["operations"]:
        assert f"operation {operation['operation_id']} ({operation['tool']}" in text
    if point.startswith("tool_request:researcher.diagnose.4"):
        # The ticket may or may not have been filed: resume never files it blindly.
        assert (
            "operation researcher.diagnose.4 (create_ticket [researcher]): interrupted, will be settled "
            "on resume: unsafe: never repeated; its outcome is recorded unknown and probed, and if the "
            "probe cannot tell, you reconcile it"
        ) in text
    else:
        waiting = text.split("Waiting on you\n", 1)[1].split("\nWaiting on external", 1)[0]
        assert "approval approve-implementer.publish.3" in waiting
        assert f"run: belay approve {SESSION} approve-implementer.publish.3" in waiting
        review = text.split("Ready for review\n", 1)[1].split("\nHypotheses", 1)[0]
        assert "report.md" in review and f"belay artifacts get {SESSION} report.md" in review
        assert (
            "operation implementer.publish.3 (publish_deliverable [implementer]): interrupted, will be "
            "settled on resume: idempotent: runs again under the same operation id"
        ) in text
    resources = text.split("Resources\n", 1)[1]
    assert "sandbox implementer: not running (profile none); started by attempt 1" in resources
    assert "budget maxModelCalls: " in resources and " left of 200" in resources


@pytest.mark.slow
def test_a_terminated_run_stops_its_sandboxes_on_the_way_out(tmp_path: Path) -> None:
    """SIGTERM (or SIGHUP) leaves the attempt time to stop its sandboxes: none is left for the
    next command to find."""
    process = start_belay(
        tmp_path, "run", "--quiet", str(MANIFEST), stop_after="tool_request:implementer.fix.1"
    )
    try:
        wait_until_stopped(process, "tool_request:implementer.fix.1", timeout=STOP_TIMEOUT_S)
        sandboxes = run_processes(tmp_path, besides={os.getpid(), process.pid})
        assert sandboxes, "no sandbox process to stop"
        os.kill(process.pid, signal.SIGTERM)
        os.kill(process.pid, signal.SIGCONT)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not still_alive(sandboxes)
    assert not list(tmp_path.glob("sessions/*/sandboxes/*/server.json"))
    assert (
        "stopped by SIGTERM; continue with `belay resume parser-fix`" in (tmp_path / "belay.log").read_text()
    )


def test_after_a_failed_recovery_the_brief_and_sessions_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per session
    write(
        tmp_path,
        UserInput(goal="fix the parser"),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
        Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2),
        Lifecycle(
            kind=LifecycleKind.RECOVERY_FAILED,
            attempt=2,
            reason="UndeclaredState",
            detail="re-running `make test` exited 1, the checkpoint recorded 0",
        ),
        Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=2, reason="UndeclaredState"),
    )
    take_lease(tmp_path, dead_holder())
    brief = json.loads(run_belay(tmp_path, "brief", DECISIONS, "--json").stdout)
    assert brief["phase"] == "RecoveryFailed" and brief["interruption"] is None
    assert brief["recovery"]["last_failure"].startswith("UndeclaredState: re-running `make test`")
    listing = run_belay(tmp_path, "sessions").stdout
    row = next(line for line in listing.splitlines() if DECISIONS in line)
    assert "RecoveryFailed" in row and "recovery failed: UndeclaredState" in row
