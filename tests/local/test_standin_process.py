"""A session's local stand-in as `belay` finds and starts it (`belay.local.standin_process`): one
per session directory, shared by the commands that need it while it answers; one that is stopped
or hung is taken for dead (killed, replaced) within seconds, so `belay` never hangs on it; it
stops by itself once idle and removes its ready file. And the seeded first message of a
replacement remote session, as the stand-ins' remote agent reads it."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.executors.seeding import seeded_steps
from belay.executors.standins.remote_agent import ScriptedRemoteAgent
from belay.harness.models.scripted import load_plan
from belay.local.standin_process import ANSWER_S, GRACE_ENV, READY_FILE, StandinProcess
from tests.executors.example import PLAN, SUBAGENT
from tests.testenv.polling import wait_until

EXECUTOR = "openai-agents"


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_commands_started_at_once_share_the_sessions_standin_while_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GRACE_ENV, "120")
    directory = tmp_path / "standins" / EXECUTOR
    with ThreadPoolExecutor(max_workers=3) as pool:
        found = list(pool.map(lambda _: StandinProcess.for_session(EXECUTOR, PLAN, directory), range(3)))
    try:
        assert len({s.pid for s in found}) == 1 and len({s.base_url for s in found}) == 1
        again = StandinProcess.found(EXECUTOR, directory)
        assert again is not None and again.pid == found[0].pid
        assert again.stats()["sessions_created"] == 0  # a new stand-in has no sessions
    finally:
        found[0].stop()
    wait_until(lambda: not alive(found[0].pid), "the stand-in to stop", timeout=15)
    assert StandinProcess.found(EXECUTOR, directory) is None


def test_a_stopped_standin_is_taken_for_dead_killed_and_replaced_without_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GRACE_ENV, "120")
    directory = tmp_path / "standins" / EXECUTOR
    first = StandinProcess.for_session(EXECUTOR, PLAN, directory)
    os.kill(first.pid, signal.SIGSTOP)  # alive, listening, answering nothing
    try:
        started = time.monotonic()
        second = StandinProcess.for_session(EXECUTOR, PLAN, directory)
        took = time.monotonic() - started
        try:
            assert second.pid != first.pid and second.stats()["sessions_created"] == 0
            assert took < ANSWER_S + 20  # the look gave up after ANSWER_S; the rest is a start
            wait_until(lambda: not alive(first.pid), "the stopped stand-in to be killed", timeout=15)
        finally:
            second.stop()
    finally:
        if alive(first.pid):
            os.kill(first.pid, signal.SIGKILL)


def test_a_standin_with_no_request_stops_by_itself_and_is_no_longer_found(tmp_path: Path) -> None:
    directory = tmp_path / "standins" / EXECUTOR
    standin = StandinProcess(EXECUTOR, PLAN, directory, idle_exit_s=1.0)
    try:
        standin.stats()  # a request: the idle time counts from its end
        assert standin.process is not None
        assert standin.process.wait(timeout=30) == 0
        assert not (directory / READY_FILE).exists()
        assert StandinProcess.found(EXECUTOR, directory) is None
    finally:
        standin.stop()


def test_a_seeded_first_message_says_where_the_remote_agent_goes_on() -> None:
    message = (
        "Goal: review the change\n\nWhere the work stands, from Belay's record (...)\nSteps:\n"
        "- step inspect: verified\n- step reproduce: running, 1 call settled\n"
        "- step review: planned again (round 2): the goal changed\n"
        "Recent events (from seq 3):\n[4 task repository-reviewer] - step report: done\n"
    )
    assert seeded_steps(message) == {"inspect": ("verified", 0), "reproduce": ("running", 1)}
    agent = ScriptedRemoteAgent.for_metadata(load_plan(PLAN), {"belay_subagent": SUBAGENT})
    whole = [agent.step_of(c) for c in agent.calls]
    agent.read([{"type": "input_text", "text": message}])
    # inspect skipped whole; reproduce after its start and its one settled call; the rest whole.
    later = [step for step in whole if step in ("review", "report")]
    assert [agent.step_of(c) for c in agent.calls] == ["reproduce", "reproduce", *later]
    assert agent.calls[0].name == "record_note"
    agent.read("- step review: done")  # once under way, a later message changes nothing
    assert agent.calls[0].name == "record_note"
