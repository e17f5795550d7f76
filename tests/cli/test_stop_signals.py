"""Stop `belay run` as a person or a supervisor does: SIGTERM, or Ctrl-C at its terminal.

At each of 20 moments of an uninterrupted run, drawn by a seeded random generator (the seed is
printed and named in every failure; `BELAY_STOP_SEED=<seed>` replays them), the run gets the signal
and must: exit within its bound (the drain plus the margin after it) with 128 + the signal, leave no
process of the run alive, have recorded a clean stop (`harness_stopped`, naming the signal), and
then `belay resume` must complete the session without treating any call as an unknown outcome
(none that had finished before the signal, and, as nothing is cut off within the bound, none at
all), and without running a finished call again.

A moment is an event of the reference run: the harness stops itself right after recording it
(BELAY_FAULT_STOP_AFTER), the signal is sent while it is stopped, and it continues; calls it had
dispatched before that event are in flight when the signal is handled.

Ctrl-C goes through a pseudo-terminal: `belay run` is the terminal's foreground process group and
the test types the interrupt character, as a person does; typed twice, the run stops at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import random
import select
import signal
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from belay.harness.attempt import FAULT_ENV, fault_key
from belay.harness.stopping import DRAIN_ENV, STOP_MARGIN_S
from belay.journal.events import Event, Lifecycle, LifecycleKind
from belay.journal.state import fold
from belay.lifetime import die_with_parent
from tests.belay_cli import (
    belay_command,
    belay_environment,
    is_stopped,
    read_events,
    run_belay,
    wait_until_stopped,
)
from tests.cli.test_interrupted import Process, kill_points, run_processes, still_alive
from tests.harness.example import MANIFEST, SESSION, run_example
from tests.testenv.polling import wait_until
from tests.testenv.processes import pid_cmdline

STOPS = 20
SEED_ENV = "BELAY_STOP_SEED"
DRAIN_S = 20.0
BOUND_S = DRAIN_S + STOP_MARGIN_S  # the contract: a pod's grace period is this
REACH_TIMEOUT_S = 120.0  # a guard against a hang, never a timing assertion
RESUME = f"belay resume {SESSION}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[Event]:
    result, events = run_example(tmp_path_factory.mktemp("reference"), "--quiet")
    assert result.returncode == 0, result.stderr
    return events


def moments(reference: list[Event], count: int) -> tuple[int, list[str]]:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    print(f"stop moments drawn with {SEED_ENV}={seed}")
    return seed, random.Random(seed).sample(kill_points(reference), count)


@dataclass
class Stopped:
    point: str
    status: int
    took_s: float  # from the signal to the exit
    output: str
    left: set[Process]  # processes of the run still alive after it exited
    events: list[Event]


def start_run(
    home: Path,
    point: str | None,
    *,
    terminal: int | None = None,
    manifest: Path = MANIFEST,
    drain_s: float = DRAIN_S,
) -> subprocess.Popen[bytes]:
    """`belay run`, stopped right after recording `point` (if any); on `terminal` (a pty's
    follower side) as its foreground process group, else with its output in a log."""
    home.mkdir(parents=True, exist_ok=True)
    env = belay_environment({DRAIN_ENV: str(drain_s)})
    if point is not None:
        env[FAULT_ENV] = point
    argv = belay_command(home, "run", "--quiet", str(manifest))
    tie = die_with_parent()
    if terminal is None:
        log = (home / "belay.log").open("ab")
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=tie,
        )

    def take_terminal() -> None:
        # A session of its own whose controlling terminal is the pty: Ctrl-C typed there
        # signals its foreground process group, which is this one.
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
        tie()

    return subprocess.Popen(
        argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env, preexec_fn=take_terminal
    )


def reap(process: subprocess.Popen[bytes]) -> int:
    try:
        return process.wait(timeout=BOUND_S + REACH_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def signal_stopped_run(
    process: subprocess.Popen[bytes], home: Path, point: str, deliver: Callable[[], None]
) -> tuple[int, float, set[Process]]:
    """Once the run stopped itself at `point`: `deliver` the signal, let it go on, and wait for it.
    Returns its exit status, the time from the signal to its exit, and its processes left alive."""
    try:
        wait_until_stopped(process, point, timeout=REACH_TIMEOUT_S)
        before = run_processes(home, besides={os.getpid(), process.pid})
        deliver()
        signalled = time.monotonic()
        os.kill(process.pid, signal.SIGCONT)
        status = reap(process)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return status, took, still_alive(before) | run_processes(home, besides={os.getpid()})


def stop_with_sigterm(home: Path, point: str) -> Stopped:
    process = start_run(home, point)
    status, took, left = signal_stopped_run(
        process, home, point, lambda: os.kill(process.pid, signal.SIGTERM)
    )
    output = (home / "belay.log").read_text(errors="replace")
    return Stopped(point, status, took, output, left, read_events(home, SESSION))


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every process holding the follower side has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def stop_with_ctrl_c(home: Path, point: str) -> Stopped:
    leader, follower = pty.openpty()
    try:
        interrupt = termios.tcgetattr(follower)[6][termios.VINTR]
        process = start_run(home, point, terminal=follower)
        os.close(follower)

        def type_ctrl_c() -> None:  # at the run's terminal, as a person does
            os.write(leader, interrupt)

        status, took, left = signal_stopped_run(process, home, point, type_ctrl_c)
        output = read_all(leader).decode(errors="replace")
    finally:
        os.close(leader)
    return Stopped(point, status, took, output, left, read_events(home, SESSION))


def harness_stops(events: list[Event]) -> list[Lifecycle]:
    return [
        e.payload
        for e in events
        if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.HARNESS_STOPPED
    ]


def describe(pid: int) -> str:
    """A process as a person reads it: its pid and its command line, while it lasts."""
    argv = pid_cmdline(pid)
    return f"{pid} ({' '.join(argv)[:200]})" if argv else str(pid)


def problems_after_stop(stopped: Stopped, number: signal.Signals) -> list[str]:
    problems = []
    if stopped.status != 128 + number:
        problems.append(f"exit status {stopped.status}, expected {128 + number}\n{stopped.output}")
    if stopped.took_s >= BOUND_S:
        problems.append(f"exited {stopped.took_s:.1f}s after the signal, beyond its {BOUND_S:g}s bound")
    if stopped.left:
        left = sorted(p.pid for p in stopped.left)
        problems.append(f"processes of the run left: {', '.join(describe(pid) for pid in left)}")
        for process in stopped.left:  # this test started them: it does not leave them running
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
    stops = harness_stops(stopped.events)
    if len(stops) != 1 or stops[0].reason != number.name or stops[0].attempt != 1:
        problems.append(f"recorded stops {stops}")
    if f"stopped by {number.name}; continue with `{RESUME}`" not in stopped.output:
        problems.append(f"no resume command in the output: {stopped.output!r}")
    return problems


def problems_after_resume(home: Path) -> list[str]:
    """`belay resume` completes; nothing that finished before the stop is unknown or run again."""
    before = read_events(home, SESSION)
    finished = {e.payload.operation_id for e in before if e.type == "tool_result"}  # type: ignore[union-attr]
    resumed = run_belay(home, "resume", SESSION, "--quiet", environment={DRAIN_ENV: str(DRAIN_S)})
    problems = []
    if resumed.returncode != 0:
        problems.append(f"resume exited {resumed.returncode}: {resumed.stderr}")
    events = read_events(home, SESSION)
    state = fold(events)
    if not state.lifecycle.completed:
        problems.append("the session did not complete on resume")
    unknown = sorted(
        e.payload.operation_id  # type: ignore[union-attr]
        for e in events
        if e.type == "operation_outcome" and e.payload.outcome == "unknown"  # type: ignore[union-attr]
    )
    if set(unknown) & finished:
        problems.append(
            f"finished before the stop, then treated as unknown: {sorted(set(unknown) & finished)}"
        )
    if unknown:
        problems.append(f"unknown outcomes after a clean stop: {unknown}")
    results: dict[str, int] = {}
    for e in events[len(before) :]:
        if e.type == "tool_result" and e.payload.operation_id in finished:  # type: ignore[union-attr]
            results[e.payload.operation_id] = results.get(e.payload.operation_id, 0) + 1  # type: ignore[union-attr]
    if results:
        problems.append(f"finished before the stop, run again on resume: {sorted(results)}")
    return problems


@pytest.mark.slow
def test_sigterm_at_any_moment_stops_cleanly_and_resume_completes(
    reference: list[Event], tmp_path: Path
) -> None:
    seed, points = moments(reference, STOPS)
    problems = []
    in_flight = 0
    for number, point in enumerate(points):
        home = tmp_path / f"stop-{number}"
        stopped = stop_with_sigterm(home, point)
        found = problems_after_stop(stopped, signal.SIGTERM) + problems_after_resume(home)
        problems += [f"{point}: {p}" for p in found]
        in_flight += any(s.operations for s in harness_stops(stopped.events))
    assert not problems, f"{SEED_ENV}={seed}\n" + "\n".join(problems)
    # The moments reach calls in flight at all: most lie while a sandbox command runs.
    assert in_flight, f"{SEED_ENV}={seed}: no stop had a call in flight"


@pytest.mark.slow
def test_ctrl_c_at_its_terminal_stops_cleanly_and_resume_completes(
    reference: list[Event], tmp_path: Path
) -> None:
    seed, points = moments(reference, STOPS)
    problems = []
    for number, point in enumerate(points):
        home = tmp_path / f"stop-{number}"
        stopped = stop_with_ctrl_c(home, point)
        found = problems_after_stop(stopped, signal.SIGINT) + problems_after_resume(home)
        if "Ctrl-C or SIGTERM again to stop at once" not in stopped.output:
            found.append(f"no word on stopping at once: {stopped.output!r}")
        problems += [f"{point}: {p}" for p in found]
    assert not problems, f"{SEED_ENV}={seed}\n" + "\n".join(problems)


SLOW_SESSION = "slow-call"
# A command that outlives any bound, with a child of its own that leaves its process group.
SLOW_COMMAND = "setsid sleep 600 & sleep 600"


def slow_manifest(directory: Path) -> Path:
    """A session whose one call runs for ten minutes."""
    directory.mkdir(parents=True, exist_ok=True)
    plan = {
        "subagents": {
            "worker": {
                "steps": [
                    {
                        "id": "wait",
                        "title": "Run a long command",
                        "actions": [
                            {"tool": "run_command", "arguments": {"command": ["sh", "-c", SLOW_COMMAND]}}
                        ],
                    }
                ]
            }
        }
    }
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SLOW_SESSION},
        "spec": {
            "request": {"goal": "run one long command"},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [{"name": "worker", "role": "runs it", "networkProfile": "none"}],
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def wait_for_the_slow_call(home: Path, process: subprocess.Popen[bytes]) -> set[Process]:
    """The run's processes once both sleeps of the slow call run."""

    def both_sleeps_run() -> set[Process] | None:
        found = run_processes(home, besides={os.getpid(), process.pid})
        sleeps = [p for p in found if command_line(p.pid).startswith(b"sleep\x00600")]
        return found if len(sleeps) == 2 else None

    return wait_until(
        both_sleeps_run,
        "both sleeps of the slow call",
        timeout=REACH_TIMEOUT_S,
        interval=0.02,
        while_running=process,
    )


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone since it was listed
        return b""


