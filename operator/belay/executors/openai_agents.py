"""`executor.type: openai-agents`: an OpenAI Agents API session (`client.beta.agents.sessions`)
decides; Belay runs every tool.

The session has no provider execution environment (`environment: {"type": "none"}`); every Belay
tool is a function tool. What is used of the API (`openai` >= 3.57):

- `sessions.list(metadata=...)` and `sessions.create(environment, agent, input, metadata)`: the
  session and its first message, created once (creation takes no idempotency key, so it is sent
  once, never retried by the SDK, and looked for by its metadata first).
- `sessions.delete`: a session that failed, replaced by a new one seeded from the record.
- `sessions.retrieve`: `status` (`idle`, `in_progress`, `requires_action`, `failed`),
  `required_actions` (the `function_call`s waiting on a result, with their `turn_id`).
- `sessions.events.create(events=[agent.session.input.tool_result], idempotency_key=...)`: each
  result, under a key derived from the record, retried by the SDK with the same key; and
  `agent.session.input.message`, a person's message after a turn that ended without the
  subagent's deliverable, the same way. A
  `400 Unknown pending tool call` is the documented registration race, tried again with the same
  key; when it stays, the call's `function_call_output` item says whether a result is already held.
- `sessions.events.stream`: live events, to wake up; an `agent.session.requires_action` event's
  `session.required_actions` are taken in as they come (documented: "Read the pending calls from
  event.session.required_actions"), and a turn's end is taken from the stream as the SDK's helper
  takes it (its answer's `turn.item.done`, `turn.completed`, then `agent.session.idle` with
  nothing pending) when the stream showed all three; anything else is read with `retrieve`.
- `sessions.turns.list` and `sessions.items.list`: how the last turn ended, and its final answer,
  when the stream did not show it.
- `sessions.artifacts.list` and `.content`: the session's published files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from belay.executors.managed import ManagedExecutor
from belay.executors.provider import (
    Delivery,
    Endpoint,
    ManagedProvider,
    RemoteCall,
    RemoteOutput,
    RemoteStatus,
    RemoteTransient,
    ResultToDeliver,
    Snapshot,
    TaskBrief,
    client_options,
)
from belay.harness.executor import ExecutorContext
from belay.harness.tools import tool_schema

KIND = "openai-agents"
# The events that may change what the executor does next; the rest (deltas, items) do not.
WAKING_EVENTS = frozenset(
    {
        "agent.session.requires_action",
        "agent.session.idle",
        "agent.session.failed",
        "agent.session.turn.completed",
        "agent.session.turn.failed",
        "agent.session.turn.cancelled",
        "error",
    }
)
# The documented race: a result posted before the server registered the pending call. The SDK's
# own helper tries again with the same key after these pauses.
PENDING_RACE_PAUSES_S = (0.1, 0.3, 0.6)


# The `openai` SDK is an optional extra and slow to import: it is imported where it is used, so
# that a session of another executor (and every command that never runs one) does without it.
def connection_errors() -> tuple[type[BaseException], ...]:
    import httpx2
    import openai

    return (openai.APIConnectionError, httpx2.TransportError)


class OpenAIAgentsProvider(ManagedProvider):
    kind = KIND
    waking_events = WAKING_EVENTS
    # A completed turn is followed by `agent.session.idle` (or by the next turn): that is what
    # the executor waits for, not a read of a session still changing.
    busy_events = frozenset({"agent.session.turn.completed"})

    def new_client(self, endpoint: Endpoint) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(**client_options(endpoint))

    @property
    def sessions(self) -> Any:
        return self.client.beta.agents.sessions

    async def find_session(self, metadata: dict[str, str], resources: dict[str, str]) -> str | None:
        async for session in self.sessions.list(metadata=metadata, order="asc", limit=100):
            if all(session.metadata.get(k) == v for k, v in metadata.items()):
                return str(session.id)
        return None

    async def close_session(self, session_id: str) -> None:
        await self.once.beta.agents.sessions.delete(session_id)

    async def create_session(
        self,
        metadata: dict[str, str],
        brief: TaskBrief,
        resources: dict[str, str],
        record_resource: Callable[[str, str], Awaitable[None]],
    ) -> str:
        tools: list[Any] = [
            {
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": tool_schema(spec).parameters,
            }
            for spec in brief.tools
        ]
        session = await self.once.beta.agents.sessions.create(
            environment={"type": "none"},
            agent={"model": brief.model, "instructions": brief.instructions, "tools": tools},
            input=brief.message,
            metadata=metadata,
        )
        return str(session.id)

    def heard(self, event: Any, seen: dict[str, Any]) -> Snapshot | None:
        if event.type == "agent.session.requires_action":
            # Documented: "Read the pending calls from event.session.required_actions."
            pending = pending_calls(event.session)
            return (
                Snapshot(RemoteStatus.WAITING, pending=pending, model=event.session.agent.model)
                if pending
                else None
            )
        # The end of a turn, read as the SDK's own helper reads it (`get_final_result`): the
        # turn's answer from its `turn.item.done` messages, then `turn.completed`, then
        # `agent.session.idle` with nothing pending. What this stream did not show whole (it
        # opened late, or was cut) is read from the session instead, by `snapshot`.
        if event.type == "agent.session.turn.created":
            seen.clear()
        elif event.type == "agent.session.turn.item.done":
            item = event.item
            if item.type == "function_call" and item.status == "completed":
                # The SDK's own helper runs a function tool as soon as the stream shows its call
                # item, before `requires_action`; its `done` carries the arguments whole.
                call = RemoteCall(
                    call_id=item.call_id, name=item.name, arguments=item.arguments, turn_id=item.turn_id
                )
                return Snapshot(RemoteStatus.WAITING, pending=(call,))
            if is_answer(item):
                seen["answer"] = (item.turn_id, answer_text(item))
        elif event.type == "agent.session.turn.completed":
            seen["completed"] = event.turn.id if event.turn.status == "completed" else None
        elif event.type == "agent.session.idle":
            completed, answer = seen.pop("completed", None), seen.pop("answer", None)
            session = event.session
            ended = completed and answer and answer[0] == completed and session.status == "idle"
            if ended and not pending_calls(session):
                return Snapshot(RemoteStatus.DONE, model=session.agent.model, text=answer[1], turn=completed)
        return None

    async def snapshot(self, session_id: str) -> Snapshot:
        session = await self.sessions.retrieve(session_id)
        model = session.agent.model
        if session.status == "failed":
            return Snapshot(RemoteStatus.FAILED, model=model, failure=session.error or "the session failed")
        pending = pending_calls(session)
        if pending:
            return Snapshot(RemoteStatus.WAITING, pending=pending, model=model)
        if session.status != "idle":
            return Snapshot(RemoteStatus.WORKING, model=model)
        turns = await self.sessions.turns.list(session_id, order="desc", limit=1)
        if not turns.data:
            return Snapshot(RemoteStatus.WORKING, model=model)  # idle before its first turn started
        turn = turns.data[0]
        if turn.status in ("failed", "cancelled"):
            why = f"its last turn {turn.id} {turn.status}" + (f": {turn.error}" if turn.error else "")
            return Snapshot(RemoteStatus.FAILED, model=model, failure=why)
        if turn.status != "completed":
            return Snapshot(RemoteStatus.WORKING, model=model)
        text = await self.final_answer(session_id, turn.id)
        return Snapshot(RemoteStatus.DONE, model=model, text=text, turn=turn.id)

    async def final_answer(self, session_id: str, turn_id: str) -> str:
        page = await self.sessions.items.list(session_id, order="desc", limit=20)
        for item in page.data:
            if is_answer(item) and item.turn_id == turn_id:
                return answer_text(item)
        return ""

    async def deliver(self, session_id: str, result: ResultToDeliver) -> Delivery:
        import openai

        event: dict[str, Any] = {
            "type": "agent.session.input.tool_result",
            "turn_id": result.call.turn_id,
            "call_id": result.call.call_id,
            "success": result.ok,
        }
        if result.ok:
            event["output"] = result.output
        else:
            event["error"] = result.error or "failed"
        for pause in (*PENDING_RACE_PAUSES_S, None):
            try:
                await self.sessions.events.create(session_id, events=[event], idempotency_key=result.key)
                return Delivery.ACCEPTED
            except openai.BadRequestError as error:
                if not is_pending_call_race(error, result.call.call_id):
                    raise
            if pause is not None:
                await asyncio.sleep(pause)
        # Not pending: either answered already, or the provider lost track of it.
        async for item in self.sessions.items.list(session_id, order="desc", limit=100):
            if item.type == "function_call_output" and item.call_id == result.call.call_id:
                return Delivery.ALREADY_ANSWERED
        raise RemoteTransient(f"the provider does not know call {result.call.call_id} as pending")

    async def send_message(self, session_id: str, text: str, key: str) -> Delivery:
        # Documented: "A message sent to an idle session starts a new turn." The key makes a
        # second send (by a later attempt) change nothing.
        message = {"role": "user", "content": [{"type": "input_text", "text": text}]}
        await self.sessions.events.create(
            session_id,
            events=[{"type": "agent.session.input.message", "input": [message]}],
            idempotency_key=key,
        )
        return Delivery.ACCEPTED

    async def cancel(self, session_id: str, key: str) -> None:
        await self.sessions.events.create(
            session_id, events=[{"type": "agent.session.input.cancel"}], idempotency_key=key
        )

    async def open_stream(self, session_id: str) -> Any:
        return await self.sessions.events.stream(session_id)

    async def outputs(self, session_id: str) -> list[RemoteOutput]:
        return [
            RemoteOutput(output_id=a.id, name=a.path)
            async for a in self.sessions.artifacts.list(session_id, order="asc")
        ]

    async def download(self, session_id: str, output: RemoteOutput) -> bytes:
        content = await self.sessions.artifacts.content(output.output_id, session_id=session_id)
        return bytes(content.content)


def is_answer(item: Any) -> bool:
    """An assistant message that is not commentary: the turn's answer, as the SDK reads it."""
    return bool(item.type == "message" and item.role == "assistant" and item.phase != "commentary")


def answer_text(message: Any) -> str:
    return "".join(c.text for c in message.content if c.type == "output_text")


def pending_calls(session: Any) -> tuple[RemoteCall, ...]:
    return tuple(
        RemoteCall(call_id=a.call_id, name=a.name, arguments=a.arguments, turn_id=a.turn_id)
        for a in session.required_actions
        if a.type == "function_call"
    )


def is_pending_call_race(error: Any, call_id: str) -> bool:
    body = error.body if isinstance(error.body, dict) else {}
    return bool(
        body.get("code") == "invalid_request_error"
        and body.get("message") == f"Unknown pending tool call: {call_id}"
    )


def executor_for(context: ExecutorContext, endpoint: Endpoint) -> ManagedExecutor:
    return ManagedExecutor(context, OpenAIAgentsProvider(endpoint), connection_errors())
