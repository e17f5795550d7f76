"""A managed session resumes by hand after any interruption, as a person does it: `belay run` with
no provider configured (the session's own local stand-in, which `belay run` starts and leaves
running), the `belay` process killed at a point of its record after some tool results (SIGKILL, or
a clean SIGTERM), then `belay resume`.

On each managed executor: the resume completes with the uninterrupted run's deliverable; no step
verified before the interruption is verified again (its checkpoint and its verification are
recorded once); no call is asked for again (as many tool requests as the uninterrupted run). While
the stand-in lives, the remote session is the same one. When the stand-in has dropped the remote
session, or the stand-in process itself was killed (the next `belay resume` starts a new one with
no sessions), the executor records why, starts a new remote session seeded from the record, and
the briefing says so.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.executors.endpoints import PROVIDERS, standin_model_id
from belay.harness.attempt import fault_key
from belay.journal.events import (
    CheckpointEvent,
    Event,
    RemoteEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from tests.belay_cli import (
    completed,
    deliverables,
    provider_problems,
    read_events,
    remote_sessions,
    run_belay,
    run_until,
    session_standin,
    start_belay,
    steps_run_twice,
    stop_session_standins,
    wait_until_stopped,
)
from tests.executors.example import SESSION, SUBAGENT, example_manifest, review_sha256

pytestmark = pytest.mark.slow

EXECUTORS = ("openai-agents", "anthropic-managed")
HANG_S = 300.0  # a guard against a hang, never a timing
# Nothing configured: `belay` uses the session's local stand-in, never a key of the environment.
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
MODELS = {"openai-agents": "gpt-5", "anthropic-managed": "claude-sonnet-4-5"}


@pytest.fixture(scope="module", params=EXECUTORS)
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, list[Event]]:
    """The executor, its manifest, and the record of its uninterrupted run."""
    executor = str(request.param)
    return executor, *uninterrupted(tmp_path_factory.mktemp(f"reference-{executor}"), executor)


def uninterrupted(base: Path, executor: str) -> tuple[Path, list[Event]]:
    """The example's manifest on `executor` under `base`, and the record of its uninterrupted run
    (on the session's local stand-in, stopped after)."""
    manifest = example_manifest(base / "manifest", executor)
    home = base / "home"
    try:
        result = run_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER, timeout=HANG_S)
        assert result.returncode == 0, result.stderr
    finally:
        stop_session_standins(home)
    return manifest, read_events(home, SESSION)


def kill_point(reference: list[Event]) -> str:
    """The second tool result after the first verified step: a step under way, one of its calls
    settled, one step verified before it."""
    verified = next(
        e.seq
        for e in reference
        if isinstance(e, CheckpointEvent)
        and e.payload.verified
        and not e.payload.checkpoint_id.endswith("/inputs")
    )
    results = [e for e in reference if isinstance(e, ToolResultEvent) and e.seq > verified]
    return fault_key(results[1])


def verified(events: list[Event]) -> tuple[list[str], list[str]]:
    """The checkpoints recorded verified, and the steps recorded verified, once per record."""
    checkpoints = [
        e.payload.checkpoint_id for e in events if isinstance(e, CheckpointEvent) and e.payload.verified
    ]
    steps = [e.payload.task_id for e in events if isinstance(e, TaskEvent) and e.payload.status == "verified"]
    return checkpoints, steps


def check_resumed(reference: list[Event], before: list[Event], after: list[Event], output: str) -> None:
    assert completed(after), output[-2000:]
    assert deliverables(after)["review.md"] == review_sha256()
    checkpoints_before, steps_before = verified(before)
    assert checkpoints_before and steps_before  # the kill came after a verified step
    checkpoints_after, steps_after = verified(after)
    for checkpoint in checkpoints_before:
        assert checkpoints_after.count(checkpoint) == 1, f"{checkpoint} verified again"
    for step in steps_before:
        assert steps_after.count(step) == 1, f"{step} verified again"
    assert not steps_run_twice(after)
    requests = [e for e in after if isinstance(e, ToolRequestEvent)]
    assert len(requests) == len([e for e in reference if isinstance(e, ToolRequestEvent)])


