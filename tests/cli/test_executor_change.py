"""`belay resume --executor TYPE [--model ID]`: the move is recorded as an event of its own and the
next attempt runs there; what cannot be done here is refused before anything is recorded.

The run is stopped by its own harness right after the first tool result of the fix step
(BELAY_FAULT_STOP_AFTER), then killed as a whole, as `kill -9` would leave it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from belay.journal.events import (
    Actor,
    Event,
    EventDraft,
    ExecutorChange,
    Lifecycle,
    LifecycleKind,
    Task,
    TaskStatus,
)
from belay.journal.operations import current_step_of
from belay.journal.state import fold
from belay.local.liveness import this_holder
from belay.local.runtime import LocalHome
from tests.belay_cli import (
    RUN_TIMEOUT_S,
    StandinProcess,
    kill_group,
    read_events,
    run_belay,
    start_belay,
    steps_run_twice,
    wait_until_stopped,
)
from tests.harness.example import EXAMPLE, MANIFEST, SESSION

PLAN = EXAMPLE / "plan.yaml"

# Inside a step: the implementer's first call of its fix step has its result.
STOP_POINT = "tool_result:implementer.fix.1"


def killed_inside_a_step(home: Path) -> Path:
    """`home` with its parser-fix session killed inside a step."""
    process = start_belay(home, "run", "--quiet", str(MANIFEST), stop_after=STOP_POINT)
    try:
        wait_until_stopped(process, STOP_POINT)
    finally:
        kill_group(process)
    return home


@pytest.fixture
def interrupted(tmp_path: Path) -> Path:
    return killed_inside_a_step(tmp_path / "home")


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One interrupted home for the refusals, which must leave it as it was."""
    return killed_inside_a_step(tmp_path_factory.mktemp("refusals") / "home")


def take_lease(home: Path) -> None:
    """Take the session's next lease for this process and renew it, as a live attempt does."""

    async def take() -> None:
        store = LocalHome(home).for_session(SESSION).open_event_store()
        try:
            lease = await store.acquire_lease(SESSION, this_holder())
            await store.renew_lease(SESSION, lease.number)
        finally:
            await store.close()

    asyncio.run(take())


def append(home: Path, payload: ExecutorChange) -> None:
    """Record the move as the operator would, beside the running attempt."""

    async def write() -> None:
        store = LocalHome(home).for_session(SESSION).open_event_store()
        try:
            await store.append(SESSION, [EventDraft(payload=payload, actor=Actor(kind="operator"))])
        finally:
            await store.close()

    asyncio.run(write())


def moves(events: list[Event]) -> list[ExecutorChange]:
    return [e.payload for e in events if isinstance(e.payload, ExecutorChange)]


def no_key_environment() -> dict[str, str]:
    """This environment without any provider configured, so that only a stand-in could stand in."""
    return {
        key: "" for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--executor", "gemini"], "no executor 'gemini'; the executors are: self-hosted, scripted"),
        (["--executor", "openai-agents"], "openai-agents needs a model: add --model ID"),
        (["--executor", "scripted", "--model", "gpt-5"], "--model does not apply to scripted"),
        (
            ["--executor", "openai", "--model", "gpt-5"],
            "openai is not configured here: set OPENAI_API_KEY (or OPENAI_BASE_URL",
        ),
    ],
)
def test_a_move_that_cannot_run_here_is_refused_and_nothing_is_recorded(
    untouched: Path, arguments: list[str], message: str
) -> None:
    before = read_events(untouched, SESSION)
    result = run_belay(untouched, "resume", SESSION, *arguments, environment=no_key_environment())
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: {message}" in result.stderr
    assert "nothing was recorded" in result.stderr
    assert read_events(untouched, SESSION) == before


def test_a_move_while_an_attempt_holds_the_lease_is_refused(interrupted: Path) -> None:
    # A live attempt: this test process holds the session's lease and renewed it just now.
    take_lease(interrupted)
    before = read_events(interrupted, SESSION)
    result = run_belay(interrupted, "resume", SESSION, "--executor", "openai-agents", "--model", "gpt-5")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"session {SESSION} has a live attempt" in result.stderr
    assert "stop it first" in result.stderr
    assert read_events(interrupted, SESSION) == before


def test_a_move_of_an_ended_session_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_belay(home, "run", "--quiet", str(MANIFEST)).returncode == 0
    before = read_events(home, SESSION)
    result = run_belay(home, "resume", SESSION, "--executor", "openai-agents", "--model", "gpt-5")
    assert result.returncode == 1
    assert f"session {SESSION} has ended (Succeeded): there is no next attempt to move" in result.stderr
    assert read_events(home, SESSION) == before


