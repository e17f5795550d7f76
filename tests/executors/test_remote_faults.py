"""What the provider does wrong ends in a clear recorded outcome, against each provider's stand-in:
a cut event stream (abrupt or clean), a 5xx (before or after the request took effect), a tool call
delivered twice on the stream and a rescheduling session are gone through, the session completes
and the provider still sees each result once; a create whose answer was lost makes one remote
session, not two; a remote session that failed, was terminated or deleted is recorded with its
reason and replaced by a new one seeded from the record, which goes on without asking again for a
call the record holds; remote sessions lost again and again before taking a result end the session
with that reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from belay.api.agentsession import AgentSession
from belay.executors.managed import MAX_FRUITLESS_LOSSES
from belay.harness.models.scripted import ScriptedPlan
from belay.journal.events import Event, RemoteEvent
from belay.local.runtime import LocalHome, read_state, run_local
from tests.belay_cli import provider_problems
from tests.executors.example import STANDINS, one_subagent_session, standin_for

PLAN = ScriptedPlan.model_validate(
    {
        "subagents": {
            "worker": {
                "steps": [
                    {
                        "id": "work",
                        "title": "Do a little",
                        "verify": {"command": "test -s out/result.txt", "exit_code": 0},
                        "actions": [
                            {"tool": "run_command", "arguments": {"command": "echo hello"}},
                            {
                                "tool": "write_file",
                                "arguments": {"path": "out/result.txt", "content": "42\n"},
                            },
                            {"tool": "publish_deliverable", "arguments": {"path": "out/result.txt"}},
                        ],
                    }
                ]
            }
        }
    }
)
# The plan's first call (update_plan starts step `work`), under its id on every executor.
FIRST_CALL = "worker.work.start"


def session(executor: str) -> AgentSession:
    return one_subagent_session("faults", executor, "Write 42 and publish it.", deliverable="result.txt")


async def run_with(
    executor: str,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    faults: list[dict[str, Any]] = (),  # type: ignore[assignment]
    when: Callable[[Event, Any], None] | None = None,
) -> tuple[Any, list[Event], dict[str, Any]]:
    """Run the session on the stand-in armed with `faults`; `when(event, standin)` may arm more as
    events are recorded. Returns the harness result, the record and the stand-in's counters."""
    async with standin_for(executor, PLAN, monkeypatch, faults=faults) as standin:
        local = LocalHome(home)
        result = await run_local(local, session(executor), on_event=lambda e: when and when(e, standin))
        _, events = await read_state(local, "faults")
        return result, events, standin.stats()


def remote(events: list[Event], kind: str) -> list[Any]:
    return [e.payload for e in events if isinstance(e, RemoteEvent) and e.payload.kind == kind]


def remote_id(events: list[Event]) -> str:
    return str(remote(events, "session")[0].remote_session_id)


