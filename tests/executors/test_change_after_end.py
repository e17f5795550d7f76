"""A change after the session ended reaches whoever does the work, on every executor: self-hosted
(the scripted model), and both managed executors against the session's own local stand-in
(nothing configured), through the real command line as a person runs it.

The example's plan, its report step done another way once the goal asks about a timeout, or once
a rejection opened its round (`variants`): so the redone review is other bytes than the first.
`belay run` ends Succeeded with the first review; then `belay amend --goal` (or `belay reject
review.md`) reopens the steps, and the page no longer says Succeeded while they are planned;
`belay resume` redoes them and ends Succeeded with the new review. On a managed executor the
remote agent was told the change as its next user message, under a key derived from the seq of
the scope change (or the rejection), once, and no end of a turn before it was taken as the answer.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event, RejectionEvent, RemoteEvent, ScopeChangeEvent, TaskEvent
from tests.belay_cli import (
    completed,
    deliverables,
    kill_group,
    provider_problems,
    read_events,
    run_belay,
    session_standin,
    start_belay,
    stop_session_standins,
    wait_until_stopped,
)
from tests.executors.example import PLAN, SESSION, SUBAGENT, example_manifest, review_sha256
from tests.executors.test_stop_short import MESSAGE, stopping_manifest, turn_end_waits
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

HANG_S = 300.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
EXECUTORS = ["self-hosted", "openai-agents", "anthropic-managed"]
NEW_GOAL = "Review the proposed fix again and say what a timeout in parse() would change."
TIMEOUT_REVIEW = "# Review, again\n\nWith a timeout in parse(), the change stands as it is.\n"
REJECTED_REVIEW = "# Review, redone after its rejection\n\nEvery finding cites its test.\n"
REASON = "cite the test behind every finding"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def report_variant(content: str) -> list[dict[str, Any]]:
    return [
        {"tool": "write_file", "arguments": {"path": "out/review.md", "content": content}},
        {"tool": "publish_deliverable", "arguments": {"path": "out/review.md", "name": "review.md"}},
    ]


def changing_manifest(directory: Path, executor: str) -> Path:
    """The example on `executor`, its report step written another way for the new goal or after
    a rejection."""
    plan = yaml.safe_load(PLAN.read_text())
    [report] = [s for s in plan["subagents"][SUBAGENT]["steps"] if s["id"] == "report"]
    report["variants"] = [
        {"when": {"goal_contains": "timeout"}, "actions": report_variant(TIMEOUT_REVIEW)},
        {"when": {"rejected": True}, "actions": report_variant(REJECTED_REVIEW)},
    ]
    (directory / "plan").mkdir(parents=True, exist_ok=True)
    plan_path = directory / "plan" / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    manifest = example_manifest(directory / "manifest", executor)
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["executor"]["plan"] = str(plan_path)
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def brief(home: Path) -> dict[str, Any]:
    shown = run_belay(home, "brief", "--json", SESSION)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def run_to_the_end(home: Path, *command: str) -> None:
    done = run_belay(home, *command, environment=NO_PROVIDER, timeout=HANG_S)
    assert done.returncode == 0, done.stderr + (home / "belay.log").read_text()[-3000:]


def steps_redone(events: list[Event]) -> set[str]:
    """The steps the record shows done again after the change."""
    at = changed_at(events)
    return {
        e.payload.task_id.split("/", 1)[1]
        for e in events
        if isinstance(e, TaskEvent)
        and e.seq > at
        and e.payload.status in ("done", "verified")
        and e.payload.task_id.startswith(f"{SUBAGENT}/")
    }


def changed_at(events: list[Event]) -> int:
    return max(e.seq for e in events if isinstance(e, ScopeChangeEvent | RejectionEvent))


def check_reopened_page(home: Path, first_review: str) -> None:
    """Between the change and the resume: not Succeeded, steps planned, the old review withdrawn."""
    shown = brief(home)
    planned = [s for s in shown["steps"] if s["status"] == "planned"]
    assert planned, shown["steps"]
    assert shown["phase"] != "Succeeded", shown["phase"]
    assert first_review not in json.dumps(shown.get("ready_for_review", []))


def check_told(home: Path, executor: str, events: list[Event], words: str) -> None:
    """On a managed executor: the change went to the remote agent once, as a user message, under
    the key derived from the seq of the change, and only then did its turn end with the answer."""
    if executor == "self-hosted":
        return
    at = changed_at(events)
    told = [
        e
        for e in events
        if isinstance(e, RemoteEvent) and e.payload.kind == "message_delivered" and e.seq > at
    ]
    keys = [e.payload.idempotency_key.rsplit("-", 1)[1] for e in told]
    assert keys.count(str(at)) == 1 and keys[0] == str(at), told  # the change, before any other
    standin = session_standin(home, SESSION, executor)
    assert standin is not None
    stats = standin.stats()
    assert not provider_problems(stats, 1)
    [counters] = stats["sessions"].values()
    said = [i for i in counters["inputs"] if words in json.dumps(i["content"])]
    assert [(i["received"], i["accepted"]) for i in said] == [(1, 1)], counters["inputs"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_amend_after_the_end_is_done_on_resume(tmp_path: Path, executor: str) -> None:
    manifest = changing_manifest(tmp_path, executor)
    home = tmp_path / "home"
    try:
        run_to_the_end(home, "run", "--quiet", str(manifest))
        assert deliverables(read_events(home, SESSION))["review.md"] == review_sha256()
        assert brief(home)["phase"] == "Succeeded"

        amended = run_belay(home, "amend", SESSION, "--goal", NEW_GOAL)
        assert amended.returncode == 0, amended.stderr
        check_reopened_page(home, review_sha256())

        run_to_the_end(home, "resume", "--quiet", SESSION)
        events = read_events(home, SESSION)
        assert completed(events)
        assert deliverables(events)["review.md"] == sha256(TIMEOUT_REVIEW)
        assert {"inspect", "reproduce", "review", "report"} <= steps_redone(events)
        shown = brief(home)
        assert shown["phase"] == "Succeeded"
        assert all(s["status"] in ("done", "verified") for s in shown["steps"]), shown["steps"]
        check_told(home, executor, events, "Goal: " + NEW_GOAL)
    finally:
        stop_session_standins(home)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_deliverable_rejected_after_the_end_is_redone_on_resume(tmp_path: Path, executor: str) -> None:
    manifest = changing_manifest(tmp_path, executor)
    home = tmp_path / "home"
    try:
        run_to_the_end(home, "run", "--quiet", str(manifest))
        assert deliverables(read_events(home, SESSION))["review.md"] == review_sha256()

        rejected = run_belay(home, "reject", SESSION, "review.md", "--reason", REASON)
        assert rejected.returncode == 0, rejected.stderr
        check_reopened_page(home, review_sha256())

        run_to_the_end(home, "resume", "--quiet", SESSION)
        events = read_events(home, SESSION)
        assert completed(events)
        assert deliverables(events)["review.md"] == sha256(REJECTED_REVIEW)
        assert "report" in steps_redone(events)
        shown = brief(home)
        assert shown["phase"] == "Succeeded"
        assert all(s["status"] in ("done", "verified") for s in shown["steps"]), shown["steps"]
        check_told(home, executor, events, "planned again (round 2, after a rejection)")
    finally:
        stop_session_standins(home)


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_an_amend_is_told_once_across_a_kill(tmp_path: Path, executor: str) -> None:
    """Killed right after the provider's acceptance of the change is recorded, the next resume goes
    on from the record: the change is not told again, and the redone review is delivered."""
    manifest = changing_manifest(tmp_path, executor)
    home = tmp_path / "home"
    point = f"remote:message_delivered:{SUBAGENT}"
    resume: subprocess.Popen[bytes] | None = None
    try:
        run_to_the_end(home, "run", "--quiet", str(manifest))
        assert run_belay(home, "amend", SESSION, "--goal", NEW_GOAL).returncode == 0
        resume = start_belay(home, "resume", "--quiet", SESSION, stop_after=point, environment=NO_PROVIDER)
        wait_until_stopped(resume, point, timeout=HANG_S)
        kill_group(resume)
        run_to_the_end(home, "resume", "--quiet", SESSION)
        events = read_events(home, SESSION)
        assert completed(events)
        assert deliverables(events)["review.md"] == sha256(TIMEOUT_REVIEW)
        check_told(home, executor, events, "Goal: " + NEW_GOAL)
    finally:
        if resume is not None and resume.poll() is None:
            kill_group(resume)
        stop_session_standins(home)


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_an_amend_while_a_turn_that_ended_short_waits_is_done_in_the_new_round(
    tmp_path: Path, executor: str
) -> None:
    """The amend answers the wait (as on the scripted executor: tests/executors/test_stop_short.py)
    and reaches the remote agent with the steps to do again: it redoes them in their new round,
    stops short there again, and a message lets it finish."""
    manifest = stopping_manifest(tmp_path, executor)
    home = tmp_path / "home"
    run = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
    try:
        wait_until(
            lambda: turn_end_waits(read_events(home, SESSION)),
            "the agent to end its turn",
            timeout=HANG_S,
            while_running=run,
        )
        assert run_belay(home, "amend", SESSION, "--goal", NEW_GOAL).returncode == 0
        second = wait_until(
            lambda: [w for w in turn_end_waits(read_events(home, SESSION)) if "@2" in w.payload.wait_id],
            "the agent to end its turn again in the new round",
            timeout=HANG_S,
            while_running=run,
        )
        assert second[0].payload.wait_id == f"turn-ended-{SUBAGENT}.report@2.2"
        events = read_events(home, SESSION)
        redone = {
            e.payload.task_id
            for e in events
            if isinstance(e, TaskEvent) and e.seq > changed_at(events) and e.payload.status == "verified"
        }
        assert {f"{SUBAGENT}/{step}" for step in ("inspect", "reproduce", "review")} <= redone
        assert run_belay(home, "message", SESSION, MESSAGE, environment=NO_PROVIDER).returncode == 0
        assert run.wait(timeout=HANG_S) == 0, (home / "belay.log").read_text()[-3000:]
        events = read_events(home, SESSION)
        assert completed(events)
        check_told(home, executor, events, "Goal: " + NEW_GOAL)
    finally:
        if run.poll() is None:
            kill_group(run)
        stop_session_standins(home)
