"""Compaction in the self-hosted executor, over a record of more than 10^4 events.

The record is written the way a scripted session writes it, one batch per step (the model's turn,
its tool requests and results, the step's task transitions, its notes, now and then an artifact
and a checkpoint), into a real SQLite store; after every step the executor is asked for its next
actions exactly as the harness asks it. The executor records a `summary` whenever the events
outside the context's window that no summary covers outnumber the threshold. What is checked: the
context stays within its token budget and holds the goal and the newest summary, every event
written is still in the record, each summary covers the history before its window and links what
it relies on, a scripted summary is reproducible from the record, and a new attempt (a new store
connection, a new executor) builds the same model request. A model executor's summary is written
by the model, through a stand-in that speaks the OpenAI Responses wire format. And `belay run` of a
scripted plan long enough to compact records its summaries through the real harness.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import AgentSession, parse_manifest
from belay.executors.self_hosted import (
    CONTEXT_BUDGET_TOKENS,
    SUMMARY_INSTRUCTIONS,
    SelfHostedExecutor,
)
from belay.harness.context import OWN_STEPS_HEADING, RECORD_HEADING
from belay.harness.executor import ExecutorContext
from belay.harness.models.base import ModelRequest, ModelTurn
from belay.harness.models.openai import OpenAIResponsesAdapter
from belay.journal.compaction import (
    COMPACT_AFTER_EVENTS,
    RECENT_WINDOW_EVENTS,
    deterministic_text,
    summary_of,
)
from belay.journal.context import estimate_tokens
from belay.journal.events import (
    Actor,
    Artifact,
    ArtifactRef,
    Checkpoint,
    EffectClass,
    Event,
    EventDraft,
    ModelOutput,
    Note,
    NoteKind,
    Payload,
    SummaryEvent,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
)
from belay.journal.state import SessionState, apply
from belay.stores.filesystem import FilesystemArtifactStore
from belay.stores.sqlite import SqliteEventStore
from tests.belay_cli import read_events, run_belay
from tests.harness.example import MANIFEST
from tests.models.conftest import ProviderStandIn
from tests.models.conftest import provider as provider  # the stand-in fixture
from tests.models.test_openai_responses import response_body
from tests.scripted import write_scripted_session

SUBAGENT = "researcher"
GOAL = "Keep the parser green while its grammar grows, one rule at a time."
RECORD_MARKER = RECORD_HEADING
EVENTS_WANTED = 10_000


def session_of(executor: dict[str, Any]) -> AgentSession:
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["metadata"]["name"] = "long-session"
    manifest["spec"]["request"] = {"goal": GOAL, "parts": {"repository": "a parser with a growing grammar"}}
    manifest["spec"]["executor"] = executor
    for sub in manifest["spec"]["subagents"]:
        sub.pop("inputs", None)
    manifest["spec"].pop("approvals", None)
    manifest["spec"].pop("approvalRequired", None)
    return parse_manifest(manifest, source="test")


class RecordingModel:
    """The model behind the executor: it records each request and ends the subagent's turn. What
    the model decides is not under test here; what it is shown is."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        return ModelTurn(text="", model_id="scripted/v1")