def read_until(fd: int, text: str, seen: bytearray) -> None:
    deadline = time.monotonic() + REACH_TIMEOUT_S
    while text.encode() not in seen:
        assert time.monotonic() < deadline, f"never printed {text!r}: {seen.decode(errors='replace')!r}"
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            seen += os.read(fd, 65536)


def slow_stop(events: list[Event]) -> Lifecycle:
    (stop,) = harness_stops(events)
    assert stop.operations == ("worker.wait.1",), stop
    return stop


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_cutting_off_the_call_in_flight(tmp_path: Path) -> None:
    manifest = slow_manifest(tmp_path / "manifest")
    home = tmp_path / "home"
    leader, follower = pty.openpty()
    interrupt = termios.tcgetattr(follower)[6][termios.VINTR]
    seen = bytearray()
    try:
        # A drain far beyond the test's patience: only the second Ctrl-C ends the stop.
        process = start_run(home, None, terminal=follower, manifest=manifest, drain_s=3600)
        os.close(follower)
        try:
            before = wait_for_the_slow_call(home, process)
            os.write(leader, interrupt)
            read_until(leader, "again to stop at once", seen)
            os.write(leader, interrupt)
            status = reap(process)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        seen += read_all(leader)
    finally:
        os.close(leader)
    output = seen.decode(errors="replace")
    assert status == 128 + signal.SIGINT, output
    assert "belay: stopping at once: calls still in flight are cut off" in output, output
    assert not still_alive(before) and not run_processes(home, besides={os.getpid()})
    stop = slow_stop(read_events(home, SLOW_SESSION))
    assert stop.reason == "SIGINT"
    assert "1 call cut off by a second SIGINT, without a result (worker.wait.1)" in stop.detail, stop.detail


