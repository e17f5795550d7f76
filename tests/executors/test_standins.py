"""The provider stand-ins, driven only through the official SDKs (`openai`, `anthropic`), sync and
async: a whole scripted session, the SDKs' own helpers, idempotent reposts, the refusals the real
API is documented to give, and each fault hook as the SDK surfaces it.

Sync clients run in a worker thread (`asyncio.to_thread`) while the stand-in serves on the test's
event loop; the stand-in's handle may be used from either side."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from belay.executors.standins import anthropic_managed, openai_agents
from belay.executors.standins.common import FaultRefused, read_ready_file
from belay.harness.models.scripted import load_plan, planned_calls
from tests.testenv.polling import wait_until
from tests.testenv.processes import dies_with_this_process

PLAN = """
subagents:
  reviewer:
    steps:
    - id: review
      title: Review the parser change
      actions:
      - tool: read_file
        arguments: {path: repo/confparse/parser.py}
      - tool: run_command
        arguments: {command: python -B -m unittest, cwd: repo}
      - tool: create_ticket
        arguments: {title: 'confparse: values with = crash parse()'}
      - tool: publish_deliverable
        arguments: {path: out/review.md, name: review.md}
  other:
    steps:
    - id: only
      title: One step
      actions: []
"""
KEY = "test-key"
SUBAGENT = {"belay_subagent": "reviewer"}
FAILING_TOOL = "create_ticket"  # answered with an error result: the agent must go on


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path


@pytest.fixture
def expected_calls(plan_file: Path) -> list[tuple[str, dict[str, Any]]]:
    plan = load_plan(plan_file)
    return [(call.name, call.arguments) for call in planned_calls("reviewer", plan.subagents["reviewer"])]


def only_session(stats: dict[str, Any]) -> dict[str, Any]:
    [session] = stats["sessions"].values()
    return session


def each_result_once(session_stats: dict[str, Any]) -> bool:
    return all(
        (entry["received"], entry["accepted"], entry["duplicates"]) == (1, 1, 0)
        for entry in session_stats["tool_results"].values()
    )


# ============================================================================== OpenAI Agents API

AGENT = {"model": "gpt-test", "instructions": "Review the change."}


def openai_client(base_url: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=KEY, **options)


def message_event(text: str) -> dict[str, Any]:
    return {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
    }


def tool_result(action: Any, *, success: bool = True) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "agent.session.input.tool_result",
        "turn_id": action.turn_id,
        "call_id": action.call_id,
        "success": success,
    }
    if success:
        event["output"] = f"{action.name} done"
    else:
        event["error"] = "the tool failed"
    return event


def answer_by_polling(client: openai.OpenAI, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Answer every call the session asks for, reading it from `required_actions`."""
    asked: list[tuple[str, dict[str, Any]]] = []
    while True:
        session = client.beta.agents.sessions.retrieve(session_id)
        if session.status == "idle":
            return asked
        assert session.status == "requires_action"
        [action] = session.required_actions
        assert action.type == "function_call"
        asked.append((action.name, json.loads(str(action.arguments))))
        client.beta.agents.sessions.events.create(
            session_id,
            events=[tool_result(action, success=action.name != FAILING_TOOL)],
            idempotency_key=f"result-{action.call_id}",
        )


def new_none_session(client: openai.OpenAI, text: str = "Review the parser change.") -> Any:
    return client.beta.agents.sessions.create(
        environment={"type": "none"}, agent=AGENT, metadata=SUBAGENT, input=text
    )


async def test_openai_whole_scripted_session_sync(plan_file: Path, expected_calls: list[Any]) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> dict[str, Any]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            assert session.status == "requires_action"  # the input started the turn at once
            asked = answer_by_polling(client, session.id)
            items = list(client.beta.agents.sessions.items.list(session.id, order="asc", limit=3))
            turns = list(client.beta.agents.sessions.turns.list(session.id))
            [artifact] = list(client.beta.agents.sessions.artifacts.list(session.id))
            content = client.beta.agents.sessions.artifacts.content(artifact.id, session_id=session.id).read()
            turn_items = list(
                client.beta.agents.sessions.turns.items.list(turns[0].id, session_id=session.id)
            )
            return {
                "asked": asked,
                "items": items,
                "turns": turns,
                "turn_items": turn_items,
                "artifact": artifact,
                "content": content,
            }

        seen = await asyncio.to_thread(scenario)
        stats = standin.stats()

    assert seen["asked"] == expected_calls
    items = seen["items"]
    assert [item.type for item in items] == ["message"] + ["function_call", "function_call_output"] * len(
        expected_calls
    ) + ["message"]
    final = items[-1]
    assert (final.role, final.phase, final.status) == ("assistant", "final_answer", "completed")
    assert "- create_ticket: failed" in final.output_text
    assert [item.id for item in seen["turn_items"]] == [
        item.id for item in reversed(items)
    ]  # desc by default
    [turn] = seen["turns"]
    assert turn.status == "completed"
    assert seen["artifact"].path == "/workspace/outputs/reviewer-remote-notes.md"
    assert seen["content"] == final.output_text.encode()
    assert seen["artifact"].size_bytes == len(seen["content"])
    assert stats["sessions_created"] == 1
    session_stats = only_session(stats)
    assert session_stats["calls_requested"] == len(expected_calls)
    assert len(session_stats["tool_results"]) == len(expected_calls)
    assert each_result_once(session_stats)
    assert not session_stats["any_call_answered_twice"]
    [entry] = session_stats["inputs"]
    assert (entry["received"], entry["accepted"]) == (1, 1)