def step_payloads(index: int) -> list[Payload]:
    """One step as a scripted session records it: about ten events."""
    step = f"{SUBAGENT}/rule-{index}"
    run, write, done = (f"{SUBAGENT}.rule-{index}.{n}" for n in (1, 2, 3))

    def request(operation_id: str, tool: str, arguments: dict[str, Any], effect: EffectClass) -> ToolRequest:
        return ToolRequest(
            operation_id=operation_id,
            tool=tool,
            arguments=arguments,
            effect=effect,
            step=step,
            subagent=SUBAGENT,
        )

    payloads: list[Payload] = [
        ModelOutput(text=f"Rule {index}: add it to the grammar.", tool_calls=(run,)),
        request(run, "update_plan", {"step": f"rule-{index}", "status": "running"}, EffectClass.IDEMPOTENT),
        ToolResult(operation_id=run, ok=True, output={"step": f"rule-{index}"}),
        Task(task_id=step, title=f"Rule {index}", status=TaskStatus.RUNNING, owner=SUBAGENT),
        ModelOutput(text="Write the rule and its test.", tool_calls=(write,)),
        request(
            write,
            "run_command",
            {"command": f"python -m unittest tests.test_rule_{index}"},
            EffectClass.READ_ONLY,
        ),
        ToolResult(
            operation_id=write,
            ok=True,
            output={"exit_code": 0, "stdout": f"Ran 1 test\nOK (rule {index})"},
            result_id=f"result-{index}",
        ),
        Note(
            note_id=f"finding-{index}", kind=NoteKind.FINDING, text=f"rule {index} parses", status="supported"
        ),
        request(done, "update_plan", {"step": f"rule-{index}", "status": "done"}, EffectClass.IDEMPOTENT),
        Task(task_id=step, status=TaskStatus.VERIFIED, owner=SUBAGENT),
    ]
    if index % 25 == 0:
        data = f"grammar after rule {index}\n".encode()
        ref = ArtifactRef(sha256=hashlib.sha256(data).hexdigest(), size=len(data), media_type="text/plain")
        payloads.append(Artifact(name=f"grammar-{index}.txt", ref=ref, subagent=SUBAGENT))
    if index % 50 == 0:
        payloads.append(
            Checkpoint(
                checkpoint_id=f"{SUBAGENT}-rule-{index}",
                covers_seq=0,
                completed_steps=(step,),
                verification=Verification(command="python -m unittest", status="passed", exit_code=0),
                subagent=SUBAGENT,
            )
        )
    return payloads


def executor_for(
    session: AgentSession,
    store: SqliteEventStore,
    tmp_path: Path,
    model: Any,
    state: Callable[[], Awaitable[SessionState]],
) -> SelfHostedExecutor:
    actor = Actor(kind="harness", attempt=1, subagent=SUBAGENT)

    async def record(payloads: Sequence[Payload], *, durable: bool = True) -> list[Event]:
        drafts = [EventDraft(payload=p, actor=actor) for p in payloads]
        return await store.append(session.session_id, drafts, durable=durable)

    [sub] = [s for s in session.spec.subagents if s.name == SUBAGENT]
    context = ExecutorContext(
        session=session,
        subagent=sub,
        store=store,
        artifacts=FilesystemArtifactStore(tmp_path / "artifacts"),
        read_state=state,
        known_state=state,
        record=record,
    )
    return SelfHostedExecutor(context, model)


def folded(store: SqliteEventStore, session_id: str) -> Callable[[], Awaitable[SessionState]]:
    """The state as a harness attempt keeps it: folded incrementally from the record."""
    state = SessionState(session_id=session_id)

    async def current() -> SessionState:
        nonlocal state
        for event in await store.read(session_id, state.last_seq + 1):
            state = apply(state, event)
        return state

    return current


def record_part(request: ModelRequest) -> str:
    # What changes turn to turn is the request's last message, after the history.
    shown = request.messages[-1].content
    return shown.split(RECORD_MARKER, 1)[1].split("\n\n" + OWN_STEPS_HEADING, 1)[0]