@pytest.mark.slow
def test_a_call_still_running_at_the_bound_is_cut_off_and_the_run_exits(tmp_path: Path) -> None:
    manifest = slow_manifest(tmp_path / "manifest")
    home = tmp_path / "home"
    process = start_run(home, None, manifest=manifest, drain_s=1)
    try:
        before = wait_for_the_slow_call(home, process)
        os.kill(process.pid, signal.SIGTERM)
        signalled = time.monotonic()
        status = reap(process)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = (home / "belay.log").read_text()
    assert status == 128 + signal.SIGTERM, output
    assert took < 1 + STOP_MARGIN_S, f"exited {took:.1f}s after SIGTERM"
    assert not still_alive(before) and not run_processes(home, besides={os.getpid()})
    stop = slow_stop(read_events(home, SLOW_SESSION))
    assert stop.reason == "SIGTERM"
    assert "1 call cut off at the 1 s bound, without a result (worker.wait.1)" in stop.detail, stop.detail


# Every model answer of the example is recorded under this key: it recurs all through the run.
RECURRING_POINT = "model_output:"


def test_a_point_that_recurs_stops_the_run_once_so_a_continued_run_goes_on_to_its_end(
    tmp_path: Path,
) -> None:
    """The stops above let the run go on after the signal: stopped again at a later event with the
    same key, nothing would wake it, and it would never exit."""
    process = start_run(tmp_path, RECURRING_POINT)
    try:
        wait_until_stopped(process, RECURRING_POINT, timeout=REACH_TIMEOUT_S)
        os.kill(process.pid, signal.SIGCONT)

        def ended() -> bool:
            if process.poll() is not None:
                return True
            assert not is_stopped(process.pid), f"stopped itself again at a later {RECURRING_POINT}"
            return False

        wait_until(ended, "the continued run to end", timeout=REACH_TIMEOUT_S, interval=0.01)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = (tmp_path / "belay.log").read_text(errors="replace")
    assert process.returncode == 0, output
    events = read_events(tmp_path, SESSION)
    assert fold(events).lifecycle.completed
    assert sum(fault_key(e) == RECURRING_POINT for e in events) > 1  # it did recur after the stop


def test_the_brief_of_a_stopped_run_says_it_stopped_cleanly_and_how_to_resume(tmp_path: Path) -> None:
    stopped = stop_with_sigterm(tmp_path, "tool_request:implementer.fix.1")
    assert stopped.status == 128 + signal.SIGTERM, stopped.output
    text = run_belay(tmp_path, "brief", SESSION).stdout
    assert "stopped cleanly on SIGTERM" in text, text
    assert f"run: {RESUME}" in text, text