async def test_openai_async_client_follows_the_turn_on_the_event_stream(
    plan_file: Path, expected_calls: list[Any]
) -> None:
    async with openai_agents.running(plan_file) as standin:
        client = openai.AsyncOpenAI(base_url=standin.base_url, api_key=KEY)
        session = await client.beta.agents.sessions.create(
            environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
        )
        assert session.status == "idle"
        asked = []
        stream = await client.beta.agents.sessions.events.stream(session.id)
        await client.beta.agents.sessions.events.create(
            session.id, events=[message_event("Review it.")], idempotency_key="input-1"
        )
        async for event in stream:
            if event.type == "agent.session.turn.item.added" and event.item.type == "function_call":
                call = event.item
                asked.append((call.name, json.loads(str(call.arguments))))
                await client.beta.agents.sessions.events.create(
                    session.id,
                    events=[tool_result(call, success=call.name != FAILING_TOOL)],
                    idempotency_key=f"result-{call.call_id}",
                )
            if event.type == "agent.session.idle":
                break
        await stream.close()
        finished = await client.beta.agents.sessions.retrieve(session.id)
        stats = standin.stats()

    assert asked == expected_calls
    assert (finished.status, finished.required_actions) == ("idle", [])
    assert each_result_once(only_session(stats))


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_openai_sdk_stream_helper_completes_a_session(
    plan_file: Path, expected_calls: list[Any], flavour: str
) -> None:
    handled: list[tuple[str, dict[str, Any]]] = []

    def handlers() -> dict[str, Callable[[dict[str, Any]], str]]:
        def handler(name: str) -> Callable[[dict[str, Any]], str]:
            def run(arguments: dict[str, Any]) -> str:
                handled.append((name, arguments))
                return f"{name} ran"

            return run

        return {name: handler(name) for name, _ in expected_calls}

    async with openai_agents.running(plan_file) as standin:
        if flavour == "sync":

            def scenario() -> tuple[str, bytes]:
                client = openai_client(standin.base_url)
                session = client.beta.agents.sessions.create(
                    environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
                )
                with client.beta.agents.sessions.stream(
                    session.id, input="Review it.", tool_handlers=handlers()
                ) as stream:
                    result = stream.get_final_result()
                [artifact] = client.beta.agents.sessions.artifacts.list(session.id)
                return result.output_text, client.beta.agents.sessions.artifacts.content(
                    artifact.id, session_id=session.id
                ).read()

            text, content = await asyncio.to_thread(scenario)
        else:
            client = openai.AsyncOpenAI(base_url=standin.base_url, api_key=KEY)
            session = await client.beta.agents.sessions.create(
                environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
            )
            async with client.beta.agents.sessions.stream(
                session.id, input="Review it.", tool_handlers=handlers()
            ) as stream:
                result = await stream.get_final_result()
            [artifact] = [a async for a in client.beta.agents.sessions.artifacts.list(session.id)]
            text = result.output_text
            content = await (
                await client.beta.agents.sessions.artifacts.content(artifact.id, session_id=session.id)
            ).aread()
        stats = standin.stats()

    assert handled == expected_calls
    assert content == text.encode()
    assert "- create_ticket: succeeded" in text
    assert each_result_once(only_session(stats))


async def test_openai_session_create_stream_with_tool_handlers(
    plan_file: Path, expected_calls: list[Any]
) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> list[str]:
            client = openai_client(standin.base_url)
            stream = client.beta.agents.sessions.create(
                environment={"type": "none"},
                agent=AGENT,
                metadata=SUBAGENT,
                input="Review it.",
                stream=True,
                tool_handlers={name: (lambda arguments: "done") for name, _ in expected_calls},
            )
            return [event.type for event in stream]

        types = await asyncio.to_thread(scenario)
        stats = standin.stats()

    assert types[0] == "agent.session.created"
    assert types[-2:] == ["agent.session.turn.completed", "agent.session.idle"]  # the stream ends there
    assert each_result_once(only_session(stats))
    assert only_session(stats)["calls_requested"] == len(expected_calls)


