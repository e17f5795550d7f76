"""A stand-in for the OpenAI Agents API (`client.beta.agents.sessions`), good enough for the official
`openai` SDK, on loopback: `python -m belay.executors.standins.openai_agents --plan PLAN.yaml
[--port 0] [--ready-file F]` prints its base URL (`http://127.0.0.1:PORT/v1`, for
`OPENAI_BASE_URL`) once it listens, and writes `{"base_url", "pid"}` to the ready file. In process:
`async with running(plan) as standin:`.

Served (paths under `/v1`, each requiring `OpenAI-Beta: agents=v1` and `Authorization: Bearer`):
`POST /agents/sessions` (`environment` `none`, which needs `input`, or `openai_hosted`, hosting
nothing; `stream: true` answers the session's events up to the end of its first turn),
`GET|POST|DELETE /agents/sessions/{id}`, `GET /agents/sessions` (`metadata[k]=v`, `agent_id`),
`POST /agents/sessions/{id}/events` (message, tool_result, cancel; `202` with an empty body),
`GET /agents/sessions/{id}/events` (live server-sent events: only what happens after it opens),
`items`, `turns`, `turns/{turn_id}`, `turns/{turn_id}/items`, and
`artifacts[/{artifact_id}[/content]]` (list, retrieve, content, delete), and `GET /models/{id}`
(no beta header). Lists page with `after`, `limit` (1-100, default 20) and `order` (default `desc`).

What a client can rely on, as the SDK and the provider's documentation describe the real API:
- `Idempotency-Key` on `POST .../events`: the same key with the same body answers 202 and changes
  nothing (counted as a duplicate); the same key with another body answers 409 with
  `x-should-retry: false`, so the SDK does not resend it. Keys are remembered per session and only
  for accepted posts.
- A tool result for a call that is not pending (unknown, or already answered under another key)
  answers 400 `invalid_request_error` "Unknown pending tool call: <call_id>"; nothing in the batch
  is applied. A result with `success: false` settles the call like any other.
- A tool call is emitted as `agent.session.turn.item.added` (function_call) after the call is
  registered, then `agent.session.requires_action`; `GET /agents/sessions/{id}` shows it in
  `required_actions` until its result arrives.

Fault hooks: `{"kind": "fail_session", "session_id": S, "message"?}` makes the session (and its
active turn) `failed`, emitting `agent.session.turn.failed` and `agent.session.failed`, and further
input answers 400; `delete_session` (a deleted session's streams end cleanly), `cut_stream`,
`server_error` and `duplicate_event` as `belay.executors.standins.common` describes them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from aiohttp import web

from belay.executors.endpoints import PROVIDERS, standin_model_id
from belay.executors.standins import common
from belay.executors.standins.common import (
    ApiError,
    Frame,
    Json,
    RemoteSessionBase,
    RunningStandin,
    ScriptedRemoteAgent,
    SessionCounters,
    StandinServer,
    canonical,
    digest,
    header_tokens,
    json_body,
    main,
    new_id,
    query_limit,
    query_order,
    unix_now,
)
from belay.executors.standins.faults import DeleteSession, FailSession, Fault, SessionFault
from belay.executors.standins.remote_agent import SUBAGENT_METADATA_KEY, remote_notes_name
from belay.harness.models.base import ToolCall
from belay.harness.models.scripted import ScriptedPlan

BETA_HEADER = "agents=v1"
_METADATA_QUERY = re.compile(r"^metadata\[(.+)\]$")


@dataclass
class PendingCall:
    call_id: str
    turn_id: str
    name: str


@dataclass
class Artifact:
    meta: Json
    content: bytes


@dataclass
class RemoteSession(RemoteSessionBase):
    agent: Json
    environment: Json
    environment_id: str
    metadata: dict[str, str]
    remote: ScriptedRemoteAgent
    created_at: int = field(default_factory=unix_now)
    last_active_at: int = field(default_factory=unix_now)
    status: str = "idle"
    error: str | None = None
    turns: list[Json] = field(default_factory=list)
    items: list[Json] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    active_turn: Json | None = None
    output_index: int = 0
    pending: PendingCall | None = None
    answered: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    idempotency: dict[str, str] = field(default_factory=dict)  # key -> digest of the body

    def set_status(self, status: str) -> None:
        self.status = status
        self.counters.status = status
        self.last_active_at = unix_now()

    def required_actions(self) -> list[Json]:
        if self.pending is None:
            return []
        call = self._call_item(self.pending.call_id)
        return [
            {
                "type": "function_call",
                "arguments": call["arguments"],
                "call_id": self.pending.call_id,
                "name": self.pending.name,
                "turn_id": self.pending.turn_id,
            }
        ]

    def _call_item(self, call_id: str) -> Json:
        return next(
            item for item in self.items if item["type"] == "function_call" and item["call_id"] == call_id
        )

    def as_json(self) -> Json:
        return {
            "id": self.id,
            "object": "agent.session",
            "agent": self.agent,
            "created_at": self.created_at,
            "environment": self.environment,
            "error": self.error,
            "last_active_at": self.last_active_at,
            "metadata": self.metadata,
            "required_actions": self.required_actions(),
            "status": self.status,
            "usage": _usage(),
            "vault_ids": [],
        }


def _usage() -> Json:
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


class OpenAIAgentsStandin(StandinServer[RemoteSession]):
    provider: ClassVar[str] = "openai-agents"
    session_faults = (DeleteSession, FailSession)
    base_path: ClassVar[str] = "/v1"

    # ------------------------------------------------------------------------ StandinServer hooks

    def add_routes(self, router: web.UrlDispatcher) -> None:
        sessions = "/v1/agents/sessions"
        one = sessions + "/{session_id}"
        router.add_get("/v1/models/{model}", self.retrieve_model)
        router.add_post(sessions, self.create_session)
        router.add_get(sessions, self.list_sessions)
        router.add_get(one, self.retrieve_session)
        router.add_post(one, self.update_session)
        router.add_delete(one, self.delete_session)
        router.add_post(one + "/events", self.post_events)
        router.add_get(one + "/events", self.stream_events)
        router.add_get(one + "/items", self.list_items)
        router.add_get(one + "/turns", self.list_turns)
        router.add_get(one + "/turns/{turn_id}", self.retrieve_turn)
        router.add_get(one + "/turns/{turn_id}/items", self.list_turn_items)
        router.add_get(one + "/artifacts", self.list_artifacts)
        router.add_get(one + "/artifacts/{artifact_id}", self.retrieve_artifact)
        router.add_delete(one + "/artifacts/{artifact_id}", self.delete_artifact)
        router.add_get(one + "/artifacts/{artifact_id}/content", self.artifact_content)

    def error_response(self, error: ApiError) -> web.Response:
        kind = "invalid_request_error" if error.status in (400, 401, 404, 409) else "server_error"
        body = {"error": {"message": error.message, "type": kind, "param": None, "code": error.code}}
        return web.json_response(body, status=error.status, headers=error.headers)

    def check_request(self, request: web.Request) -> None:
        authorization = request.headers.get("Authorization", "")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(
                401, "You didn't provide an API key (Authorization: Bearer <key>).", code="missing_key"
            )
        if self.api_key is not None and key.strip() != self.api_key:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        if request.path.startswith("/v1/models"):  # the Models API is no agents beta
            return
        if BETA_HEADER not in header_tokens(request, "OpenAI-Beta"):
            raise ApiError(400, f"This endpoint requires the OpenAI-Beta: {BETA_HEADER} header.")

    known_models = re.compile(PROVIDERS["openai-agents"].standin_models)

    def model_json(self, model: str) -> Json:
        return {"id": model, "object": "model", "created": 0, "owned_by": "openai"}

    def unknown_model(self, model: str) -> ApiError:
        message = f"The model `{model}` does not exist or you do not have access to it."
        return ApiError(404, message, code="model_not_found")

    def session_not_found(self, session_id: str) -> ApiError:
        return ApiError(404, f"No session found with id '{session_id}'.", code="not_found")

    def apply_session_fault(self, session: RemoteSession, fault: SessionFault) -> None:
        if isinstance(fault, DeleteSession):
            self.forget(session)
        elif isinstance(fault, FailSession):
            self._fail(session, fault.message)

    # ---------------------------------------------------------------------------------- sessions

    async def create_session(self, request: web.Request) -> web.StreamResponse:
        body = await json_body(request)
        if "agent_id" in body:
            raise ApiError(400, "agent_id: the stand-in keeps no saved agents; pass agent inline.")
        agent = _resolve_agent(body.get("agent"))
        environment, environment_id = _resolve_environment(body.get("environment"))
        metadata = _metadata(body.get("metadata"))
        stream = body.get("stream") is True
        raw_input = body.get("input")
        messages = _input_messages(raw_input) if raw_input is not None else None
        if messages is None and (environment["type"] == "none" or stream):
            raise ApiError(400, "input is required when environment.type is none or stream is true.")
        remote = self.remote_agent(metadata)
        session = RemoteSession(
            id=new_id("sess"),
            agent=agent,
            environment=environment,
            environment_id=environment_id,
            metadata=metadata,
            remote=remote,
            counters=SessionCounters(remote.subagent),
        )
        self.register(session)
        events = self.subscribe(session.id) if stream else None
        self._emit(session, {"type": "agent.session.created", "session": session.as_json()})
        if messages is not None:
            for message in messages:
                counts = session.counters.input(message["content"])
                counts.received += 1
                counts.accepted += 1
            self._start_turn(session, messages)
        if events is not None:
            return await self.drain(request, events, until_end=True)
        return web.json_response(session.as_json())

    async def retrieve_session(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        session.counters.state_reads += 1
        return web.json_response(session.as_json())

    async def update_session(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        session = self.session_of(request)  # after the body: the session may have gone meanwhile
        if "metadata" in body:
            metadata = _metadata(body["metadata"])
            if metadata.get(SUBAGENT_METADATA_KEY) != session.metadata.get(SUBAGENT_METADATA_KEY):
                raise ApiError(
                    400, f"metadata.{SUBAGENT_METADATA_KEY} cannot change once the session exists."
                )
            session.metadata = metadata
        if isinstance(body.get("agent"), dict):
            for key in ("instructions", "model", "service_tier"):
                if key in body["agent"]:
                    session.agent[key] = body["agent"][key]
            if "tools" in body["agent"]:
                session.agent["tools"] = _tools(body["agent"]["tools"])
        session.last_active_at = unix_now()
        return web.json_response(session.as_json())

    async def list_sessions(self, request: web.Request) -> web.Response:
        wanted = {
            match.group(1): value
            for key, value in request.query.items()
            if (match := _METADATA_QUERY.match(key)) is not None
        }
        agent_id = request.query.get("agent_id")
        chosen = [
            session.as_json()
            for session in self.sessions.values()
            if all(session.metadata.get(key) == value for key, value in wanted.items())
            and (agent_id is None or session.agent["id"] == agent_id)
        ]
        return web.json_response(_page(request, chosen))

    async def delete_session(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        self.forget(session)
        return web.json_response({"id": session.id, "object": "agent.session.deleted", "deleted": True})

    # ------------------------------------------------------------------------------------ events

    async def post_events(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        session = self.session_of(request)  # after the body: the session may have gone meanwhile
        events = body.get("events")
        if not isinstance(events, list) or not events or not all(isinstance(e, dict) for e in events):
            raise ApiError(400, "events must be a non-empty list of objects.")
        key = request.headers.get("Idempotency-Key")
        body_digest = digest(body)
        if key is not None and key in session.idempotency:
            if session.idempotency[key] != body_digest:
                session.counters.idempotency_conflicts += 1
                raise ApiError(
                    409,
                    "Idempotency-Key was already used with a different request body.",
                    code="idempotency_key_reused",
                    headers={"x-should-retry": "false"},
                )
            self._count_duplicates(session, events)
            return web.Response(status=202)
        self._validate(session, events)
        for event in events:
            self._apply(session, event)
        if key is not None:
            session.idempotency[key] = body_digest
        return web.Response(status=202)

    def _count_duplicates(self, session: RemoteSession, events: list[Json]) -> None:
        for event in events:
            if event.get("type") == "agent.session.input.message":
                for message in _input_messages(event.get("input")):
                    counts = session.counters.input(message["content"])
                    counts.received += 1
                    counts.duplicates += 1
            elif event.get("type") == "agent.session.input.tool_result":
                call_id = str(event.get("call_id"))
                counts = session.counters.tool_result(call_id, session.answered.get(call_id))
                counts.received += 1
                counts.duplicates += 1

    def _validate(self, session: RemoteSession, events: list[Json]) -> None:
        """Refuse the whole batch before any of it takes effect."""
        pending = session.pending
        for event in events:
            kind = event.get("type")
            if kind == "agent.session.input.message":
                if session.status == "failed":
                    raise ApiError(400, f"Session {session.id} has failed and accepts no input.")
                _input_messages(event.get("input"))
            elif kind == "agent.session.input.tool_result":
                call_id = event.get("call_id")
                if not isinstance(call_id, str) or not call_id:
                    raise ApiError(400, "tool_result.call_id must be a non-empty string.")
                if not isinstance(event.get("success"), bool):
                    raise ApiError(400, "tool_result.success must be a boolean.")
                if pending is None or pending.call_id != call_id:
                    counts = session.counters.tool_result(call_id, session.answered.get(call_id))
                    counts.received += 1
                    counts.rejected += 1
                    raise ApiError(400, f"Unknown pending tool call: {call_id}", code="invalid_request_error")
                if event.get("turn_id") != pending.turn_id:
                    raise ApiError(400, f"tool_result.turn_id does not match the turn of call {call_id}.")
                pending = None  # a second result for it in the same batch is refused too
            elif kind == "agent.session.input.cancel":
                pass
            else:
                raise ApiError(400, f"The stand-in does not accept input events of type {kind!r}.")

    def _apply(self, session: RemoteSession, event: Json) -> None:
        kind = event["type"]
        if kind == "agent.session.input.message":
            messages = _input_messages(event["input"])
            for message in messages:
                counts = session.counters.input(message["content"])
                counts.received += 1
                counts.accepted += 1
            if session.active_turn is None:
                self._start_turn(session, messages)
            else:
                # A message during an active turn steers it; the scripted agent has nothing to change.
                self._add_user_messages(session, messages)
        elif kind == "agent.session.input.tool_result":
            self._settle_call(session, event)
        elif kind == "agent.session.input.cancel":
            self._cancel(session)

    # ------------------------------------------------------------------------------ the agent

    def _emit(
        self, session: RemoteSession, event: Json, *, tool_call: bool = False, ends: bool = False
    ) -> None:
        event = {"event_id": new_id("evt"), **event}
        data = f"data: {canonical(event)}\n\n".encode()
        self.publish(session.id, Frame(data, tool_call=tool_call, ends_stream=ends))

    def _turn_event(self, session: RemoteSession, kind: str, turn: Json, **extra: Any) -> None:
        self._emit(
            session,
            {"type": kind, "session_id": session.id, "turn_id": turn["id"], "turn": dict(turn), **extra},
        )

    def _item_event(self, session: RemoteSession, kind: str, item: Json, *, tool_call: bool = False) -> None:
        self._emit(
            session,
            {
                "type": kind,
                "session_id": session.id,
                "turn_id": item["turn_id"],
                "item": dict(item),
                "output_index": session.output_index,
            },
            tool_call=tool_call,
        )

    def _start_turn(self, session: RemoteSession, messages: list[Json]) -> None:
        now = unix_now()
        turn: Json = {
            "id": new_id("turn"),
            "object": "agent.session.turn",
            "agent_id": session.agent["id"],
            "session_id": session.id,
            "created_at": now,
            "started_at": None,
            "completed_at": None,
            "error": None,
            "status": "queued",
            "subagent_id": None,
            "usage": None,
        }
        session.turns.append(turn)
        session.active_turn = turn
        session.output_index = 0
        self._turn_event(session, "agent.session.turn.created", turn)
        turn.update(status="in_progress", started_at=now)
        session.set_status("in_progress")
        self._emit(session, {"type": "agent.session.in_progress", "session": session.as_json()})
        self._turn_event(session, "agent.session.turn.in_progress", turn)
        self._add_user_messages(session, messages)
        self._advance(session)

    def _add_user_messages(self, session: RemoteSession, messages: list[Json]) -> None:
        assert session.active_turn is not None
        for message in messages:
            item = {
                "id": new_id("msg"),
                "type": "message",
                "role": "user",
                "content": message["content"],
                "phase": None,
                "status": "completed",
                "turn_id": session.active_turn["id"],
            }
            session.items.append(item)
            self._item_event(session, "agent.session.turn.item.added", item)
            session.remote.read(message["content"])

    def _advance(self, session: RemoteSession) -> None:
        call = session.remote.next_call()
        if call is None:
            self._finish_turn(session)
        else:
            self._request_call(session, call)

    def _request_call(self, session: RemoteSession, call: ToolCall) -> None:
        turn = session.active_turn
        assert turn is not None
        item = {
            "id": new_id("fc"),
            "type": "function_call",
            "call_id": new_id("call"),
            "name": call.name,
            "arguments": canonical(call.arguments),
            "status": "in_progress",
            "turn_id": turn["id"],
        }
        session.items.append(item)
        # Registered before anything is emitted: a result posted on seeing the item is never early.
        session.pending = PendingCall(item["call_id"], turn["id"], call.name)
        session.counters.calls_requested += 1
        session.output_index += 1
        self._item_event(session, "agent.session.turn.item.added", item, tool_call=True)
        item["status"] = "completed"
        self._item_event(session, "agent.session.turn.item.done", item)
        turn["status"] = "waiting"
        session.set_status("requires_action")
        self._emit(session, {"type": "agent.session.requires_action", "session": session.as_json()})

    def _settle_call(self, session: RemoteSession, event: Json) -> None:
        pending = session.pending
        turn = session.active_turn
        assert pending is not None and turn is not None
        success = bool(event["success"])
        counts = session.counters.tool_result(pending.call_id, pending.name)
        counts.received += 1
        counts.accepted += 1
        session.answered[pending.call_id] = pending.name
        session.pending = None
        session.remote.settle(success, event.get("error") or event.get("output") or "")
        item = {
            "id": new_id("fco"),
            "type": "function_call_output",
            "call_id": pending.call_id,
            "output": event.get("output") if success else None,
            "error": None if success else str(event.get("error") or "The tool failed."),
            "status": "completed" if success else "failed",
            "turn_id": turn["id"],
        }
        session.items.append(item)
        turn["status"] = "in_progress"
        session.set_status("in_progress")
        self._emit(session, {"type": "agent.session.in_progress", "session": session.as_json()})
        self._item_event(session, "agent.session.turn.item.added", item)
        self._advance(session)

    def _finish_turn(self, session: RemoteSession) -> None:
        turn = session.active_turn
        assert turn is not None
        text = session.remote.final_message()
        session.output_index += 1
        message: Json = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "content": [],
            "phase": "final_answer",
            "status": "in_progress",
            "turn_id": turn["id"],
        }
        self._item_event(session, "agent.session.turn.item.added", message)
        part_event = {
            "session_id": session.id,
            "turn_id": turn["id"],
            "item_id": message["id"],
            "output_index": session.output_index,
            "content_index": 0,
        }
        empty_part = {"type": "output_text", "text": ""}
        self._emit(
            session, {"type": "agent.session.turn.content_part.added", **part_event, "part": empty_part}
        )
        self._emit(session, {"type": "agent.session.turn.output_text.delta", **part_event, "delta": text})
        self._emit(session, {"type": "agent.session.turn.output_text.done", **part_event, "text": text})
        part = {"type": "output_text", "text": text}
        self._emit(session, {"type": "agent.session.turn.content_part.done", **part_event, "part": part})
        message.update(content=[part], status="completed")
        session.items.append(message)
        self._item_event(session, "agent.session.turn.item.done", message)
        if session.remote.take_publication():
            self._publish_artifact(session, turn, text.encode())
        turn.update(status="completed", completed_at=unix_now(), usage=_usage())
        self._turn_event(session, "agent.session.turn.completed", turn, usage=_usage())
        session.active_turn = None
        session.set_status("idle")
        self._emit(session, {"type": "agent.session.idle", "session": session.as_json()}, ends=True)

    def _publish_artifact(self, session: RemoteSession, turn: Json, content: bytes) -> None:
        meta: Json = {
            "id": new_id("art"),
            "object": "agent.session.artifact",
            "created_at": unix_now(),
            "environment_id": session.environment_id,
            "path": f"/workspace/outputs/{remote_notes_name(session.remote.subagent)}",
            "session_id": session.id,
            "size_bytes": len(content),
            "turn_id": turn["id"],
        }
        session.artifacts.append(Artifact(meta, content))

    def _cancel(self, session: RemoteSession) -> None:
        turn = session.active_turn
        if turn is None:
            return
        session.pending = None
        turn.update(status="cancelled", completed_at=unix_now())
        self._turn_event(session, "agent.session.turn.cancelled", turn, usage=_usage())
        session.active_turn = None
        session.set_status("idle")
        self._emit(session, {"type": "agent.session.idle", "session": session.as_json()}, ends=True)

    def _fail(self, session: RemoteSession, message: str) -> None:
        turn = session.active_turn
        session.pending = None
        if turn is not None:
            turn.update(
                status="failed", completed_at=unix_now(), error={"code": "server_error", "message": message}
            )
            self._turn_event(session, "agent.session.turn.failed", turn, usage=_usage())
            session.active_turn = None
        session.error = message
        session.set_status("failed")
        self._emit(session, {"type": "agent.session.failed", "session": session.as_json()}, ends=True)

    # ---------------------------------------------------------------------------------- history

    async def list_items(self, request: web.Request) -> web.Response:
        return web.json_response(_page(request, self.session_of(request).items))

    async def list_turns(self, request: web.Request) -> web.Response:
        return web.json_response(_page(request, self.session_of(request).turns))

    def _turn(self, request: web.Request) -> tuple[RemoteSession, Json]:
        session = self.session_of(request)
        turn_id = request.match_info["turn_id"]
        for turn in session.turns:
            if turn["id"] == turn_id:
                return session, turn
        raise ApiError(404, f"No turn found with id '{turn_id}'.", code="not_found")

    async def retrieve_turn(self, request: web.Request) -> web.Response:
        return web.json_response(self._turn(request)[1])

    async def list_turn_items(self, request: web.Request) -> web.Response:
        session, turn = self._turn(request)
        return web.json_response(
            _page(request, [item for item in session.items if item["turn_id"] == turn["id"]])
        )

    def _artifact(self, request: web.Request) -> tuple[RemoteSession, Artifact]:
        session = self.session_of(request)
        artifact_id = request.match_info["artifact_id"]
        for artifact in session.artifacts:
            if artifact.meta["id"] == artifact_id:
                return session, artifact
        raise ApiError(404, f"No artifact found with id '{artifact_id}'.", code="not_found")

    async def list_artifacts(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        environment_id = request.query.get("environment_id")
        metas = [
            artifact.meta
            for artifact in session.artifacts
            if environment_id is None or artifact.meta["environment_id"] == environment_id
        ]
        return web.json_response(_page(request, metas))

    async def retrieve_artifact(self, request: web.Request) -> web.Response:
        return web.json_response(self._artifact(request)[1].meta)

    async def artifact_content(self, request: web.Request) -> web.Response:
        return web.Response(body=self._artifact(request)[1].content, content_type="application/octet-stream")

    async def delete_artifact(self, request: web.Request) -> web.Response:
        session, artifact = self._artifact(request)
        session.artifacts.remove(artifact)
        return web.json_response(
            {"id": artifact.meta["id"], "object": "agent.session.artifact.deleted", "deleted": True}
        )


# -------------------------------------------------------------------------------------- parsing


def _resolve_agent(raw: Any) -> Json:
    if not isinstance(raw, dict):
        raise ApiError(400, "agent is required (the stand-in keeps no saved agents).")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "agent.model is required without agent_id.")
    reasoning = raw.get("reasoning") or {}
    text = raw.get("text") or {}
    return {
        "id": new_id("agent"),
        "instructions": raw.get("instructions"),
        "model": standin_model_id(model),
        "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
        "name": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "service_tier": raw.get("service_tier") or "auto",
        "text": {
            "format": text.get("format") or {"type": "text"},
            "verbosity": text.get("verbosity") or "medium",
        },
        "tools": _tools(raw.get("tools") or []),
    }


def _tools(raw: Any) -> list[Json]:
    if not isinstance(raw, list):
        raise ApiError(400, "agent.tools must be a list.")
    tools: list[Json] = []
    for tool in raw:
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise ApiError(400, "each tool must be an object with a type.")
        if tool["type"] == "function":
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise ApiError(400, "a function tool needs a name.")
            resolved = {
                "type": "function",
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
                "defer_loading": bool(tool.get("defer_loading", False)),
            }
            if "async" in tool:
                resolved["async"] = tool["async"]
            tools.append(resolved)
        else:
            tools.append(dict(tool))
    return tools


def _resolve_environment(raw: Any) -> tuple[Json, str]:
    if not isinstance(raw, dict) or "type" not in raw:
        raise ApiError(400, "environment is required.")
    if raw["type"] == "none":
        return {"type": "none"}, new_id("env")
    if raw["type"] == "openai_hosted":
        environment_id = raw.get("environment_id") or new_id("env")
        return (
            {
                "id": environment_id,
                "type": "openai_hosted",
                "capability_directories": list(raw.get("capability_directories") or []),
                "files": [],
                "network": {"access": "disabled", "allowed_domains": []},
                "packages": {"npm": [], "python": [], "system": []},
                "plugins": [],
                "skills": [],
                "container_size": raw.get("container_size") or "medium",
                "desktop": None,
            },
            environment_id,
        )
    raise ApiError(
        400, f"environment.type {raw['type']!r} is not served by the stand-in (none, openai_hosted)."
    )


def _metadata(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError(400, "metadata must be an object of strings.")
    if len(raw) > 16:
        raise ApiError(400, "metadata holds at most 16 pairs.")
    for key, value in raw.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            raise ApiError(400, "metadata keys are at most 64 characters, values strings of at most 512.")
    return dict(raw)


def _input_messages(raw: Any) -> list[Json]:
    if isinstance(raw, str):
        if not raw:
            raise ApiError(400, "input must not be empty.")
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw}]}]
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "input must be a string or a non-empty list of messages.")
    messages = []
    for message in raw:
        if not isinstance(message, dict) or message.get("role") != "user":
            raise ApiError(400, "each input message must have role user.")
        content = message.get("content")
        if not isinstance(content, list) or not content:
            raise ApiError(400, "each input message needs a non-empty content list.")
        messages.append({"type": "message", "role": "user", "content": content})
    return messages


def _page(request: web.Request, rows: list[Json]) -> Json:
    """One page of an ID-ordered list, as the SDK's cursor pages read it."""
    limit = query_limit(request, default=20, maximum=100)
    ordered = rows if query_order(request, default="desc") == "asc" else list(reversed(rows))
    after = request.query.get("after")
    if after is not None:
        position = next((index for index, row in enumerate(ordered) if row["id"] == after), None)
        if position is None:
            raise ApiError(400, f"after: no item with id '{after}' in this list.")
        ordered = ordered[position + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }


# ----------------------------------------------------------------------------------------- entry


def running(
    plan: ScriptedPlan | Path | str, *, faults: Iterable[Fault | Json] = (), api_key: str | None = None
) -> contextlib.AbstractAsyncContextManager[RunningStandin]:
    """An OpenAI Agents stand-in on 127.0.0.1 (a free port) following `plan`; yields its handle,
    whose `base_url` ends in `/v1`."""
    return common.running(OpenAIAgentsStandin, plan, faults=faults, api_key=api_key)


if __name__ == "__main__":
    main(OpenAIAgentsStandin, "belay.executors.standins.openai_agents")