async def test_a_long_scripted_session_compacts_and_keeps_every_event(tmp_path: Path) -> None:
    session = session_of({"type": "scripted", "plan": "plan.yaml"})
    sid = session.session_id
    store = SqliteEventStore(tmp_path / "events.db")
    user = Actor(kind="user", name="belay run")
    written: list[Payload] = [UserInput(goal=GOAL, parts=dict(session.spec.request.parts))]
    await store.append(sid, [EventDraft(payload=written[0], actor=user)])
    current_state = folded(store, sid)
    model = RecordingModel()
    executor = executor_for(session, store, tmp_path, model, current_state)
    actor = Actor(kind="harness", attempt=1, subagent=SUBAGENT, model_id="scripted/v1")
    index = 0
    try:
        while (await current_state()).last_seq < EVENTS_WANTED:
            index += 1
            payloads = step_payloads(index)
            await store.append(sid, [EventDraft(payload=p, actor=actor) for p in payloads])
            written += payloads
            await executor.next_actions(await current_state())

        events = await store.read(sid)
        summaries = [e for e in events if isinstance(e, SummaryEvent)]
        last_seq = events[-1].seq

        # Every event is still in the record, in order, next to the summaries.
        assert last_seq >= EVENTS_WANTED
        assert [e.seq for e in events] == list(range(1, last_seq + 1))
        assert [e.payload for e in events if not isinstance(e, SummaryEvent)] == written

        # Each summary covers the whole history before it, up to the start of its window, folds in
        # the one before it, and links only events and artifacts of what it covers.
        assert len(summaries) >= (last_seq - RECENT_WINDOW_EVENTS) // (COMPACT_AFTER_EVENTS + 20)
        by_seq = {e.seq: e for e in events}
        previous: SummaryEvent | None = None
        for summary in summaries:
            p = summary.payload
            assert p.covers_from_seq == 1
            assert p.covers_to_seq <= summary.seq - RECENT_WINDOW_EVENTS
            assert p.previous_seq == (previous.seq if previous else None)
            if previous is not None:
                assert p.covers_to_seq - previous.payload.covers_to_seq > COMPACT_AFTER_EVENTS
            assert p.event_seqs and all(seq <= p.covers_to_seq for seq in p.event_seqs)
            assert {by_seq[seq].type for seq in p.event_seqs} <= {"task", "note", "artifact", "checkpoint"}
            assert p.made_by == "deterministic"
            assert len(p.text) <= 2000
            previous = summary
        latest = summaries[-1]
        # No more than the threshold (and one step) outside the window is left unsummarised.
        assert last_seq - RECENT_WINDOW_EVENTS - latest.payload.covers_to_seq <= COMPACT_AFTER_EVENTS + 12
        named = {e.payload.ref.sha256 for e in events if isinstance(e.payload, Artifact)}
        assert latest.payload.artifacts and set(latest.payload.artifacts) <= named
        assert f"rule-{index - 25}" in latest.payload.text or "grammar-" in latest.payload.text

        # The scripted summary is made from the record alone: the same record makes the same one.
        before = by_seq[latest.payload.previous_seq]  # type: ignore[index]
        assert isinstance(before, SummaryEvent)
        covered = [e for e in events if before.payload.covers_to_seq < e.seq <= latest.payload.covers_to_seq]
        assert (
            summary_of(before.payload, before.seq, covered, deterministic_text(before.payload, covered))
            == latest.payload
        )

        # Every context the model was shown stayed within its budget; the last one holds the goal,
        # the newest summary (its range and text) and the recent events after it.
        assert len(model.requests) == index
        for request in model.requests:
            assert estimate_tokens(record_part(request)) <= CONTEXT_BUDGET_TOKENS
        shown = record_part(model.requests[-1])
        assert f"Goal (request v1): {GOAL}" in shown
        assert f"seq 1-{latest.payload.covers_to_seq} (summary at seq {latest.seq}): " in shown
        assert latest.payload.text[:200] in shown
        assert f"[{last_seq} " in shown
    finally:
        await store.close()

    # A new attempt: a new connection to the record, a new executor, state folded from scratch.
    resumed_store = SqliteEventStore(tmp_path / "events.db")
    resumed_current = folded(resumed_store, sid)
    resumed_model = RecordingModel()
    try:
        resumed = executor_for(session, resumed_store, tmp_path, resumed_model, resumed_current)
        await resumed.resume(await resumed_current())
        await resumed.next_actions(await resumed_current())
        assert resumed_model.requests == [model.requests[-1]]
        assert (await resumed_store.read(sid))[-1].seq == last_seq  # nothing new was recorded
    finally:
        await resumed_store.close()