async def test_openai_idempotent_repost_is_counted_once(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[Any, Any, int]:
            client = openai_client(standin.base_url)
            session = client.beta.agents.sessions.create(
                environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
            )
            for _ in range(2):
                client.beta.agents.sessions.events.create(
                    session.id, events=[message_event("Review it.")], idempotency_key="input-1"
                )
            first = client.beta.agents.sessions.retrieve(session.id).required_actions[0]
            for _ in range(2):
                client.beta.agents.sessions.events.create(
                    session.id, events=[tool_result(first)], idempotency_key="result-1"
                )
            second = client.beta.agents.sessions.retrieve(session.id).required_actions[0]
            turns = len(list(client.beta.agents.sessions.turns.list(session.id)))
            return first, second, turns

        first, second, turns = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert turns == 1
    assert second.call_id != first.call_id
    assert session_stats["calls_requested"] == 2  # the repost did not move the agent on again
    [entry] = session_stats["inputs"]
    assert (entry["received"], entry["accepted"], entry["duplicates"]) == (2, 1, 1)
    result = session_stats["tool_results"][first.call_id]
    assert (result["received"], result["accepted"], result["duplicates"]) == (2, 1, 1)
    assert not session_stats["any_call_answered_twice"]


async def test_openai_conflicting_idempotency_key_is_409_and_not_retried(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> openai.ConflictError:
            client = openai_client(standin.base_url)  # default max_retries=2: a retried 409 would show
            session = new_none_session(client)
            [action] = session.required_actions
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(action)], idempotency_key="k"
            )
            with pytest.raises(openai.ConflictError) as caught:
                client.beta.agents.sessions.events.create(
                    session.id, events=[tool_result(action, success=False)], idempotency_key="k"
                )
            return caught.value

        error = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert error.response.headers["x-should-retry"] == "false"
    assert session_stats["idempotency_conflicts"] == 1
    assert each_result_once(session_stats)


async def test_openai_result_for_no_pending_call_is_the_documented_400(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[openai.BadRequestError, openai.BadRequestError, str]:
            client = openai_client(standin.base_url, max_retries=0)
            session = new_none_session(client)
            [action] = session.required_actions
            with pytest.raises(openai.BadRequestError) as unknown:
                client.beta.agents.sessions.events.create(
                    session.id,
                    events=[{**tool_result(action), "call_id": "call_nobody"}],
                    idempotency_key="bogus",
                )
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(action)], idempotency_key="a"
            )
            with pytest.raises(openai.BadRequestError) as answered:  # answered already, under another key
                client.beta.agents.sessions.events.create(
                    session.id, events=[tool_result(action)], idempotency_key="b"
                )
            return unknown.value, answered.value, action.call_id

        unknown, answered, call_id = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert unknown.body == {
        "message": "Unknown pending tool call: call_nobody",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
    assert isinstance(answered.body, dict)
    assert answered.body["message"] == f"Unknown pending tool call: {call_id}"
    result = session_stats["tool_results"][call_id]
    assert (result["received"], result["accepted"], result["rejected"]) == (2, 1, 1)
    assert not session_stats["any_call_answered_twice"]


async def test_openai_refuses_requests_without_the_beta_header_or_the_key(plan_file: Path) -> None:
    async with openai_agents.running(plan_file, api_key=KEY) as standin:

        def scenario() -> None:
            client = openai_client(standin.base_url, max_retries=0)
            with pytest.raises(openai.BadRequestError, match="OpenAI-Beta"):
                client.get("/agents/sessions", cast_to=object)  # a generic call adds no beta header
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=standin.base_url, api_key="wrong").beta.agents.sessions.list()
            with pytest.raises(openai.BadRequestError, match="input is required"):
                client.beta.agents.sessions.create(
                    environment={"type": "none"}, agent=AGENT, metadata=SUBAGENT
                )
            with pytest.raises(openai.BadRequestError, match="belay_subagent"):
                client.beta.agents.sessions.create(
                    environment={"type": "none"},
                    agent=AGENT,
                    metadata={"belay_subagent": "nobody"},
                    input="x",
                )

        await asyncio.to_thread(scenario)
        assert standin.stats()["sessions_created"] == 0


