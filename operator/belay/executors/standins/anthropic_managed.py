"""A stand-in for Claude Managed Agents (`client.beta.agents`, `beta.environments`, `beta.sessions`,
`beta.sessions.events`, and the session's files through `beta.files`), good enough for the official
`anthropic` SDK, on loopback:

    python -m belay.executors.standins.anthropic_managed --plan PLAN.yaml [--port 0] [--ready-file F]

prints its base URL (`http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`) once it listens, and
writes `{"base_url", "pid"}` to the ready file. In process: `async with running(plan) as standin:`.

Served (each request needs `Authorization: Bearer` or `x-api-key`; every path but `/v1/files`
needs `anthropic-beta` naming `managed-agents-2026-04-01`; any `anthropic-version` is accepted):
`POST /v1/agents`, `GET /v1/agents/{id}`, `POST /v1/environments`, `GET /v1/environments/{id}`,
`POST|GET /v1/sessions`, `GET|POST|DELETE /v1/sessions/{id}`, `POST /v1/sessions/{id}/archive`,
`POST|GET /v1/sessions/{id}/events` (send; list with `limit`, `page`, `order` default `asc`,
`types[]`, `created_at[gt|gte|lt|lte]`), `GET /v1/sessions/{id}/events/stream` (live events only:
what happens after it opens, each frame with an `event:` line), and `GET /v1/files`
(`scope_id`, `ids`, `limit`, `page`), `GET /v1/files/{id}`, `GET /v1/files/{id}/content`.

The remote agent asks for each call as `agent.custom_tool_use`, then `session.status_idle` with
`stop_reason: requires_action`; a `user.custom_tool_result` naming it (with or without `is_error`)
moves it on; the turn ends with `agent.message` and `session.status_idle` `end_turn`, and the
remote notes become a file scoped to the session. There is no idempotency key: the stand-in ignores
any `Idempotency-Key` header. A result for a call that was already answered is accepted and
recorded (the real API's behaviour is not documented, so the stand-in takes the case an adapter
must avoid) and the call shows in the counters' `answered_twice`; a result naming no call the
agent made answers 400. `user.interrupt` drops the pending call (the next turn asks for it again)
and goes idle with `end_turn`.

Fault hooks (see `belay.executors.standins.common` for the shared ones):
- `{"kind": "reschedule_session", "session_id": S, "reads": N}`: the session goes `rescheduling`
  (`session.error` retrying, `session.status_rescheduled`). Events sent meanwhile are accepted and
  listed with `processed_at: null`, and processed once it is back. It comes back (`running`, then
  whatever it was waiting for again) after it has been read N times (`sessions.retrieve` or
  `events.list`), or at once with `{"kind": "recover_session", "session_id": S}`.
- `{"kind": "terminate_session", "session_id": S}`: the session ends for good (`session.error`
  terminal, `session.status_terminated`); sends answer 400. Archiving does the same.
- `{"kind": "compact_context", "session_id": S}`: the remote agent compacts its context now
  (`agent.thread_context_compacted`, the event the real API sends when it summarises).
- `delete_session` (streams receive `session.deleted`, then end), `cut_stream`, `server_error`,
  `duplicate_event` as described in the common module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar

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
    T,
    canonical,
    header_tokens,
    iso_now,
    json_body,
    main,
    new_id,
    query_limit,
    query_list,
    query_order,
)
from belay.executors.standins.faults import (
    CompactContext,
    DeleteSession,
    Fault,
    RecoverSession,
    RescheduleSession,
    SessionFault,
    TerminateSession,
)
from belay.executors.standins.remote_agent import SUBAGENT_METADATA_KEY, remote_notes_name
from belay.harness.models.scripted import ScriptedPlan

BETA = "managed-agents-2026-04-01"
SENDABLE = ("user.message", "user.custom_tool_result", "user.interrupt")


@dataclass
class RemoteSession(RemoteSessionBase):
    agent: Json
    environment_id: str
    metadata: dict[str, str]
    title: str | None
    remote: ScriptedRemoteAgent
    created_at: str = field(default_factory=iso_now)
    updated_at: str = field(default_factory=iso_now)
    archived_at: str | None = None
    status: str = "idle"
    history: list[Json] = field(default_factory=list)
    in_turn: bool = False
    pending: str | None = None  # the agent.custom_tool_use id the agent waits on
    uses: dict[str, str] = field(default_factory=dict)  # custom tool use id -> tool name
    queued: list[Json] = field(default_factory=list)  # sent while rescheduling
    reads_until_back: int = 0

    def set_status(self, status: str) -> None:
        self.status = status
        self.counters.status = status
        self.updated_at = iso_now()

    def as_json(self) -> Json:
        return {
            "id": self.id,
            "type": "session",
            "agent": self.agent,
            "archived_at": self.archived_at,
            "budget": None,
            "created_at": self.created_at,
            "environment_id": self.environment_id,
            "metadata": self.metadata,
            "outcome_evaluations": [],
            "resources": [],
            "stats": {"active_seconds": 0.0, "duration_seconds": 0.0},
            "status": self.status,
            "title": self.title,
            "updated_at": self.updated_at,
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
            "vault_ids": [],
            "deployment_id": None,
        }


@dataclass
class StoredFile:
    meta: Json
    content: bytes


class AnthropicManagedStandin(StandinServer[RemoteSession]):
    provider: ClassVar[str] = "anthropic-managed"
    session_faults = (DeleteSession, RescheduleSession, RecoverSession, CompactContext, TerminateSession)
    base_path: ClassVar[str] = ""

    def __init__(
        self, plan: ScriptedPlan, *, faults: Iterable[Fault | Json] = (), api_key: str | None = None
    ) -> None:
        self.agents: dict[str, Json] = {}
        self.environments: dict[str, Json] = {}
        self.files: dict[str, StoredFile] = {}
        super().__init__(plan, faults=faults, api_key=api_key)

    # ------------------------------------------------------------------------ StandinServer hooks

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/agents", self.create_agent)
        router.add_get("/v1/agents/{agent_id}", self.retrieve_agent)
        router.add_post("/v1/environments", self.create_environment)
        router.add_get("/v1/environments/{environment_id}", self.retrieve_environment)
        router.add_post("/v1/sessions", self.create_session)
        router.add_get("/v1/sessions", self.list_sessions)
        one = "/v1/sessions/{session_id}"
        router.add_get(one, self.retrieve_session)
        router.add_post(one, self.update_session)
        router.add_delete(one, self.delete_session)
        router.add_post(one + "/archive", self.archive_session)
        router.add_post(one + "/events", self.send_events)
        router.add_get(one + "/events", self.list_events)
        router.add_get(one + "/events/stream", self.stream_events)
        router.add_get("/v1/models/{model}", self.retrieve_model)
        router.add_get("/v1/files", self.list_files)
        router.add_get("/v1/files/{file_id}", self.retrieve_file)
        router.add_get("/v1/files/{file_id}/content", self.download_file)

    def error_response(self, error: ApiError) -> web.Response:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            405: "invalid_request_error",
            409: "invalid_request_error",
            529: "overloaded_error",
        }.get(error.status, "api_error")
        body = {
            "type": "error",
            "error": {"type": kind, "message": error.message},
            "request_id": new_id("req"),
        }
        return web.json_response(body, status=error.status, headers=error.headers)

    def check_request(self, request: web.Request) -> None:
        scheme, _, bearer = request.headers.get("Authorization", "").partition(" ")
        key = bearer.strip() if scheme.lower() == "bearer" else request.headers.get("x-api-key", "").strip()
        if not key:
            raise ApiError(401, "An API key is required (Authorization: Bearer <key> or x-api-key).")
        if self.api_key is not None and key != self.api_key:
            raise ApiError(401, "invalid x-api-key")
        if request.path.startswith(("/v1/files", "/v1/models")):  # neither is a managed-agents beta
            return
        if BETA not in header_tokens(request, "anthropic-beta"):
            raise ApiError(400, f"This endpoint requires the anthropic-beta header to include {BETA}.")

    known_models = re.compile(PROVIDERS["anthropic-managed"].standin_models)

    def model_json(self, model: str) -> Json:
        return {"type": "model", "id": model, "display_name": model, "created_at": "2026-01-01T00:00:00Z"}

    def unknown_model(self, model: str) -> ApiError:
        return ApiError(404, f"model: {model}")

    def session_not_found(self, session_id: str) -> ApiError:
        return ApiError(404, f"session {session_id} not found")

    def apply_session_fault(self, session: RemoteSession, fault: SessionFault) -> None:
        if isinstance(fault, DeleteSession):
            self._delete(session)
        elif isinstance(fault, RescheduleSession):
            self._reschedule(session, fault.reads)
        elif isinstance(fault, RecoverSession):
            self._recover(session)
        elif isinstance(fault, TerminateSession):
            self._terminate(session, "The session was terminated (stand-in fault).")
        elif isinstance(fault, CompactContext):
            self._emit(session, {"type": "agent.thread_context_compacted"})

    # --------------------------------------------------------------------- agents, environments

    async def create_agent(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "name: field required")
        model = body.get("model")
        if isinstance(model, str) and model:
            model_config: Json = {"id": standin_model_id(model), "speed": "standard"}
        elif isinstance(model, dict) and isinstance(model.get("id"), str):
            model_config = {"speed": "standard", **model, "id": standin_model_id(model["id"])}
        else:
            raise ApiError(400, "model: field required")
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(
            isinstance(tool, dict) and "type" in tool for tool in tools
        ):
            raise ApiError(400, "tools must be a list of tool objects")
        for tool in tools:
            if tool["type"] == "custom" and not (
                isinstance(tool.get("name"), str) and "input_schema" in tool
            ):
                raise ApiError(400, "a custom tool needs name and input_schema")
        now = iso_now()
        agent: Json = {
            "id": new_id("agent"),
            "type": "agent",
            "archived_at": None,
            "created_at": now,
            "updated_at": now,
            "description": body.get("description"),
            "execution_identity": {"type": "service_account"},
            "mcp_servers": body.get("mcp_servers") or [],
            "metadata": body.get("metadata") or {},
            "model": model_config,
            "multiagent": None,
            "name": name,
            "skills": body.get("skills") or [],
            "system": body.get("system"),
            "tools": tools,
            "version": 1,
        }
        self.agents[agent["id"]] = agent
        return web.json_response(agent)

    async def retrieve_agent(self, request: web.Request) -> web.Response:
        return web.json_response(_named(self.agents, "agent", request.match_info["agent_id"]))

    async def create_environment(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "name: field required")
        config = body.get("config") or {"type": "cloud"}
        if config.get("type") == "cloud":
            config = {
                "type": "cloud",
                "networking": config.get("networking") or {"type": "unrestricted"},
                "packages": {
                    "apt": [],
                    "cargo": [],
                    "gem": [],
                    "go": [],
                    "npm": [],
                    "pip": [],
                    "type": "packages",
                }
                | (config.get("packages") or {}),
            }
        now = iso_now()
        environment: Json = {
            "id": new_id("env"),
            "type": "environment",
            "archived_at": None,
            "config": config,
            "created_at": now,
            "updated_at": now,
            "description": body.get("description"),
            "metadata": body.get("metadata") or {},
            "name": name,
            "scope": body.get("scope") or "account",
        }
        self.environments[environment["id"]] = environment
        return web.json_response(environment)

    async def retrieve_environment(self, request: web.Request) -> web.Response:
        environment_id = request.match_info["environment_id"]
        return web.json_response(_named(self.environments, "environment", environment_id))

    # ---------------------------------------------------------------------------------- sessions

    def _snapshot(self, raw: object) -> Json:
        if isinstance(raw, str):
            agent_id, overrides = raw, {}
        elif isinstance(raw, dict) and isinstance(raw.get("id"), str):
            agent_id = raw["id"]
            overrides = {key: raw[key] for key in ("model", "system", "tools") if key in raw}
            if raw.get("type") != "agent_with_overrides":
                overrides = {}
        else:
            raise ApiError(400, "agent: an agent id or {type, id} is required")
        saved: Json = _named(self.agents, "agent", agent_id)
        agent = {**saved, **overrides}
        for key in ("archived_at", "created_at", "updated_at", "metadata"):
            agent.pop(key, None)
        return agent

    async def create_session(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        agent = self._snapshot(body.get("agent"))
        environment_id = body.get("environment_id")
        if not isinstance(environment_id, str) or environment_id not in self.environments:
            raise ApiError(404, f"environment {environment_id} not found")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
            raise ApiError(400, "metadata must be an object of strings")
        initial = body.get("initial_events") or []
        if not isinstance(initial, list) or len(initial) > 50:
            raise ApiError(400, "initial_events holds at most 50 events")
        for event in initial:
            if not isinstance(event, dict) or event.get("type") != "user.message":
                raise ApiError(
                    400, "initial_events takes user.message events only (the stand-in has no outcomes)"
                )
            _check_sendable(event)
        remote = self.remote_agent(metadata)
        session = RemoteSession(
            id=new_id("sesn"),
            agent=agent,
            environment_id=environment_id,
            metadata=dict(metadata),
            title=body.get("title"),
            remote=remote,
            counters=SessionCounters(remote.subagent),
        )
        self.register(session)
        for event in initial:
            self._receive(session, event)
        return web.json_response(session.as_json())

    async def retrieve_session(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        session.counters.state_reads += 1
        answer = web.json_response(session.as_json())  # serialized now, before the read can change it
        self._read(session)
        return answer

    async def update_session(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        session = self.session_of(request)  # after the body: the session may have gone meanwhile
        if "metadata" in body:
            metadata = body["metadata"] or {}
            if metadata.get(SUBAGENT_METADATA_KEY) != session.metadata.get(SUBAGENT_METADATA_KEY):
                raise ApiError(400, f"metadata.{SUBAGENT_METADATA_KEY} cannot change once the session exists")
            session.metadata = dict(metadata)
        if "title" in body:
            session.title = body["title"]
        session.updated_at = iso_now()
        return web.json_response(session.as_json())

    async def list_sessions(self, request: web.Request) -> web.Response:
        statuses = query_list(request, "statuses")
        agent_id = request.query.get("agent_id")
        include_archived = request.query.get("include_archived") == "true"
        rows = [
            session.as_json()
            for session in self.sessions.values()
            if (not statuses or session.status in statuses)
            and (agent_id is None or session.agent["id"] == agent_id)
            and (include_archived or session.archived_at is None)
        ]
        return web.json_response(_page(request, rows, default_order="desc", default_limit=20, maximum=1000))

    async def delete_session(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        self._delete(session)
        return web.json_response({"id": session.id, "type": "session_deleted"})

    async def archive_session(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        if session.archived_at is None:
            session.archived_at = iso_now()
            if session.status != "terminated":
                self._terminate(session, None)
        return web.json_response(session.as_json())

    def _delete(self, session: RemoteSession) -> None:
        self._emit(session, {"type": "session.deleted"})
        self.forget(session)

    # ------------------------------------------------------------------------------------ events

    async def send_events(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        session = self.session_of(request)  # after the body: the session may have gone meanwhile
        events = body.get("events")
        if not isinstance(events, list) or not events or not all(isinstance(e, dict) for e in events):
            raise ApiError(400, "events must be a non-empty list of event objects")
        if session.status == "terminated":
            raise ApiError(400, f"session {session.id} is terminated and accepts no events")
        for event in events:
            _check_sendable(event)
            if event["type"] == "user.custom_tool_result":
                use_id = event["custom_tool_use_id"]
                if use_id not in session.uses:
                    counts = session.counters.tool_result(use_id, None)
                    counts.received += 1
                    counts.rejected += 1
                    raise ApiError(
                        400, f"custom_tool_use_id {use_id} names no agent.custom_tool_use of this session"
                    )
        echoes = [self._receive(session, event) for event in events]
        return web.json_response({"data": echoes})

    def _receive(self, session: RemoteSession, event: Json) -> Json:
        """Record one sent event, count it, and process it unless the session is rescheduling."""
        recorded = {**event, "id": new_id("sevt"), "processed_at": None}
        session.history.append(recorded)
        if recorded["type"] == "user.message":
            counts = session.counters.input(recorded["content"])
            counts.received += 1
            counts.accepted += 1
        elif recorded["type"] == "user.custom_tool_result":
            use_id = recorded["custom_tool_use_id"]
            counts = session.counters.tool_result(use_id, session.uses[use_id])
            counts.received += 1
            counts.accepted += 1
        if session.status == "rescheduling":
            session.queued.append(recorded)
        else:
            self._process(session, recorded)
        return recorded

    def _process(self, session: RemoteSession, event: Json) -> None:
        event["processed_at"] = iso_now()
        self._publish(session, event)
        if event["type"] == "user.message":
            session.remote.read(event["content"])
            if not session.in_turn:
                session.in_turn = True
                self._running(session)
                self._advance(session)
        elif event["type"] == "user.custom_tool_result":
            if event["custom_tool_use_id"] == session.pending:
                session.pending = None
                session.remote.settle(not event.get("is_error", False), event.get("content") or "")
                self._running(session)
                self._advance(session)
        elif event["type"] == "user.interrupt":
            session.pending = None
            session.in_turn = False
            self._idle(session, {"type": "end_turn"})

    def _emit(self, session: RemoteSession, event: Json, *, tool_call: bool = False) -> Json:
        recorded = {"id": new_id("sevt"), **event, "processed_at": iso_now()}
        session.history.append(recorded)
        self._publish(session, recorded, tool_call=tool_call)
        return recorded

    def _publish(self, session: RemoteSession, event: Json, *, tool_call: bool = False) -> None:
        frame = f"event: {event['type']}\ndata: {canonical(event)}\n\n".encode()
        self.publish(session.id, Frame(frame, tool_call=tool_call))

    def _running(self, session: RemoteSession) -> None:
        session.set_status("running")
        self._emit(session, {"type": "session.status_running"})

    def _idle(self, session: RemoteSession, stop_reason: Json) -> None:
        session.set_status("idle")
        self._emit(session, {"type": "session.status_idle", "stop_reason": stop_reason, "stop_details": None})

    def _advance(self, session: RemoteSession) -> None:
        call = session.remote.next_call()
        if call is not None:
            use = self._emit(
                session,
                {"type": "agent.custom_tool_use", "name": call.name, "input": call.arguments},
                tool_call=True,
            )
            session.pending = use["id"]
            session.uses[use["id"]] = call.name
            session.counters.calls_requested += 1
            self._idle(session, {"type": "requires_action", "event_ids": [use["id"]]})
            return
        text = session.remote.final_message()
        self._emit(session, {"type": "agent.message", "content": [{"type": "text", "text": text}]})
        if session.remote.take_publication():
            self._publish_file(session, text.encode())
        session.in_turn = False
        self._idle(session, {"type": "end_turn"})

    def _publish_file(self, session: RemoteSession, content: bytes) -> None:
        meta: Json = {
            "id": new_id("file"),
            "type": "file",
            "created_at": iso_now(),
            "filename": remote_notes_name(session.remote.subagent),
            "mime_type": "text/markdown",
            "size_bytes": len(content),
            "downloadable": True,
            "expires_at": None,
            "scope": {"id": session.id, "type": "session"},
        }
        self.files[meta["id"]] = StoredFile(meta, content)

    def _read(self, session: RemoteSession) -> None:
        if session.status == "rescheduling":
            session.reads_until_back -= 1
            if session.reads_until_back <= 0:
                self._recover(session)

    def _reschedule(self, session: RemoteSession, reads: int) -> None:
        if session.status == "terminated":
            return
        error = {
            "type": "unknown_error",
            "message": "Transient error; retrying.",
            "retry_status": {"type": "retrying"},
        }
        self._emit(session, {"type": "session.error", "error": error})
        session.set_status("rescheduling")
        session.reads_until_back = reads
        self._emit(session, {"type": "session.status_rescheduled"})

    def _recover(self, session: RemoteSession) -> None:
        if session.status != "rescheduling":
            return
        self._running(session)
        queued, session.queued = session.queued, []
        for event in queued:
            self._process(session, event)
        if session.status == "running":
            if session.pending is not None:
                self._idle(session, {"type": "requires_action", "event_ids": [session.pending]})
            else:
                self._idle(session, {"type": "end_turn"})

    def _terminate(self, session: RemoteSession, message: str | None) -> None:
        if message is not None:
            error = {"type": "unknown_error", "message": message, "retry_status": {"type": "terminal"}}
            self._emit(session, {"type": "session.error", "error": error})
        session.pending = None
        session.queued = []
        session.set_status("terminated")
        self._emit(session, {"type": "session.status_terminated"})

    async def list_events(self, request: web.Request) -> web.Response:
        session = self.session_of(request)
        session.counters.state_reads += 1
        types = set(query_list(request, "types"))
        bounds = {
            name: _parse_time(request.query[f"created_at[{name}]"])
            for name in ("gt", "gte", "lt", "lte")
            if f"created_at[{name}]" in request.query
        }
        rows = [
            event
            for event in session.history
            if (not types or event["type"] in types) and _within(event.get("processed_at"), bounds)
        ]
        answer = web.json_response(_page(request, rows, default_order="asc", default_limit=20, maximum=1000))
        self._read(session)
        return answer

    # ------------------------------------------------------------------------------------- files

    def _file(self, request: web.Request) -> StoredFile:
        return _named(self.files, "file", request.match_info["file_id"])

    async def list_files(self, request: web.Request) -> web.Response:
        scope_id = request.query.get("scope_id")
        ids = set(query_list(request, "ids"))
        rows = [
            stored.meta
            for stored in self.files.values()
            if (scope_id is None or stored.meta["scope"]["id"] == scope_id)
            and (not ids or stored.meta["id"] in ids)
        ]
        return web.json_response(_page(request, rows, default_order="desc", default_limit=20, maximum=1000))

    async def retrieve_file(self, request: web.Request) -> web.Response:
        return web.json_response(self._file(request).meta)

    async def download_file(self, request: web.Request) -> web.Response:
        stored = self._file(request)
        return web.Response(body=stored.content, content_type="application/octet-stream")


def _named(table: dict[str, T], what: str, name: str) -> T:
    if name not in table:
        raise ApiError(404, f"{what} {name} not found")
    return table[name]


def _check_sendable(event: Json) -> None:
    kind = event.get("type")
    if kind not in SENDABLE:
        raise ApiError(400, f"the stand-in does not accept events of type {kind!r} ({', '.join(SENDABLE)})")
    if kind == "user.message":
        content = event.get("content")
        if not isinstance(content, list) or not content:
            raise ApiError(400, "user.message needs a non-empty content list")
    if kind == "user.custom_tool_result" and not isinstance(event.get("custom_tool_use_id"), str):
        raise ApiError(400, "user.custom_tool_result needs custom_tool_use_id")


def _parse_time(raw: str) -> datetime:
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, f"not an RFC 3339 time: {raw!r}") from None


def _within(processed_at: str | None, bounds: dict[str, datetime]) -> bool:
    if not bounds:
        return True
    if processed_at is None:
        return False
    moment = _parse_time(processed_at)
    return (
        ("gt" not in bounds or moment > bounds["gt"])
        and ("gte" not in bounds or moment >= bounds["gte"])
        and ("lt" not in bounds or moment < bounds["lt"])
        and ("lte" not in bounds or moment <= bounds["lte"])
    )


def _page(
    request: web.Request, rows: list[Json], *, default_order: str, default_limit: int, maximum: int
) -> Json:
    """One page of a list, as the SDK's page-cursor lists read it. The cursor names the last row
    returned, so rows added between two pages neither repeat nor go missing."""
    limit = query_limit(request, default=default_limit, maximum=maximum)
    ordered = rows if query_order(request, default=default_order) == "asc" else list(reversed(rows))
    cursor = request.query.get("page")
    if cursor:
        after = cursor.removeprefix("page_")
        position = next((index for index, row in enumerate(ordered) if row["id"] == after), None)
        if not cursor.startswith("page_") or position is None:
            raise ApiError(400, f"page: not a cursor this list returned: {cursor!r}")
        ordered = ordered[position + 1 :]
    data = ordered[:limit]
    more = len(ordered) > limit
    return {"data": data, "next_page": f"page_{data[-1]['id']}" if more else None, "prev_page": None}


def running(
    plan: ScriptedPlan | Path | str, *, faults: Iterable[Fault | Json] = (), api_key: str | None = None
) -> contextlib.AbstractAsyncContextManager[RunningStandin]:
    """A Claude Managed Agents stand-in on 127.0.0.1 (a free port) following `plan`; yields its
    handle, whose `base_url` has no `/v1` (the SDK's paths carry it)."""
    return common.running(AnthropicManagedStandin, plan, faults=faults, api_key=api_key)


if __name__ == "__main__":
    main(AnthropicManagedStandin, "belay.executors.standins.anthropic_managed")
