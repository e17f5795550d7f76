"""Two minimal servers that speak only what the providers document, to show the managed adapters rely
on nothing else (no stand-in counters, faults or extra routes).

Each serves the paths, headers and bodies of its API as the official SDK sends and parses them
(`openai` 3.57 `client.beta.agents.sessions`; `anthropic` 2.14 `client.beta.agents`,
`environments`, `sessions`, `sessions.events`, `files`), requires the beta header and a key, and
answers everything else 404. The remote agent asks, one at a time, for the calls a scripted plan
makes for the subagent its session's metadata names, then ends its turn with a final message.
Nothing is published as a file. Idempotency as OpenAI documents it: the same key and body is a
no-op, another body under the same key a 409 with `x-should-retry: false`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from belay.harness.models.base import ToolCall
from belay.harness.models.scripted import ScriptedPlan, planned_calls

Json = dict[str, Any]
_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", **extra}}, status=status
    )


@dataclass
class Agent:
    calls: list[ToolCall]
    position: int = 0
    received: list[Json] = field(default_factory=list)  # every result the agent was given

    def next_call(self) -> ToolCall | None:
        return self.calls[self.position] if self.position < len(self.calls) else None


# A call whose arguments are sent as this text, verbatim (OpenAI only: its arguments are a string).
RAW_ARGUMENTS = "$raw"


@dataclass
class Listeners:
    queues: set[asyncio.Queue[Json | None]] = field(default_factory=set)

    def publish(self, event: Json) -> None:
        for queue in self.queues:
            queue.put_nowait(event)


def agent_for(plan: ScriptedPlan | list[ToolCall], metadata: dict[str, str]) -> Agent:
    """The calls the plan makes for the subagent the metadata names, or the given calls."""
    if isinstance(plan, list):
        return Agent(list(plan))
    name = metadata.get("belay_subagent", "")
    return Agent(planned_calls(name, plan.subagents[name]))


def arguments_text(call: ToolCall) -> str:
    raw = call.arguments.get(RAW_ARGUMENTS)
    return raw if isinstance(raw, str) else json.dumps(call.arguments)


async def sse(request: web.Request, listeners: Listeners, frame: Any) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    queue: asyncio.Queue[Json | None] = asyncio.Queue()
    listeners.queues.add(queue)
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), 5)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if event is None:
                break
            await response.write(frame(event))
    except ConnectionError:
        pass
    finally:
        listeners.queues.discard(queue)
    return response


# --------------------------------------------------------------------------------------------------
# OpenAI Agents API


@dataclass
class OpenAISession:
    body: Json
    agent: Agent
    listeners: Listeners = field(default_factory=Listeners)
    status: str = "idle"
    turns: list[Json] = field(default_factory=list)
    items: list[Json] = field(default_factory=list)
    pending: Json | None = None
    keys: dict[str, str] = field(default_factory=dict)


class OpenAIAgentsServer:
    def __init__(self, plan: ScriptedPlan | list[ToolCall]) -> None:
        self.plan = plan
        self.sessions: dict[str, OpenAISession] = {}
        self.keys_seen: list[str] = []  # every bearer key a request carried

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.check])
        app.router.add_post("/v1/agents/sessions", self.create)
        app.router.add_get("/v1/agents/sessions", self.list)
        app.router.add_get("/v1/agents/sessions/{id}", self.retrieve)
        app.router.add_post("/v1/agents/sessions/{id}/events", self.post_events)
        app.router.add_get("/v1/agents/sessions/{id}/events", self.stream)
        app.router.add_get("/v1/agents/sessions/{id}/turns", self.turns)
        app.router.add_get("/v1/agents/sessions/{id}/items", self.items)
        app.router.add_get("/v1/agents/sessions/{id}/artifacts", self.artifacts)
        return app

    @web.middleware
    async def check(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("OpenAI-Beta") != "agents=v1":
            return error(400, "Requests require the OpenAI-Beta: agents=v1 header.")
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return error(401, "Missing bearer authentication.")
        self.keys_seen.append(request.headers["Authorization"].removeprefix("Bearer "))
        response: web.StreamResponse = await handler(request)
        return response

    def as_json(self, session_id: str) -> Json:
        session = self.sessions[session_id]
        body = session.body
        agent = body.get("agent") or {}
        required = [] if session.pending is None else [{**session.pending, "type": "function_call"}]
        now = int(time.time())
        return {
            "id": session_id,
            "object": "agent.session",
            "agent": {
                "id": f"agent_{session_id}",
                "model": agent.get("model", ""),
                "instructions": agent.get("instructions"),
                "multi_agent": {"enabled": False},
                "name": None,
                "reasoning": {},
                "service_tier": "auto",
                "text": {},
                "tools": agent.get("tools", []),
            },
            "created_at": now,
            "environment": body["environment"],
            "error": None,
            "last_active_at": now,
            "metadata": body.get("metadata") or {},
            "required_actions": required,
            "status": session.status,
            "usage": None,
            "vault_ids": [],
        }

    def emit(self, session: OpenAISession, event: Json) -> None:
        session.listeners.publish({"event_id": new_id("evt"), **event})

    def advance(self, session_id: str) -> None:
        session = self.sessions[session_id]
        turn = session.turns[-1]
        call = session.agent.next_call()
        if call is None:
            message = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "phase": "final_answer",
                "status": "completed",
                "turn_id": turn["id"],
                "content": [{"type": "output_text", "text": f"Done: {session.agent.position} calls."}],
            }
            session.items.append(message)
            turn.update(status="completed", completed_at=int(time.time()))
            session.status = "idle"
            self.emit(session, {"type": "agent.session.turn.item.done", "item": message, "output_index": 0})
            self.emit(session, {"type": "agent.session.turn.completed", "turn": turn, "turn_id": turn["id"]})
            self.emit(session, {"type": "agent.session.idle", "session": self.as_json(session_id)})
            return
        item = {
            "id": new_id("fc"),
            "type": "function_call",
            "call_id": new_id("call"),
            "name": call.name,
            "arguments": arguments_text(call),
            "status": "completed",
            "turn_id": turn["id"],
        }
        session.items.append(item)
        session.pending = {k: item[k] for k in ("call_id", "name", "arguments", "turn_id")}
        session.status = "requires_action"
        turn["status"] = "waiting"
        self.emit(session, {"type": "agent.session.turn.item.added", "item": item, "turn_id": turn["id"]})
        self.emit(session, {"type": "agent.session.requires_action", "session": self.as_json(session_id)})

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("environment", {}).get("type") != "none" or not body.get("input"):
            return error(400, "input is required when environment.type is none")
        session_id = new_id("sess")
        self.sessions[session_id] = OpenAISession(body, agent_for(self.plan, body.get("metadata") or {}))
        self.start_turn(session_id, body["input"])
        return web.json_response(self.as_json(session_id))

    def start_turn(self, session_id: str, text: Any) -> None:
        session = self.sessions[session_id]
        turn = {
            "id": new_id("turn"),
            "object": "agent.session.turn",
            "agent_id": f"agent_{session_id}",
            "session_id": session_id,
            "created_at": int(time.time()),
            "status": "in_progress",
        }
        session.turns.append(turn)
        session.items.append(
            {
                "id": new_id("msg"),
                "type": "message",
                "role": "user",
                "status": "completed",
                "turn_id": turn["id"],
                "content": [{"type": "input_text", "text": str(text)}],
            }
        )
        session.status = "in_progress"
        asyncio.get_running_loop().call_soon(self.advance, session_id)

    async def list(self, request: web.Request) -> web.Response:
        wanted = {k[len("metadata[") : -1]: v for k, v in request.query.items() if k.startswith("metadata[")}
        rows = [
            self.as_json(sid)
            for sid, s in self.sessions.items()
            if all((s.body.get("metadata") or {}).get(k) == v for k, v in wanted.items())
        ]
        return web.json_response(page(rows))

    def session(self, request: web.Request) -> str:
        session_id = request.match_info["id"]
        if session_id not in self.sessions:
            raise web.HTTPNotFound(
                text=json.dumps({"error": {"message": f"No session {session_id}", "type": "not_found"}}),
                content_type="application/json",
            )
        return session_id

    async def retrieve(self, request: web.Request) -> web.Response:
        return web.json_response(self.as_json(self.session(request)))

    async def post_events(self, request: web.Request) -> web.Response:
        session_id = self.session(request)
        session = self.sessions[session_id]
        raw = await request.read()
        key = request.headers.get("Idempotency-Key")
        if key is not None and key in session.keys:
            if session.keys[key] != raw.decode():
                return web.Response(status=409, headers={"x-should-retry": "false"}, text="")
            return web.Response(status=202)
        for event in json.loads(raw)["events"]:
            if event["type"] == "agent.session.input.tool_result":
                pending = session.pending
                if pending is None or pending["call_id"] != event["call_id"]:
                    return error(
                        400, f"Unknown pending tool call: {event['call_id']}", code="invalid_request_error"
                    )
                output = {
                    "id": new_id("fco"),
                    "type": "function_call_output",
                    "call_id": event["call_id"],
                    "output": event.get("output"),
                    "error": event.get("error"),
                    "status": "completed" if event["success"] else "failed",
                    "turn_id": pending["turn_id"],
                }
                session.items.append(output)
                session.agent.received.append(event)
                session.pending = None
                session.agent.position += 1
                session.status = "in_progress"
                session.turns[-1]["status"] = "in_progress"
                asyncio.get_running_loop().call_soon(self.advance, session_id)
            elif event["type"] == "agent.session.input.message":
                self.start_turn(session_id, event["input"])
            else:
                return error(400, f"unsupported event {event['type']}")
        if key is not None:
            session.keys[key] = raw.decode()
        return web.Response(status=202)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        session = self.sessions[self.session(request)]
        return await sse(request, session.listeners, lambda e: f"data: {json.dumps(e)}\n\n".encode())

    async def turns(self, request: web.Request) -> web.Response:
        return web.json_response(page(self.sessions[self.session(request)].turns, request))

    async def items(self, request: web.Request) -> web.Response:
        return web.json_response(page(self.sessions[self.session(request)].items, request))

    async def artifacts(self, request: web.Request) -> web.Response:
        self.session(request)
        return web.json_response(page([]))


def page(rows: list[Json], request: web.Request | None = None) -> Json:
    order = request.query.get("order", "desc") if request is not None else "asc"
    ordered = list(reversed(rows)) if order == "desc" else list(rows)
    limit = int(request.query.get("limit", "20")) if request is not None else len(ordered) or 1
    after = request.query.get("after") if request is not None else None
    if after is not None:
        ids = [r["id"] for r in ordered]
        ordered = ordered[ids.index(after) + 1 :] if after in ids else []
    shown = ordered[:limit]
    return {
        "object": "list",
        "data": shown,
        "has_more": len(ordered) > limit,
        "first_id": shown[0]["id"] if shown else None,
        "last_id": shown[-1]["id"] if shown else None,
    }


# --------------------------------------------------------------------------------------------------
# Claude Managed Agents


@dataclass
class AnthropicSession:
    body: Json
    agent: Agent
    listeners: Listeners = field(default_factory=Listeners)
    status: str = "idle"
    history: list[Json] = field(default_factory=list)
    pending: str | None = None


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


class AnthropicManagedServer:
    BETA = "managed-agents-2026-04-01"

    def __init__(self, plan: ScriptedPlan | list[ToolCall]) -> None:
        self.plan = plan
        self.agents: dict[str, Json] = {}
        self.sessions: dict[str, AnthropicSession] = {}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.check])
        app.router.add_post("/v1/agents", self.create_agent)
        app.router.add_post("/v1/environments", self.create_environment)
        app.router.add_post("/v1/sessions", self.create_session)
        app.router.add_get("/v1/sessions", self.list_sessions)
        app.router.add_get("/v1/sessions/{id}", self.retrieve)
        app.router.add_get("/v1/sessions/{id}/events", self.list_events)
        app.router.add_post("/v1/sessions/{id}/events", self.send_events)
        app.router.add_get("/v1/sessions/{id}/events/stream", self.stream)
        app.router.add_get("/v1/files", self.files)
        return app

    @web.middleware
    async def check(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not (request.headers.get("Authorization") or request.headers.get("x-api-key")):
            return self.error(401, "authentication_error", "missing key")
        if request.path != "/v1/files" and self.BETA not in request.headers.get("anthropic-beta", ""):
            return self.error(400, "invalid_request_error", f"anthropic-beta must name {self.BETA}")
        response: web.StreamResponse = await handler(request)
        return response

    @staticmethod
    def error(status: int, kind: str, message: str) -> web.Response:
        return web.json_response(
            {"type": "error", "error": {"type": kind, "message": message}}, status=status
        )

    async def create_agent(self, request: web.Request) -> web.Response:
        body = await request.json()
        agent = {
            "id": new_id("agent"),
            "type": "agent",
            "version": 1,
            "name": body["name"],
            "model": {"id": body["model"]},
            "system": body.get("system"),
            "tools": body.get("tools", []),
            "metadata": body.get("metadata") or {},
            "created_at": stamp(),
            "updated_at": stamp(),
        }
        self.agents[agent["id"]] = agent
        return web.json_response(agent)

    async def create_environment(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(
            {
                "id": new_id("env"),
                "type": "environment",
                "name": body["name"],
                "config": body.get("config"),
                "metadata": body.get("metadata") or {},
                "created_at": stamp(),
            }
        )

    def as_json(self, session_id: str) -> Json:
        session = self.sessions[session_id]
        agent = self.agents[session.body["agent"]]
        return {
            "id": session_id,
            "type": "session",
            "agent": {**agent, "execution_identity": {}, "mcp_servers": [], "skills": []},
            "created_at": stamp(),
            "updated_at": stamp(),
            "environment_id": session.body["environment_id"],
            "metadata": session.body.get("metadata") or {},
            "outcome_evaluations": [],
            "resources": [],
            "stats": {},
            "status": session.status,
            "usage": {},
            "vault_ids": [],
        }

    def emit(self, session: AnthropicSession, event: Json) -> Json:
        recorded = {"id": new_id("sevt"), "processed_at": stamp(), **event}
        session.history.append(recorded)
        session.listeners.publish(recorded)
        return recorded

    def advance(self, session: AnthropicSession) -> None:
        call = session.agent.next_call()
        if call is None:
            self.emit(session, {"type": "agent.message", "content": [{"type": "text", "text": "Done."}]})
            session.status = "idle"
            self.emit(session, {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}})
            return
        use = self.emit(
            session, {"type": "agent.custom_tool_use", "name": call.name, "input": call.arguments}
        )
        session.pending = use["id"]
        session.status = "idle"
        self.emit(
            session,
            {
                "type": "session.status_idle",
                "stop_reason": {"type": "requires_action", "event_ids": [use["id"]]},
            },
        )

    async def create_session(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("agent") not in self.agents:
            return self.error(404, "not_found_error", "no such agent")
        session_id = new_id("sesn")
        session = AnthropicSession(body, agent_for(self.plan, body.get("metadata") or {}))
        self.sessions[session_id] = session
        for event in body.get("initial_events") or []:
            self.receive(session, event)
        return web.json_response(self.as_json(session_id))

    def receive(self, session: AnthropicSession, event: Json) -> Json:
        recorded = self.emit(session, event)
        if event["type"] in ("user.message", "user.custom_tool_result"):
            if event["type"] == "user.custom_tool_result":
                session.agent.received.append(event)
                session.pending = None
                session.agent.position += 1
            session.status = "running"
            self.emit(session, {"type": "session.status_running"})
            asyncio.get_running_loop().call_soon(self.advance, session)
        return recorded

    async def list_sessions(self, request: web.Request) -> web.Response:
        agent_id = request.query.get("agent_id")
        rows = [self.as_json(sid) for sid, s in self.sessions.items() if agent_id in (None, s.body["agent"])]
        return web.json_response({"data": rows, "next_page": None})

    def session(self, request: web.Request) -> AnthropicSession:
        session_id = request.match_info["id"]
        if session_id not in self.sessions:
            raise web.HTTPNotFound(
                text=json.dumps(
                    {"type": "error", "error": {"type": "not_found_error", "message": "no session"}}
                ),
                content_type="application/json",
            )
        return self.sessions[session_id]

    async def retrieve(self, request: web.Request) -> web.Response:
        self.session(request)
        return web.json_response(self.as_json(request.match_info["id"]))

    async def list_events(self, request: web.Request) -> web.Response:
        session = self.session(request)
        types = request.query.getall("types[]", [])
        rows = [e for e in session.history if not types or e["type"] in types]
        return web.json_response({"data": rows, "next_page": None})

    async def send_events(self, request: web.Request) -> web.Response:
        session = self.session(request)
        echoes = []
        for event in (await request.json())["events"]:
            if event["type"] == "user.custom_tool_result" and event["custom_tool_use_id"] != session.pending:
                return self.error(400, "invalid_request_error", "no pending custom_tool_use with that id")
            echoes.append(self.receive(session, event))
        return web.json_response({"data": echoes})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        session = self.session(request)

        def frame(event: Json) -> bytes:
            return f"id: {event['id']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

        return await sse(request, session.listeners, frame)

    async def files(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [], "next_page": None, "has_more": False})


@contextlib.asynccontextmanager
async def serving(app: web.Application, path: str = "") -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
    finally:
        await runner.cleanup()
