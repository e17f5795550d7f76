"""`executor.type: anthropic-managed`: a Claude Managed Agents session (`client.beta.agents`,
`environments`, `sessions`, `sessions.events`) decides; Belay runs every tool as a custom tool.

What is used of the API (`anthropic` >= 2.14):

- `agents.create` (model, system prompt, custom tools) and `environments.create` (a cloud
  environment, which the custom tools never use): each recorded as soon as it exists.
- `sessions.list(agent_id=...)` and `sessions.create(agent, environment_id, metadata,
  initial_events=[user.message])`: the session and its first message in one request, created
  once (no idempotency key anywhere in this API: it is sent once, never retried by the SDK, and
  looked for among the agent's sessions by its metadata first). A replacement session reuses the
  agent and the environment, made again (and recorded) when the provider no longer has them.
- `sessions.delete`: a session that was terminated, replaced by a new one seeded from the record.
- `sessions.retrieve`: `status` (`idle`, `running`, `rescheduling`, `terminated`).
- `sessions.events.list`: the history. A call is pending when the last `session.status_idle`
  names it (`stop_reason: requires_action`) or, while running, when an `agent.custom_tool_use`
  came after the last idle; it is answered when a `user.custom_tool_result` names it.
- `sessions.events.send([user.message])`: a person's message after a turn that ended without the
  subagent's deliverable, unless the history shows it since the agent last ended its turn.
- `sessions.events.send([user.custom_tool_result])`: each result, only after the history shows
  no result for that call, so a call is never answered twice by Belay (this cannot hold for a
  send still in flight at the provider while a new attempt reads the history; see
  docs/executors.md).
- `sessions.events.stream`: live events, to wake up; an `agent.custom_tool_use` event's call is
  taken in as it comes (documented: the result may be sent "as soon as this event arrives");
  anything else is read from the history.
- `beta.files.list(scope_id=<session>)` and `files.download`: the session's output files.
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
    classify,
    client_options,
)
from belay.harness.executor import ExecutorContext
from belay.harness.tools import tool_schema

KIND = "anthropic-managed"
FILES_BETA = "files-api-2025-04-14"
PAGE = 1000
WAKING_EVENTS = frozenset(
    {
        "agent.custom_tool_use",
        "session.status_idle",
        "session.status_terminated",
        "session.status_rescheduled",
        "session.status_running",
        "session.error",
        "session.deleted",
    }
)
# A send whose answer was lost is checked against the history after these pauses.
LOST_SEND_PAUSES_S = (0.2, 0.5, 1.0)


# The `anthropic` SDK is an optional extra and slow to import: it is imported where it is used, so
# that a session of another executor (and every command that never runs one) does without it.
def connection_errors() -> tuple[type[BaseException], ...]:
    import anthropic
    import httpx2

    # A stream cut mid-body surfaces as a bare httpx2 error, not wrapped by the SDK.
    return (anthropic.APIConnectionError, httpx2.TransportError)


class AnthropicManagedProvider(ManagedProvider):
    kind = KIND
    waking_events = WAKING_EVENTS
    compaction_events = frozenset({"agent.thread_context_compacted"})
    busy_events = frozenset({"session.status_running"})

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        self.sent: set[str] = set()  # the calls this attempt has tried to answer

    def new_client(self, endpoint: Endpoint) -> Any:
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(**client_options(endpoint))

    @property
    def beta(self) -> Any:
        return self.client.beta

    async def find_session(self, metadata: dict[str, str], resources: dict[str, str]) -> str | None:
        agent_id = resources.get("agent")
        if agent_id is None:
            return None  # no agent was recorded, so no session of this subagent can exist
        async for session in self.beta.sessions.list(agent_id=agent_id, order="asc", limit=100):
            if all(session.metadata.get(k) == v for k, v in metadata.items()):
                return str(session.id)
        return None

    async def close_session(self, session_id: str) -> None:
        await self.once.beta.sessions.delete(session_id)

    async def create_session(
        self,
        metadata: dict[str, str],
        brief: TaskBrief,
        resources: dict[str, str],
        record_resource: Callable[[str, str], Awaitable[None]],
    ) -> str:
        agent_id = resources.get("agent")
        if agent_id is None:
            tools: list[Any] = [
                {
                    "type": "custom",
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": tool_schema(spec).parameters,
                }
                for spec in brief.tools
            ]
            agent = await self.once.beta.agents.create(
                model=brief.model, name=brief.name, system=brief.instructions, tools=tools, metadata=metadata
            )
            agent_id = str(agent.id)
            await record_resource("agent", agent_id)
        environment_id = resources.get("environment")
        if environment_id is None:
            environment = await self.once.beta.environments.create(
                name=brief.name, config={"type": "cloud"}, metadata=metadata
            )
            environment_id = str(environment.id)
            await record_resource("environment", environment_id)
        session = await self.once.beta.sessions.create(
            agent=agent_id,
            environment_id=environment_id,
            metadata=metadata,
            title=brief.name,
            initial_events=[{"type": "user.message", "content": [{"type": "text", "text": brief.message}]}],
        )
        return str(session.id)

    def heard(self, event: Any, seen: dict[str, Any]) -> Snapshot | None:
        # Documented: the client "can send it as soon as this event arrives, without waiting for
        # session.status_idle".
        if event.type != "agent.custom_tool_use":
            return None
        call = RemoteCall(call_id=event.id, name=event.name, arguments=event.input)
        return Snapshot(RemoteStatus.WAITING, pending=(call,))

    async def history(self, session_id: str, types: list[str] | None = None) -> list[Any]:
        listing = self.beta.sessions.events.list(
            session_id, limit=PAGE, **({"types": types} if types else {})
        )
        return [event async for event in listing]

    async def snapshot(self, session_id: str) -> Snapshot:
        session = await self.beta.sessions.retrieve(session_id)
        model = str(getattr(session.agent.model, "id", "") or "")
        if session.status == "terminated":
            return Snapshot(
                RemoteStatus.FAILED, model=model, failure=f"the session {session_id} was terminated"
            )
        events = await self.history(session_id)
        answered = {e.custom_tool_use_id for e in events if e.type == "user.custom_tool_result"}
        uses = {e.id: e for e in events if e.type == "agent.custom_tool_use"}
        last_idle = next((e for e in reversed(events) if e.type == "session.status_idle"), None)
        terminal_error = next(
            (
                e
                for e in reversed(events)
                if e.type == "session.error" and e.error.retry_status.type in ("terminal", "exhausted")
            ),
            None,
        )
        if session.status == "idle" and last_idle is not None:
            reason = last_idle.stop_reason
            if reason.type == "requires_action":
                waiting = [uses[i] for i in reason.event_ids if i in uses and i not in answered]
            else:
                waiting = []
        else:
            after = events.index(last_idle) if last_idle is not None else -1
            waiting = [
                e for e in events[after + 1 :] if e.type == "agent.custom_tool_use" and e.id not in answered
            ]
        pending = tuple(RemoteCall(call_id=e.id, name=e.name, arguments=e.input) for e in waiting)
        if pending:
            return Snapshot(RemoteStatus.WAITING, pending=pending, model=model)
        if session.status != "idle" or last_idle is None:
            return Snapshot(RemoteStatus.WORKING, model=model)
        stop = last_idle.stop_reason.type
        if stop == "end_turn":
            text = next((_text(e.content) for e in reversed(events) if e.type == "agent.message"), "")
            return Snapshot(RemoteStatus.DONE, model=model, text=text, turn=last_idle.id)
        if stop == "requires_action":
            return Snapshot(RemoteStatus.WORKING, model=model)  # answered; the provider moves on
        why = f"the session stopped: {stop}"
        if terminal_error is not None:
            why += f" ({terminal_error.error.message})"
        return Snapshot(RemoteStatus.FAILED, model=model, failure=why)

    async def answered(self, session_id: str, call_id: str) -> bool:
        results = await self.history(session_id, ["user.custom_tool_result"])
        return any(e.custom_tool_use_id == call_id for e in results)

    async def deliver(self, session_id: str, result: ResultToDeliver) -> Delivery:
        # No idempotency key: the history is the only guard against answering a call twice. It
        # is not needed only for the first send of a call this attempt took in: nobody else
        # could have answered it (each later try looks).
        call_id = result.call.call_id
        if not (result.first and call_id not in self.sent) and await self.answered(session_id, call_id):
            return Delivery.ALREADY_ANSWERED
        self.sent.add(call_id)
        text = result.output if result.ok else (result.error or "failed")
        event: Any = {
            "type": "user.custom_tool_result",
            "custom_tool_use_id": result.call.call_id,
            "content": [{"type": "text", "text": text}],
            "is_error": not result.ok,
        }
        try:
            await self.once.beta.sessions.events.send(session_id, events=[event])
        except Exception as error:
            if not isinstance(classify(error, connection_errors()), RemoteTransient):
                raise
            # The answer was lost, perhaps not the send: look before the caller sends it again.
            for pause in LOST_SEND_PAUSES_S:
                await asyncio.sleep(pause)
                if await self.answered(session_id, result.call.call_id):
                    return Delivery.ACCEPTED
            raise
        return Delivery.ACCEPTED

    async def send_message(self, session_id: str, text: str, key: str) -> Delivery:
        # No idempotency key: a user message with these words since the agent last ended its
        # turn is this one, sent by an attempt whose answer (or whose record of it) was lost.
        if await self.said_since_turn_end(session_id, text):
            return Delivery.ALREADY_ANSWERED
        event = {"type": "user.message", "content": [{"type": "text", "text": text}]}
        await self.once.beta.sessions.events.send(session_id, events=[event])
        return Delivery.ACCEPTED

    async def said_since_turn_end(self, session_id: str, text: str) -> bool:
        events = await self.history(session_id)
        ends = [
            i
            for i, e in enumerate(events)
            if e.type == "session.status_idle" and e.stop_reason.type == "end_turn"
        ]
        since = events[ends[-1] + 1 :] if ends else events
        return any(e.type == "user.message" and _text(e.content) == text for e in since)

    async def cancel(self, session_id: str, key: str) -> None:
        await self.once.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])

    async def open_stream(self, session_id: str) -> Any:
        return await self.beta.sessions.events.stream(session_id)

    async def outputs(self, session_id: str) -> list[RemoteOutput]:
        listing = self.beta.files.list(scope_id=session_id, betas=[FILES_BETA])
        return [
            RemoteOutput(
                output_id=f.id, name=f.filename, media_type=f.mime_type or "application/octet-stream"
            )
            async for f in listing
        ]

    async def download(self, session_id: str, output: RemoteOutput) -> bytes:
        response = await self.beta.files.download(output.output_id, betas=[FILES_BETA])
        return bytes(await response.read())


def _text(content: Any) -> str:
    return "".join(getattr(block, "text", "") for block in content or ())


def executor_for(context: ExecutorContext, endpoint: Endpoint) -> ManagedExecutor:
    return ManagedExecutor(context, AnthropicManagedProvider(endpoint), connection_errors())