def interrupted_run(executor: str, manifest: Path, home: Path, point: str, how: str) -> list[Event]:
    """`belay run`, stopped at `point` and then killed (SIGKILL) or stopped cleanly (SIGTERM)."""
    if how == "SIGKILL":
        reached, _ = run_until(
            home, ["run", "--quiet", str(manifest)], point, timeout=HANG_S, environment=NO_PROVIDER
        )
        assert reached, f"the run ended before {point}"
    else:
        process = start_belay(
            home, "run", "--quiet", str(manifest), stop_after=point, environment=NO_PROVIDER
        )
        try:
            wait_until_stopped(process, point, timeout=HANG_S)
            os.kill(process.pid, signal.SIGTERM)
            os.kill(process.pid, signal.SIGCONT)
            assert process.wait(timeout=HANG_S) == 128 + signal.SIGTERM
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert "continue with `belay resume" in (home / "belay.log").read_text()
    return read_events(home, SESSION)


def drop_remote_session(executor: str, home: Path) -> None:
    """The provider loses every session (`delete_session` without an id)."""
    standin = session_standin(home, SESSION, executor)
    assert standin is not None
    standin.add_fault({"kind": "delete_session"})


def kill_standin(executor: str, home: Path) -> None:
    """The stand-in process itself dies: the next `belay resume` starts one with no sessions."""
    standin = session_standin(home, SESSION, executor)
    assert standin is not None
    standin.kill()
    assert session_standin(home, SESSION, executor) is None


CASES: dict[str, tuple[str, Callable[[str, Path], None] | None]] = {
    "sigkill": ("SIGKILL", None),
    "sigterm": ("SIGTERM", None),
    "sigkill-session-dropped": ("SIGKILL", drop_remote_session),
    "sigkill-standin-killed": ("SIGKILL", kill_standin),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_managed_session_resumes_by_hand(
    case: str, reference: tuple[str, Path, list[Event]], tmp_path: Path
) -> None:
    executor, manifest, events = reference
    how, meanwhile = CASES[case]
    home = tmp_path / "home"
    try:
        before = interrupted_run(executor, manifest, home, kill_point(events), how)
        standin = session_standin(home, SESSION, executor)
        assert standin is not None  # it outlived the `belay` process, as a provider would
        if meanwhile is not None:
            meanwhile(executor, home)
        result = run_belay(home, "resume", SESSION, environment=NO_PROVIDER, timeout=HANG_S)
        after = read_events(home, SESSION)
        assert result.returncode == 0, result.stderr[-2000:]
        check_resumed(events, before, after, result.stdout)
        briefing = run_belay(home, "brief", SESSION).stdout
        assert f"model {standin_model_id(MODELS[executor])}" in briefing
        assert "(the local stand-in)" in briefing
        held, now = remote_sessions(before)[SUBAGENT], remote_sessions(after)[SUBAGENT]
        stats = session_standin(home, SESSION, executor).stats()  # type: ignore[union-attr]
        if meanwhile is None:
            assert now == held and provider_problems(stats, subagents=1) == []
            assert "seeded from the record" not in briefing
            return
        # Lost: recorded, replaced by a new remote session seeded from the record, said so.
        lost = [e for e in after if isinstance(e, RemoteEvent) and e.payload.kind == "failed"]
        assert [e.payload.remote_session_id for e in lost] == [held] and now != held
        assert f"seeded from the record, in place of {held}" in briefing
        assert stats["sessions_created"] == (1 if meanwhile is kill_standin else 2)
        assert stats["sessions"][now]["calls_requested"] < len(
            [e for e in events if isinstance(e, ToolRequestEvent)]
        )
    finally:
        stop_session_standins(home)