def test_a_move_recorded_while_an_attempt_runs_ends_it_at_the_next_step_boundary(tmp_path: Path) -> None:
    """As an edit of spec.executor does in a cluster: the operator records the move while the
    harness runs; each subagent finishes the step it is in, and the attempt stops cleanly."""
    home = tmp_path / "home"
    process = start_belay(home, "run", "--quiet", str(MANIFEST), stop_after=STOP_POINT)
    try:
        wait_until_stopped(process, STOP_POINT)
        running = fold(read_events(home, SESSION))
        assert current_step_of(running, "implementer") == "implementer/fix"  # inside a step
        in_progress = {t for t, task in running.tasks.items() if task.status == TaskStatus.RUNNING}
        move = ExecutorChange(
            from_type="scripted",
            to_type="openai-agents",
            to_model="gpt-5",
            executor={"type": "openai-agents", "model": "gpt-5", "plan": str(MANIFEST.parent / "plan.yaml")},
            at_seq=running.last_seq,
            by="kubectl-edit",
        )
        append(home, move)
        os.killpg(process.pid, signal.SIGCONT)
        process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_group(process)
    assert process.returncode == 1
    events = read_events(home, SESSION)
    stop = events[-1]
    assert isinstance(stop.payload, Lifecycle)
    assert (stop.payload.kind, stop.payload.reason) == (LifecycleKind.HARNESS_STOPPED, "ExecutorChanged")
    assert "the next attempt runs on openai-agents (gpt-5)" in stop.payload.detail
    state = fold(events)
    # Every subagent stopped between two steps: none is left inside one, none was cut off.
    assert not state.open_operations
    assert all(current_step_of(state, sub) is None for sub in ("researcher", "implementer"))
    assert not state.lifecycle.completed
    # ...and none began a step after the move: the steps to come run on the new executor.
    move_seq = next(e.seq for e in events if isinstance(e.payload, ExecutorChange))
    begun = {
        e.payload.task_id
        for e in events[move_seq:]
        if isinstance(e.payload, Task) and e.payload.status == TaskStatus.RUNNING
    }
    assert begun <= in_progress, begun - in_progress


def test_the_move_is_recorded_and_the_next_attempt_runs_on_the_new_executor(interrupted: Path) -> None:
    killed_at = read_events(interrupted, SESSION)[-1].seq
    result = run_belay(
        interrupted,
        "resume",
        SESSION,
        "--quiet",
        "--executor",
        "openai-agents",
        "--model",
        "gpt-5",
        "--reason",
        "trying the managed executor",
        environment=no_key_environment(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "moved from scripted to openai-agents (gpt-5)" in result.stderr
    events = read_events(interrupted, SESSION)
    [move] = moves(events)
    assert (move.from_type, move.to_type, move.to_model) == ("scripted", "openai-agents", "gpt-5")
    assert move.at_seq == killed_at
    assert move.by == "belay resume"
    assert move.reason == "trying the managed executor"
    assert move.executor["plan"] == str(interrupted / "sessions" / SESSION / "plan.yaml")  # the home's copy
    # The attempt after the move ran on the managed executor: its start names its model.
    move_seq = next(e.seq for e in events if isinstance(e.payload, ExecutorChange))
    starts = [
        e
        for e in events
        if e.seq > move_seq
        and isinstance(e.payload, Lifecycle)
        and e.payload.kind == LifecycleKind.HARNESS_STARTED
    ]
    assert starts and starts[0].actor.model_id == "local stand-in (scripted plan, in place of gpt-5)"
    assert any(e.type == "remote" for e in events if e.seq > move_seq)
    # Nothing verified before the move was verified again after it.
    assert steps_run_twice(events) == []
    assert not any(e.type == "remote" for e in events if e.seq < move_seq)
    # A later resume without --executor stays on the executor the record moved it to.
    brief = run_belay(interrupted, "brief", SESSION, "--json")
    sections = json.loads(brief.stdout)
    [line] = sections["recovery"]["executor_moves"]
    assert (line["from_type"], line["to_type"], line["at_seq"]) == ("scripted", "openai-agents", killed_at)
    text = run_belay(interrupted, "brief", SESSION).stdout
    assert f"moved from scripted to openai-agents (gpt-5) at seq {killed_at} by belay resume" in text
    listing = run_belay(interrupted, "events", SESSION).stdout
    assert "moved from scripted to openai-agents (gpt-5)" in listing


@pytest.mark.parametrize(
    ("executor", "model"), [("openai-agents", "claude-sonnet-4-5"), ("anthropic-managed", "gpt-5")]
)
def test_a_model_the_provider_does_not_know_is_refused_and_nothing_is_recorded(
    untouched: Path, tmp_path: Path, executor: str, model: str
) -> None:
    """The provider (here its stand-in, through its Models API) is asked before anything is recorded."""
    standin = StandinProcess(executor, PLAN, tmp_path / "standin")
    try:
        before = read_events(untouched, SESSION)
        arguments = ("resume", SESSION, "--executor", executor, "--model", model)
        result = run_belay(untouched, *arguments, environment=standin.environment())
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"does not know model {model!r} (404" in result.stderr
        assert "nothing was recorded" in result.stderr
        assert read_events(untouched, SESSION) == before
    finally:
        standin.stop()


@pytest.mark.parametrize(
    ("executor", "model"), [("openai-agents", "claude-sonnet-4-5"), ("anthropic-managed", "gpt-5")]
)
def test_a_model_the_sessions_own_standin_does_not_know_is_refused_before_it_starts(
    untouched: Path, executor: str, model: str
) -> None:
    """With no provider configured, the session's stand-in's rule is asked here, without waiting
    for the stand-in to start (none is started), and nothing is recorded."""
    before = read_events(untouched, SESSION)
    arguments = ("resume", SESSION, "--executor", executor, "--model", model)
    result = run_belay(untouched, *arguments, environment=no_key_environment())
    assert result.returncode == 1, result.stdout + result.stderr
    provider = "OpenAI" if executor == "openai-agents" else "Anthropic"
    assert f"local stand-in for the {provider} API" in result.stderr
    assert f"does not know model {model!r}" in result.stderr
    assert "nothing was recorded" in result.stderr
    assert read_events(untouched, SESSION) == before
    assert not list(untouched.glob("sessions/*/standins/*/ready.json"))