EXECUTORS = sorted(STANDINS)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["abort", "clean"])
async def test_a_cut_event_stream_is_reopened(
    executor: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = [{"kind": "cut_stream", "after_events": 2, "mode": mode}]
    result, events, stats = await run_with(executor, tmp_path, monkeypatch, faults)
    assert result.completed, result.detail
    cuts = [p.detail for p in remote(events, "interrupted")]
    assert any("event stream" in cut for cut in cuts), cuts
    assert provider_problems(stats, subagents=1) == []


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("after_apply", [False, True])
async def test_a_server_error_on_a_result_post_is_retried_and_the_result_lands_once(
    executor: str, after_apply: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = r"/agents/sessions/[^/]+/events$" if executor == "openai-agents" else r"/v1/sessions/[^/]+/events$"
    faults = [
        {"kind": "server_error", "path": path, "method": "POST", "status": 503, "after_apply": after_apply}
    ]
    result, _, stats = await run_with(executor, tmp_path, monkeypatch, faults)
    assert result.completed, result.detail
    assert provider_problems(stats, subagents=1) == []  # each result accepted once, none answered twice


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_lost_create_answer_makes_one_remote_session(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = r"/agents/sessions$" if executor == "openai-agents" else r"/v1/sessions$"
    faults = [{"kind": "server_error", "path": path, "method": "POST", "status": 502, "after_apply": True}]
    result, events, stats = await run_with(executor, tmp_path, monkeypatch, faults)
    assert result.completed, result.detail
    assert stats["sessions_created"] == 1
    assert remote(events, "session")[0].detail.startswith("found by its metadata")
    assert any("creating the remote session" in p.detail for p in remote(events, "interrupted"))
    assert provider_problems(stats, subagents=1) == []


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_tool_call_delivered_twice_on_the_stream_runs_once(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, events, stats = await run_with(executor, tmp_path, monkeypatch, [{"kind": "duplicate_event"}])
    assert result.completed, result.detail
    requests = [e.payload.operation_id for e in events if e.type == "tool_request"]
    assert len(requests) == len(set(requests))
    assert provider_problems(stats, subagents=1) == []


async def test_a_rescheduling_session_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def reschedule(event: Event, standin: Any) -> None:
        if first_result(event):
            session_id = event.payload.remote_session_id  # type: ignore[union-attr]
            standin.add_fault({"kind": "reschedule_session", "session_id": session_id, "reads": 3})

    result, _, stats = await run_with("anthropic-managed", tmp_path, monkeypatch, when=reschedule)
    assert result.completed, result.detail
    assert provider_problems(stats, subagents=1) == []


def first_result(event: Event) -> bool:
    return (
        isinstance(event, RemoteEvent)
        and event.payload.kind == "result_delivered"
        and event.payload.operation_id == FIRST_CALL
    )


def after_first_result(fault: str) -> Callable[[Event, Any], None]:
    def arm(event: Event, standin: Any) -> None:
        if first_result(event):
            standin.add_fault({"kind": fault, "session_id": event.payload.remote_session_id})  # type: ignore[union-attr]

    return arm


ENDINGS = [
    ("openai-agents", "fail_session", "failed"),
    ("anthropic-managed", "terminate_session", "terminated"),
    ("openai-agents", "delete_session", "no longer exists"),
    ("anthropic-managed", "delete_session", "no longer exists"),
]


@pytest.mark.parametrize(("executor", "fault", "words"), ENDINGS, ids=[f"{e[0]}-{e[1]}" for e in ENDINGS])
async def test_a_remote_session_that_cannot_go_on_is_replaced_seeded_from_the_record(
    executor: str, fault: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, events, stats = await run_with(executor, tmp_path, monkeypatch, when=after_first_result(fault))
    assert result.completed, result.detail
    first, second = (p.remote_session_id for p in remote(events, "session"))
    [failure] = remote(events, "failed")
    assert failure.remote_session_id == first and words in failure.detail
    assert (
        second != first
        and f"seeded from the record in place of {first}" in remote(events, "session")[1].detail
    )
    # The old session is closed where it still exists; the record keeps its id.
    assert stats["sessions"][first]["status"] == "deleted" and stats["sessions_created"] == 2
    # Nothing the record held was asked for again: each planned call ran once, across both.
    tools = [e.payload.tool for e in events if e.type == "tool_request"]
    assert sorted(tools) == sorted(
        ["update_plan", "run_command", "write_file", "publish_deliverable", "update_plan"]
    )
    assert not [s for s in stats["sessions"].values() if s["answered_twice"]]
    state, _ = await read_state(LocalHome(tmp_path), "faults")
    assert state.remote_sessions["worker"].replaced == (first,)


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_remote_sessions_lost_again_and_again_end_the_session_with_that_reason(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lose_each(event: Event, standin: Any) -> None:
        if isinstance(event, RemoteEvent) and event.payload.kind == "session":
            standin.add_fault({"kind": "delete_session", "session_id": event.payload.remote_session_id})

    result, events, stats = await run_with(executor, tmp_path, monkeypatch, when=lose_each)
    assert not result.completed
    assert stats["sessions_created"] == MAX_FRUITLESS_LOSSES
    assert len(remote(events, "failed")) == MAX_FRUITLESS_LOSSES
    ended = [e.payload for e in events if e.type == "lifecycle" and e.payload.kind == "session_failed"]
    assert [e.reason for e in ended] == ["RemoteSessionsLost"]
    assert f"{MAX_FRUITLESS_LOSSES} remote sessions in a row were lost" in ended[0].detail


async def test_a_provider_compaction_is_recorded_as_what_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, events, stats = await run_with(
        "anthropic-managed", tmp_path, monkeypatch, when=after_first_result("compact_context")
    )
    assert result.completed, result.detail
    [compacted] = remote(events, "compacted")
    assert compacted.detail.startswith("agent.thread_context_compacted sevt_")
    assert compacted.remote_session_id == remote_id(events)
    assert not [e for e in events if e.type == "summary"]  # Belay's own record is not compacted
    assert provider_problems(stats, subagents=1) == []
