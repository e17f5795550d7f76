"""An agent that ends its turn without its deliverable, on each executor: self-hosted (the scripted
model), and both managed executors against the session's own local stand-in (nothing configured).

The example's plan, with the model ending its turn once before `publish_deliverable`
(`end_turn_before`): the review is written, not published. While `belay run` goes on in the
background, its briefing never says `Interrupted` and never lists the subagent as done: it waits on
the person, under "Waiting on you", with `belay message`, `belay amend` and the end of the session.
Then `belay message`, run as the briefing prints it, makes the agent go on; the run ends with the
session succeeded and the review published. On a managed executor the provider received the
message once, as a user message (the stand-in's counters), under a key derived from the record.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event, RemoteEvent, UserMessageEvent, WaitEvent
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
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

HANG_S = 300.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
SAID = "The review is written in out/review.md; I think that is everything."
MESSAGE = "Publish out/review.md as review.md, then you are done."


def stopping_plan(directory: Path) -> Path:
    """The example's plan, its model ending its turn once before it publishes the review."""
    plan = yaml.safe_load(PLAN.read_text())
    for step in plan["subagents"][SUBAGENT]["steps"]:
        for action in step["actions"]:
            if action["tool"] == "publish_deliverable":
                action["end_turn_before"] = SAID
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def stopping_manifest(directory: Path, executor: str) -> Path:
    """The example on `executor`, on the plan whose model ends its turn before it publishes."""
    manifest = example_manifest(directory / "manifest", executor)
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["executor"]["plan"] = str(stopping_plan(directory / "plan"))
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def turn_end_waits(events: list[Event]) -> list[WaitEvent]:
    return [e for e in events if isinstance(e, WaitEvent) and e.payload.owed]


@pytest.mark.parametrize("executor", ["self-hosted", "openai-agents", "anthropic-managed"])
def test_a_turn_that_ends_without_the_deliverable_waits_on_a_message(tmp_path: Path, executor: str) -> None:
    manifest = stopping_manifest(tmp_path, executor)
    home = tmp_path / "home"
    run = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
    try:
        wait_until(
            lambda: turn_end_waits(read_events(home, SESSION)),
            "the agent to end its turn without review.md",
            timeout=HANG_S,
            while_running=run,
        )
        page = run_belay(home, "brief", SESSION).stdout
        shown = json.loads(run_belay(home, "brief", "--json", SESSION).stdout)

        assert "Interrupted" not in page, page
        assert shown["phase"] == "WaitingOnUser" and shown["interruption"] is None
        owing = [s for s in shown["steps"] if s["deliverable"] == "review.md"]
        assert owing and all(s["status"] not in ("done", "verified") for s in owing), owing
        assert not shown["ready_for_review"]
        [waiting] = shown["waiting_on_you"]
        assert waiting["kind"] == "message"
        assert f"{SUBAGENT} ended its turn without review.md" in waiting["summary"]
        assert SAID in waiting["summary"]
        assert waiting["also"].startswith(f"belay amend {SESSION}")
        assert waiting["alternative"] == f'belay reject {SESSION} {waiting["id"]} --reason "..."'
        section = page.split("\nWaiting on you\n", 1)[1].split("\nNeeds attention\n", 1)[0]
        printed = next(line.split("run: ", 1)[1] for line in section.splitlines() if "run: belay" in line)
        command = printed.split("  (", 1)[0]
        assert command == f'belay message {SESSION} "..."'
        assert "belay amend" in section and "belay reject" in section

        # As printed, with the words in place of "...".
        words = shlex.split(command.replace('"..."', shlex.quote(MESSAGE)))
        sent = run_belay(home, *words[1:], environment=NO_PROVIDER)
        assert sent.returncode == 0, sent.stderr
        assert "the running harness takes it from here" in sent.stdout
        assert run.wait(timeout=HANG_S) == 0, (home / "belay.log").read_text()[-3000:]

        events = read_events(home, SESSION)
        assert completed(events)
        assert deliverables(events)["review.md"] == review_sha256()
        [message] = [e for e in events if isinstance(e, UserMessageEvent)]
        assert (message.payload.subagent, message.payload.text) == (SUBAGENT, MESSAGE)
        assert message.actor.kind == "user"
        done = json.loads(run_belay(home, "brief", "--json", SESSION).stdout)
        assert done["phase"] == "Succeeded" and not done["waiting_on_you"]
        if executor != "self-hosted":
            check_provider(home, executor, events, message.seq)
    finally:
        if run.poll() is None:
            kill_group(run)
        stop_session_standins(home)