async def test_openai_lists_sessions_by_metadata_and_pages_them(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[list[str], list[str], list[str]]:
            client = openai_client(standin.base_url)
            made = {}
            for name in ("a", "b", "c"):
                made[name] = client.beta.agents.sessions.create(
                    environment={"type": "openai_hosted"},
                    agent=AGENT,
                    metadata={**SUBAGENT, "belay_run": "r1" if name != "c" else "r2"},
                ).id
            r1 = [s.id for s in client.beta.agents.sessions.list(metadata={"belay_run": "r1"}, limit=1)]
            every = [s.id for s in client.beta.agents.sessions.list(order="asc", limit=2)]
            return r1, every, [made["a"], made["b"], made["c"]]

        r1, every, made = await asyncio.to_thread(scenario)

    assert r1 == [made[1], made[0]]  # newest first by default, one page at a time
    assert every == made


async def test_openai_deleted_session_answers_404(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[Any, list[str]]:
            client = openai_client(standin.base_url)
            deleted_by_api = new_none_session(client)
            confirmation = client.beta.agents.sessions.delete(deleted_by_api.id)
            with pytest.raises(openai.NotFoundError):
                client.beta.agents.sessions.retrieve(deleted_by_api.id)
            session = new_none_session(client)
            stream = client.beta.agents.sessions.events.stream(session.id)
            standin.add_fault({"kind": "delete_session", "session_id": session.id})
            seen = [event.type for event in stream]  # the stream ends, cleanly
            with pytest.raises(openai.NotFoundError):
                client.beta.agents.sessions.items.list(session.id)
            with pytest.raises(openai.NotFoundError):
                client.beta.agents.sessions.events.create(session.id, events=[message_event("again")])
            return confirmation, seen

        confirmation, seen = await asyncio.to_thread(scenario)
        stats = standin.stats()

    assert (confirmation.deleted, confirmation.object) == (True, "agent.session.deleted")
    assert seen == []
    assert [s["status"] for s in stats["sessions"].values()] == ["deleted", "deleted"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_openai_abrupt_stream_cut_raises_connection_error(plan_file: Path, flavour: str) -> None:
    async with openai_agents.running(plan_file) as standin:
        if flavour == "sync":

            def scenario() -> tuple[list[str], Any]:
                client = openai_client(standin.base_url)
                session = new_none_session(client)
                stream = client.beta.agents.sessions.events.stream(session.id)
                standin.add_fault({"kind": "cut_stream", "after_events": 2, "mode": "abort"})
                client.beta.agents.sessions.events.create(
                    session.id, events=[tool_result(session.required_actions[0])]
                )
                seen = []
                with pytest.raises(openai.APIConnectionError):
                    for event in stream:
                        seen.append(event.type)
                return seen, client.beta.agents.sessions.retrieve(session.id)

            seen, after = await asyncio.to_thread(scenario)
        else:
            client = openai.AsyncOpenAI(base_url=standin.base_url, api_key=KEY)
            session = await client.beta.agents.sessions.create(
                environment={"type": "none"}, agent=AGENT, metadata=SUBAGENT, input="go"
            )
            stream = await client.beta.agents.sessions.events.stream(session.id)
            standin.add_fault({"kind": "cut_stream", "after_events": 2, "mode": "abort"})
            await client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(session.required_actions[0])]
            )
            seen = []
            with pytest.raises(openai.APIConnectionError):
                async for event in stream:
                    seen.append(event.type)
            after = await client.beta.agents.sessions.retrieve(session.id)

    assert seen == ["agent.session.in_progress", "agent.session.turn.item.added"]
    # The events the client missed still happened: the agent asks for the next call.
    assert after.status == "requires_action"
    assert after.required_actions[0].name == "read_file"


async def test_openai_clean_stream_cut_ends_iteration_and_the_helper_says_so(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[list[str], str]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            stream = client.beta.agents.sessions.events.stream(session.id)
            standin.add_fault({"kind": "cut_stream", "after_events": 3, "mode": "clean"})
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(session.required_actions[0])]
            )
            seen = [event.type for event in stream]

            other = client.beta.agents.sessions.create(
                environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
            )
            standin.add_fault(
                {"kind": "cut_stream", "after_events": 3, "mode": "clean", "session_id": other.id}
            )
            with (
                pytest.raises(RuntimeError) as ended,
                client.beta.agents.sessions.stream(
                    other.id, input="go", tool_handlers={"update_plan": lambda arguments: "ok"}
                ) as helper,
            ):
                helper.until_done()
            return seen, str(ended.value)

        seen, message = await asyncio.to_thread(scenario)

    assert len(seen) == 3
    assert message == "Session event stream ended before the turn reached idle or failed"


async def test_openai_server_error_is_retried_by_the_sdk_with_the_same_key(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[list[str], openai.InternalServerError]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            call_ids = []
            standin.add_fault({"kind": "server_error", "method": "POST", "path": "/events$", "status": 503})
            action = client.beta.agents.sessions.retrieve(session.id).required_actions[0]
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(action)], idempotency_key="1"
            )
            call_ids.append(action.call_id)
            standin.add_fault(
                {"kind": "server_error", "method": "POST", "path": "/events$", "after_apply": True}
            )
            action = client.beta.agents.sessions.retrieve(session.id).required_actions[0]
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(action)], idempotency_key="2"
            )
            call_ids.append(action.call_id)
            standin.add_fault(
                {"kind": "server_error", "path": "/agents/sessions/[^/]+$", "method": "GET", "times": 3}
            )
            with pytest.raises(openai.InternalServerError) as exhausted:  # 1 try + 2 retries, all 500
                client.beta.agents.sessions.retrieve(session.id)
            return call_ids, exhausted.value

        (before, after), exhausted = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())
        served = standin.faults()["served"]

    assert exhausted.status_code == 500
    refused = session_stats["tool_results"][before]
    assert (refused["received"], refused["accepted"], refused["duplicates"]) == (1, 1, 0)
    lost_answer = session_stats["tool_results"][after]
    assert (lost_answer["received"], lost_answer["accepted"], lost_answer["duplicates"]) == (2, 1, 1)
    assert session_stats["calls_requested"] == 3
    assert len(served) == 1 + 1 + 3
    assert standin.faults()["armed"] == []