async def test_a_model_executor_has_the_model_write_the_summary(
    tmp_path: Path, provider: ProviderStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    session = session_of({"type": "openai", "model": "gpt-test", "baseURL": f"{provider.url}/v1"})
    sid = session.session_id
    store = SqliteEventStore(tmp_path / "events.db")
    actor = Actor(kind="harness", attempt=1, subagent=SUBAGENT)
    await store.append(sid, [EventDraft(payload=UserInput(goal=GOAL), actor=Actor(kind="user"))])
    index = 0
    while (await store.tail(sid, 1))[0].seq <= RECENT_WINDOW_EVENTS + COMPACT_AFTER_EVENTS:
        index += 1
        await store.append(sid, [EventDraft(payload=p, actor=actor) for p in step_payloads(index)])
    last_seq = (await store.tail(sid, 1))[0].seq
    reply = "Rules 1 to 20 are in the grammar and verified; grammar-25.txt holds the grammar so far."
    provider.replies.append(
        (
            200,
            response_body(
                [
                    {
                        "type": "message",
                        "id": "msg_01",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": reply, "annotations": []}],
                    }
                ]
            ),
        )
    )

    async def no_state() -> SessionState:
        raise AssertionError("compaction reads the record, not the state")

    model = OpenAIResponsesAdapter("gpt-test", base_url=f"{provider.url}/v1")
    try:
        executor = executor_for(session, store, tmp_path, model, no_state)
        recorded = await executor.compact(last_seq)
        assert recorded is not None
        assert recorded.payload.text == reply
        assert recorded.payload.made_by == "gpt-test-2026-01-01"
        assert (recorded.payload.input_tokens, recorded.payload.output_tokens) == (321, 45)
        assert (recorded.payload.covers_from_seq, recorded.payload.covers_to_seq) == (
            1,
            last_seq - RECENT_WINDOW_EVENTS,
        )
        [sent] = provider.requests
        assert sent.body["instructions"] == SUMMARY_INSTRUCTIONS
        [message] = sent.body["input"]
        assert f"Events seq 1-{last_seq - RECENT_WINDOW_EVENTS}:" in message["content"]
        assert "Rule 1: add it to the grammar." in message["content"]
        # Within the threshold again: no second summary, no second request.
        assert await executor.compact(last_seq + 10) is None
        assert len(provider.requests) == 1
    finally:
        await model.close()
        await store.close()


def test_belay_run_of_a_long_plan_records_summaries_and_every_event(tmp_path: Path) -> None:
    """The same through the real harness: `belay run` of a scripted plan of 60 one-note steps."""
    steps = [
        {
            "id": f"s{i}",
            "title": f"Step {i}",
            "verify": {"command": "true", "exit_code": 0},
            "actions": [
                {
                    "tool": "record_note",
                    "text": f"Step {i}.",
                    "arguments": {
                        "note_id": f"n{i}",
                        "kind": "finding",
                        "status": "supported",
                        "text": f"{i}",
                    },
                }
            ],
        }
        for i in range(60)
    ]
    manifest = write_scripted_session(
        tmp_path / "session",
        "long-run",
        GOAL,
        [{"name": "worker", "role": "works", "networkProfile": "none"}],
        {"worker": steps},
    )
    result = run_belay(tmp_path / "home", "run", "--quiet", str(manifest))
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "home", "long-run")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(e.type == "tool_result" for e in events) == 3 * 60  # update_plan twice and the note
    summaries = [e for e in events if isinstance(e, SummaryEvent)]
    assert len(summaries) >= (len(events) - RECENT_WINDOW_EVENTS) // (COMPACT_AFTER_EVENTS + 10)
    for summary in summaries:
        assert summary.payload.covers_from_seq == 1
        assert summary.payload.covers_to_seq == summary.seq - 1 - RECENT_WINDOW_EVENTS
        assert summary.actor.subagent == "worker"