def check_provider(home: Path, executor: str, events: list[Event], message_seq: int) -> None:
    """The provider took the message once, as a user message, under the record-derived key."""
    [delivered] = [e for e in events if isinstance(e, RemoteEvent) and e.payload.kind == "message_delivered"]
    assert delivered.payload.idempotency_key.endswith(f"-{message_seq}")
    standin = session_standin(home, SESSION, executor)
    assert standin is not None
    stats = standin.stats()
    assert not provider_problems(stats, 1)
    [counters] = stats["sessions"].values()
    said = [i for i in counters["inputs"] if MESSAGE in json.dumps(i["content"])]
    assert [(i["received"], i["accepted"]) for i in said] == [(1, 1)]


def test_a_message_names_a_subagent_that_waits_for_one(tmp_path: Path) -> None:
    """Refused, with what to do, before anything is recorded: a session with no turn's end."""
    home = tmp_path / "home"
    manifest = example_manifest(tmp_path / "manifest", "self-hosted")
    ran = run_belay(home, "run", "--quiet", str(manifest), timeout=HANG_S)
    assert ran.returncode == 0, ran.stderr
    before = len(read_events(home, SESSION))
    refused = run_belay(home, "message", SESSION, "hello")
    assert refused.returncode != 0
    assert "nothing waits for a message" in refused.stderr
    assert len(read_events(home, SESSION)) == before


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_a_message_is_given_once_across_a_kill(tmp_path: Path, executor: str) -> None:
    """Killed right after the provider's acceptance of the message is recorded, the session goes
    on with `belay resume`: the record says the message went, so it is not sent again."""
    manifest = stopping_manifest(tmp_path, executor)
    home = tmp_path / "home"
    point = f"remote:message_delivered:{SUBAGENT}"
    run = start_belay(home, "run", "--quiet", str(manifest), stop_after=point, environment=NO_PROVIDER)
    try:
        wait_until(
            lambda: turn_end_waits(read_events(home, SESSION)),
            "the agent to end its turn without review.md",
            timeout=HANG_S,
            while_running=run,
        )
        sent = run_belay(home, "message", SESSION, MESSAGE, environment=NO_PROVIDER)
        assert sent.returncode == 0, sent.stderr
        wait_until_stopped(run, point, timeout=HANG_S)
        kill_group(run)
        resumed = run_belay(home, "resume", "--quiet", SESSION, environment=NO_PROVIDER, timeout=HANG_S)
        assert resumed.returncode == 0, resumed.stderr
        events = read_events(home, SESSION)
        assert completed(events) and deliverables(events)["review.md"] == review_sha256()
        [message] = [e for e in events if isinstance(e, UserMessageEvent)]
        check_provider(home, executor, events, message.seq)  # one delivery recorded, one received
    finally:
        if run.poll() is None:
            kill_group(run)
        stop_session_standins(home)