async def test_openai_duplicate_delivery_repeats_the_call_event_and_the_helper_runs_it_once(
    plan_file: Path, expected_calls: list[Any]
) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[list[str], list[str]]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            stream = client.beta.agents.sessions.events.stream(session.id)
            standin.add_fault({"kind": "duplicate_event"})
            client.beta.agents.sessions.events.create(
                session.id, events=[tool_result(session.required_actions[0])]
            )
            raw = []
            for event in stream:
                if event.type == "agent.session.turn.item.added" and event.item.type == "function_call":
                    raw.append(event.event_id)
                if event.type == "agent.session.requires_action":
                    break
            stream.close()

            calls = []
            other = client.beta.agents.sessions.create(
                environment={"type": "openai_hosted"}, agent=AGENT, metadata=SUBAGENT
            )
            standin.add_fault({"kind": "duplicate_event", "session_id": other.id})
            handlers = {
                name: (lambda arguments, name=name: calls.append(name) or "ok") for name, _ in expected_calls
            }
            with client.beta.agents.sessions.stream(other.id, input="go", tool_handlers=handlers) as helper:
                helper.until_done()
            return raw, calls

        raw, calls = await asyncio.to_thread(scenario)
        stats = standin.stats()

    assert len(raw) == 2 and raw[0] == raw[1]
    assert calls == [name for name, _ in expected_calls]
    assert all(each_result_once(session) for session in stats["sessions"].values())


async def test_openai_failed_session_surfaces_on_the_stream_and_refuses_input(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[list[str], Any]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            stream = client.beta.agents.sessions.events.stream(session.id)
            standin.add_fault({"kind": "fail_session", "session_id": session.id})
            seen = []
            for event in stream:
                seen.append(event.type)
                if event.type == "agent.session.failed":
                    break
            stream.close()
            with pytest.raises(openai.BadRequestError):
                client.beta.agents.sessions.events.create(session.id, events=[message_event("again")])
            [turn] = client.beta.agents.sessions.turns.list(session.id)
            return seen, (client.beta.agents.sessions.retrieve(session.id), turn)

        seen, (session, turn) = await asyncio.to_thread(scenario)

    assert seen == ["agent.session.turn.failed", "agent.session.failed"]
    assert (session.status, session.required_actions) == ("failed", [])
    assert session.error
    assert turn.status == "failed"


async def test_openai_cancel_ends_the_turn_and_the_next_turn_asks_again(plan_file: Path) -> None:
    async with openai_agents.running(plan_file) as standin:

        def scenario() -> tuple[Any, Any, Any]:
            client = openai_client(standin.base_url)
            session = new_none_session(client)
            client.beta.agents.sessions.events.create(
                session.id, events=[{"type": "agent.session.input.cancel"}]
            )
            cancelled = client.beta.agents.sessions.retrieve(session.id)
            client.beta.agents.sessions.events.create(session.id, events=[message_event("Go on.")])
            resumed = client.beta.agents.sessions.retrieve(session.id)
            return session, cancelled, resumed

        first, cancelled, resumed = await asyncio.to_thread(scenario)

    assert (cancelled.status, cancelled.required_actions) == ("idle", [])
    [asked_again] = resumed.required_actions
    assert asked_again.name == first.required_actions[0].name
    assert asked_again.call_id != first.required_actions[0].call_id


# ========================================================================= Claude Managed Agents

TOOLS = [
    {"type": "custom", "name": name, "description": name, "input_schema": {"type": "object"}}
    for name in ("update_plan", "read_file", "run_command", "create_ticket", "publish_deliverable")
]


def anthropic_client(base_url: str, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key=KEY, **options)


def user_message(text: str) -> dict[str, Any]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def custom_result(use: Any) -> dict[str, Any]:
    failed = use.name == FAILING_TOOL
    return {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": use.id,
        "content": [{"type": "text", "text": "the tool failed" if failed else f"{use.name} done"}],
        "is_error": failed,
    }


def new_managed_session(client: anthropic.Anthropic, **options: Any) -> Any:
    agent = client.beta.agents.create(name="reviewer", model="claude-test", tools=TOOLS)
    environment = client.beta.environments.create(name="belay")
    return client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, metadata=SUBAGENT, **options
    )


def pending_uses(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    """Reconcile from history: custom tool uses with no result yet."""
    history = list(client.beta.sessions.events.list(session_id, limit=4))
    answered = {event.custom_tool_use_id for event in history if event.type == "user.custom_tool_result"}
    return [event for event in history if event.type == "agent.custom_tool_use" and event.id not in answered]


async def test_anthropic_whole_scripted_session_sync(plan_file: Path, expected_calls: list[Any]) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> dict[str, Any]:
            client = anthropic_client(standin.base_url)
            session = new_managed_session(client)
            assert session.status == "idle"
            streamed, asked, stop_reasons = [], [], []
            with client.beta.sessions.events.stream(session.id) as stream:
                client.beta.sessions.events.send(session.id, events=[user_message("Review the change.")])
                for event in stream:
                    streamed.append(event.id)
                    if event.type == "agent.custom_tool_use":
                        asked.append((event.name, event.input))
                    if event.type == "session.status_idle":
                        stop_reasons.append(event.stop_reason.type)
                        if event.stop_reason.type == "end_turn":
                            break
                        [use_id] = event.stop_reason.event_ids
                        [use] = pending_uses(client, session.id)
                        assert use.id == use_id
                        client.beta.sessions.events.send(session.id, events=[custom_result(use)])
            history = list(client.beta.sessions.events.list(session.id, limit=5))
            [notes] = list(client.beta.files.list(scope_id=session.id))
            content = client.beta.files.download(notes.id).read()
            return {
                "streamed": streamed,
                "asked": asked,
                "stop_reasons": stop_reasons,
                "history": history,
                "notes": notes,
                "content": content,
                "session": client.beta.sessions.retrieve(session.id),
            }

        seen = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert seen["asked"] == expected_calls
    assert seen["stop_reasons"] == ["requires_action"] * len(expected_calls) + ["end_turn"]
    history = seen["history"]
    assert [event.id for event in history] == seen["streamed"]  # the live stream and the history agree
    [final] = [event for event in history if event.type == "agent.message"]
    text = final.content[0].text
    assert "- create_ticket: failed" in text
    assert (seen["notes"].filename, seen["notes"].scope.type) == ("reviewer-remote-notes.md", "session")
    assert seen["content"] == text.encode()
    assert seen["session"].status == "idle"
    assert session_stats["calls_requested"] == len(expected_calls)
    assert each_result_once(session_stats)
    assert not session_stats["any_call_answered_twice"]


async def test_anthropic_async_client_reconciles_from_the_list_then_follows_the_stream(
    plan_file: Path, expected_calls: list[Any]
) -> None:
    async with anthropic_managed.running(plan_file) as standin:
        client = anthropic.AsyncAnthropic(base_url=standin.base_url, api_key=KEY)
        agent = await client.beta.agents.create(name="reviewer", model="claude-test", tools=TOOLS)
        environment = await client.beta.environments.create(name="belay")
        session = await client.beta.sessions.create(
            agent={"type": "agent", "id": agent.id},
            environment_id=environment.id,
            metadata=SUBAGENT,
            initial_events=[user_message("Review the change.")],
        )
        # The agent started before anyone listened: open the stream first, then settle from history.
        stream = await client.beta.sessions.events.stream(session.id)
        history = [event async for event in client.beta.sessions.events.list(session.id)]
        [use] = [event for event in history if event.type == "agent.custom_tool_use"]
        asked = [(use.name, use.input)]
        echo = await client.beta.sessions.events.send(session.id, events=[custom_result(use)])
        async for event in stream:
            if event.type == "agent.custom_tool_use":
                asked.append((event.name, event.input))
                await client.beta.sessions.events.send(session.id, events=[custom_result(event)])
            if event.type == "session.status_idle" and event.stop_reason.type == "end_turn":
                break
        await stream.close()
        files = [f async for f in client.beta.files.list(scope_id=session.id)]
        session_stats = only_session(standin.stats())

    assert echo.data is not None and echo.data[0].processed_at is not None
    assert asked == expected_calls
    assert [f.filename for f in files] == ["reviewer-remote-notes.md"]
    assert each_result_once(session_stats)


async def test_anthropic_counts_a_call_answered_twice_and_refuses_an_unknown_one(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> str:
            client = anthropic_client(standin.base_url, max_retries=0)
            session = new_managed_session(client, initial_events=[user_message("go")])
            [use] = pending_uses(client, session.id)
            client.beta.sessions.events.send(session.id, events=[custom_result(use)])
            client.beta.sessions.events.send(session.id, events=[custom_result(use)])  # no key: a new answer
            with pytest.raises(anthropic.BadRequestError):
                client.beta.sessions.events.send(
                    session.id,
                    events=[{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nobody"}],
                )
            return use.id

        use_id = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert session_stats["answered_twice"] == [use_id]
    assert session_stats["calls_requested"] == 2  # the second answer did not move the agent on
    assert session_stats["tool_results"]["sevt_nobody"]["rejected"] == 1


async def test_anthropic_refuses_requests_without_the_beta_header_or_the_key(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file, api_key=KEY) as standin:

        def scenario() -> None:
            client = anthropic_client(standin.base_url, max_retries=0)
            with pytest.raises(anthropic.BadRequestError, match="managed-agents-2026-04-01"):
                client.get("/v1/sessions", cast_to=object)  # a generic call adds no beta header
            with pytest.raises(anthropic.AuthenticationError):
                anthropic.Anthropic(base_url=standin.base_url, api_key="wrong").beta.sessions.list()
            assert list(client.beta.files.list()) == []  # the files API needs no managed-agents beta

        await asyncio.to_thread(scenario)


@pytest.mark.parametrize("mode", ["abort", "clean"])
async def test_anthropic_stream_cut(plan_file: Path, mode: str) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> tuple[list[str], BaseException | None, Any]:
            client = anthropic_client(standin.base_url)
            session = new_managed_session(client)
            seen: list[str] = []
            raised = None
            with client.beta.sessions.events.stream(session.id) as stream:
                standin.add_fault({"kind": "cut_stream", "after_events": 2, "mode": mode})
                client.beta.sessions.events.send(session.id, events=[user_message("go")])
                try:
                    seen.extend(event.type for event in stream)
                except Exception as error:
                    raised = error
            return seen, raised, client.beta.sessions.retrieve(session.id)

        seen, raised, session = await asyncio.to_thread(scenario)

    assert seen == ["user.message", "session.status_running"]
    if mode == "abort":
        # A cut mid-body: bare from the stream's iteration, or wrapped by the SDK when the cut
        # reaches it while it still reads the response; the executor takes both as unavailable.
        assert isinstance(raised, httpx2.RemoteProtocolError | anthropic.APIConnectionError), raised
        assert isinstance(raised, httpx2.RemoteProtocolError) or isinstance(
            raised.__cause__, httpx2.RemoteProtocolError
        ), raised.__cause__
    else:
        assert raised is None
    assert session.status == "idle"  # waiting on the call the client did not see


async def test_anthropic_server_error_after_the_send_took_effect_makes_the_retry_answer_twice(
    plan_file: Path,
) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> tuple[str, str]:
            client = anthropic_client(standin.base_url)  # the SDK retries a 5xx; there is no key to dedupe
            session = new_managed_session(client, initial_events=[user_message("go")])
            [first] = pending_uses(client, session.id)
            standin.add_fault({"kind": "server_error", "method": "POST", "path": "/events$"})
            client.beta.sessions.events.send(session.id, events=[custom_result(first)])
            [second] = pending_uses(client, session.id)
            standin.add_fault(
                {"kind": "server_error", "method": "POST", "path": "/events$", "after_apply": True}
            )
            client.beta.sessions.events.send(session.id, events=[custom_result(second)])
            return first.id, second.id

        first, second = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert session_stats["tool_results"][first]["accepted"] == 1
    assert session_stats["tool_results"][second]["accepted"] == 2
    assert session_stats["answered_twice"] == [second]


async def test_anthropic_duplicate_delivery_repeats_the_tool_use_on_the_stream(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> tuple[list[str], list[str]]:
            client = anthropic_client(standin.base_url)
            session = new_managed_session(client)
            uses = []
            with client.beta.sessions.events.stream(session.id) as stream:
                standin.add_fault({"kind": "duplicate_event", "session_id": session.id})
                client.beta.sessions.events.send(session.id, events=[user_message("go")])
                for event in stream:
                    if event.type == "agent.custom_tool_use":
                        uses.append(event.id)
                    if event.type == "session.status_idle":
                        break
            listed = [
                e.id for e in client.beta.sessions.events.list(session.id, types=["agent.custom_tool_use"])
            ]
            return uses, listed

        uses, listed = await asyncio.to_thread(scenario)

    assert len(uses) == 2 and uses[0] == uses[1]
    assert listed == uses[:1]  # history holds it once


async def test_anthropic_rescheduling_queues_sends_and_comes_back(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> dict[str, Any]:
            client = anthropic_client(standin.base_url)
            session = new_managed_session(client, initial_events=[user_message("go")])
            [use] = pending_uses(client, session.id)
            standin.add_fault({"kind": "reschedule_session", "session_id": session.id, "reads": 2})
            during = client.beta.sessions.retrieve(session.id).status  # read 1
            echo = client.beta.sessions.events.send(session.id, events=[custom_result(use)])
            queued = [  # read 2: the session comes back once this is answered
                e for e in client.beta.sessions.events.list(session.id) if e.type == "user.custom_tool_result"
            ]
            after = client.beta.sessions.retrieve(session.id)
            history = list(client.beta.sessions.events.list(session.id))
            return {"during": during, "echo": echo, "queued": queued, "after": after, "history": history}

        seen = await asyncio.to_thread(scenario)
        session_stats = only_session(standin.stats())

    assert seen["during"] == "rescheduling"
    assert seen["echo"].data[0].processed_at is None
    assert [event.processed_at for event in seen["queued"]] == [None]
    assert seen["after"].status == "idle"
    types = [event.type for event in seen["history"]]
    assert "session.status_rescheduled" in types
    assert types[-2:] == ["agent.custom_tool_use", "session.status_idle"]  # processed: the next call
    assert all(event.processed_at is not None for event in seen["history"])
    assert session_stats["calls_requested"] == 2


async def test_anthropic_terminated_and_archived_sessions_refuse_sends(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> tuple[list[str], str, str]:
            client = anthropic_client(standin.base_url, max_retries=0)
            session = new_managed_session(client, initial_events=[user_message("go")])
            seen = []
            with client.beta.sessions.events.stream(session.id) as stream:
                standin.add_fault({"kind": "terminate_session", "session_id": session.id})
                for event in stream:
                    seen.append(event.type)
                    if event.type == "session.status_terminated":
                        break
            with pytest.raises(anthropic.BadRequestError):
                client.beta.sessions.events.send(session.id, events=[user_message("again")])
            other = new_managed_session(client)
            archived = client.beta.sessions.archive(other.id)
            with pytest.raises(anthropic.BadRequestError):
                client.beta.sessions.events.send(other.id, events=[user_message("again")])
            return seen, client.beta.sessions.retrieve(session.id).status, archived.status

        seen, terminated, archived = await asyncio.to_thread(scenario)

    assert seen == ["session.error", "session.status_terminated"]
    assert (terminated, archived) == ("terminated", "terminated")


async def test_anthropic_deleted_session_answers_404(plan_file: Path) -> None:
    async with anthropic_managed.running(plan_file) as standin:

        def scenario() -> tuple[list[str], Any]:
            client = anthropic_client(standin.base_url)
            session = new_managed_session(client, initial_events=[user_message("go")])
            with client.beta.sessions.events.stream(session.id) as stream:
                standin.add_fault({"kind": "delete_session", "session_id": session.id})
                seen = [event.type for event in stream]  # ends after session.deleted
            with pytest.raises(anthropic.NotFoundError):
                client.beta.sessions.retrieve(session.id)
            with pytest.raises(anthropic.NotFoundError):
                client.beta.sessions.events.list(session.id)
            other = new_managed_session(client)
            deleted = client.beta.sessions.delete(other.id)
            with pytest.raises(anthropic.NotFoundError):
                client.beta.sessions.events.send(other.id, events=[user_message("go")])
            return seen, deleted

        seen, deleted = await asyncio.to_thread(scenario)

    assert seen == ["session.deleted"]
    assert deleted.type == "session_deleted"


# ============================================================================ handle and command


async def test_faults_that_do_not_apply_are_refused(plan_file: Path) -> None:
    with pytest.raises(FaultRefused):
        openai_agents.OpenAIAgentsStandin(
            load_plan(plan_file), faults=[{"kind": "delete_session", "session_id": "s"}]
        )
    async with openai_agents.running(plan_file) as standin:
        for fault in (
            {"kind": "terminate_session", "session_id": "s"},  # an Anthropic fault
            {"kind": "fail_session", "session_id": "sess_nobody"},
            {"kind": "server_error", "path": "/", "method": "GET", "after_apply": True},
            {"kind": "cut_stream", "after_events": -1},
        ):
            with pytest.raises(FaultRefused):
                standin.add_fault(fault)
        assert standin.faults()["armed"] == []


def wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    wait_until(
        path.exists,
        "the stand-in to become ready",
        timeout=60,
        interval=0.05,
        while_running=process,
        describe=lambda: process.stderr.read() if process.stderr and process.poll() is not None else "",
    )


@pytest.mark.parametrize("module", ["openai_agents", "anthropic_managed"])
def test_command_serves_until_sigterm(plan_file: Path, tmp_path: Path, module: str) -> None:
    ready = tmp_path / "ready.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"belay.executors.standins.{module}",
            "--plan",
            str(plan_file),
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=dies_with_this_process(),
    )
    try:
        wait_for(ready, process)
        announced = read_ready_file(ready)
        assert announced.pid == process.pid
        if module == "openai_agents":
            client = openai_client(announced.base_url)
            session = new_none_session(client)
            assert client.beta.agents.sessions.retrieve(session.id).status == "requires_action"
        else:
            session = new_managed_session(anthropic_client(announced.base_url))
            assert session.status == "idle"
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert stdout.splitlines()[0] == announced.base_url


def test_command_reports_a_bad_plan_in_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("subagents: {}\nextra: 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "belay.executors.standins.openai_agents", "--plan", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    # Refused without quoting the file back (a key of it may be a secret's line).
    assert line.startswith("error: ") and "not a scripted plan" in line and "extra" not in line