def test_an_amend_answers_a_turn_that_ended_short(tmp_path: Path) -> None:
    """An amend answers the wait too: the harness records it answered by the change, the agent's
    next turn goes on with the new request (here it redoes the steps the change invalidated and
    stops short again, in the new round), and a message then lets it finish."""
    manifest = stopping_manifest(tmp_path, "self-hosted")
    home = tmp_path / "home"
    run = start_belay(home, "run", "--quiet", str(manifest))
    try:
        wait_until(
            lambda: turn_end_waits(read_events(home, SESSION)),
            "the agent to end its turn",
            timeout=HANG_S,
            while_running=run,
        )
        amended = run_belay(home, "amend", SESSION, "--goal", "Review the fix again, citing every test.")
        assert amended.returncode == 0, amended.stderr
        second = wait_until(
            lambda: [w for w in turn_end_waits(read_events(home, SESSION)) if "@2" in w.payload.wait_id],
            "the agent to end its turn again in the new round",
            timeout=HANG_S,
            while_running=run,
        )
        events = read_events(home, SESSION)
        first = turn_end_waits(events)[0].payload.wait_id
        [answered] = [
            e
            for e in events
            if isinstance(e, WaitEvent) and e.payload.wait_id == first and e.payload.resolved
        ]
        assert answered.actor.kind == "harness" and "the request changed (v2)" in answered.payload.reason
        assert second[0].payload.wait_id == "turn-ended-repository-reviewer.report@2.2"
        assert run_belay(home, "message", SESSION, MESSAGE).returncode == 0
        assert run.wait(timeout=HANG_S) == 0, (home / "belay.log").read_text()[-3000:]
        assert completed(read_events(home, SESSION))
    finally:
        if run.poll() is None:
            kill_group(run)


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_a_provider_that_ends_the_stream_of_a_turn_ended_short_interrupts_nothing(
    tmp_path: Path, executor: str
) -> None:
    """The provider ends every event stream of a session whose turn is over (the stand-in's
    `end_idle_streams`). While the session waits on the person's message, the executor reopens the
    stream as often as the provider ends it and records no interruption. Stopped there, the page
    gives one next step, the message, with the resume after it; run in that order, the resume
    delivers the message once and the session succeeds with the review."""
    manifest = stopping_manifest(tmp_path, executor)
    home = tmp_path / "home"
    run = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
    try:
        standin = wait_until(
            lambda: session_standin(home, SESSION, executor),
            "the stand-in",
            timeout=HANG_S,
            while_running=run,
        )
        standin.add_fault({"kind": "end_idle_streams"})
        wait_until(
            lambda: turn_end_waits(read_events(home, SESSION)),
            "the agent to end its turn without review.md",
            timeout=HANG_S,
            while_running=run,
        )
        wait_until(
            lambda: sum(s["kind"] == "end_idle_streams" for s in standin.faults()["served"]) >= 3,
            "the provider to end the idle session's stream three times",
            timeout=HANG_S,
            while_running=run,
        )
        kill_group(run)
        events = read_events(home, SESSION)
        interrupted = [
            e.payload.detail for e in events if isinstance(e, RemoteEvent) and e.payload.kind == "interrupted"
        ]
        assert interrupted == []

        page = run_belay(home, "brief", SESSION).stdout
        shown = json.loads(run_belay(home, "brief", "--json", SESSION).stdout)
        message = f'belay message {SESSION} "..."'
        assert shown["interruption"]["command"] == message
        [waiting] = shown["waiting_on_you"]
        assert waiting["command"] == message
        # One next step: every command the page says to run is the message; the resume comes after it.
        assert {
            line.split("run: ", 1)[1].split("  (", 1)[0] for line in page.splitlines() if "run: " in line
        } == {message}
        next_line = shown["interruption"]["next"]
        assert next_line.index(message) < next_line.index(f"belay resume {SESSION}")

        sent = run_belay(home, "message", SESSION, MESSAGE, environment=NO_PROVIDER)
        assert sent.returncode == 0, sent.stderr
        assert f"continue with `belay resume {SESSION}`" in sent.stdout
        resumed = run_belay(home, "resume", "--quiet", SESSION, environment=NO_PROVIDER, timeout=HANG_S)
        assert resumed.returncode == 0, resumed.stderr
        events = read_events(home, SESSION)
        assert completed(events) and deliverables(events)["review.md"] == review_sha256()
        [said] = [e for e in events if isinstance(e, UserMessageEvent)]
        check_provider(home, executor, events, said.seq)
    finally:
        if run.poll() is None:
            kill_group(run)
        stop_session_standins(home)
