"""What both provider stand-ins share: the counters, the fault hooks, the event streams and the
server's life (in process or as a command).

The remote agent. A session created with metadata `belay_subagent: NAME` follows the calls the
scripted plan makes for NAME (`belay.executors.standins.remote_agent`): the first user message
starts a turn (a message seeded from Belay's record says where the work stands, and the agent goes
on from there), the agent asks for one call at a time and asks for the next only once the
previous one has a result (an error result does not stop it), then ends the turn with a final
message listing each call and how it ended. Where the plan has it end its turn before a call
(`end_turn_before`), it ends the turn there once with those words, publishing nothing; the next
user message starts a turn that asks for the call. When a turn ends with every call done the first time,
the agent publishes that message as one remote output named `<subagent>-remote-notes.md`. A turn
cancelled or interrupted while a call is pending does not settle that call: the next turn asks for
it again, under a new call id. The agent reports its model as the stand-in's (`standin_model_id`:
the scripted plan, in place of the model asked for). Everything lives in the server's memory: a
new stand-in process has no sessions, like a provider that lost them.

Counters. `GET /_standin/stats` (or `RunningStandin.stats()`) answers, per remote session: each
input message (keyed by its content) and each tool result (keyed by call id) with how many times it
was received, accepted as new, answered as a duplicate (an idempotent repost) or rejected; which
calls were answered (accepted) more than once; how many calls the agent asked for; and the number
of sessions created. Counters outlive a deleted session.

Fault hooks. `POST /_standin/faults` with one JSON object, `faults=[...]` when constructing a
server, or `RunningStandin.add_fault(...)`. Each is one of:

- `{"kind": "cut_stream", "after_events": N, "mode": "abort"|"clean", "session_id": S?}`: the next
  event stream to deliver an event (of session S, or of any session) delivers N more events, then
  its connection is cut: `abort` closes the TCP connection without the terminating chunk (the
  client sees an incomplete body), `clean` ends the body properly. The remote state is unchanged:
  the events not delivered still happened.
- `{"kind": "server_error", "path": REGEX, "method": "POST"|"GET"|"DELETE"|"*", "status": 500,
  "times": 1, "after_apply": false}`: the next `times` requests whose path matches REGEX
  (`re.search`) are answered with `status` (a 5xx, the provider's error body). With `after_apply`
  (POST and DELETE only) the request takes effect first and only its answer is lost (a streamed
  answer, already under way, is left alone).
- `{"kind": "duplicate_event", "session_id": S?}`: the next tool call delivered on a stream
  (OpenAI `agent.session.turn.item.added` with a function call, Anthropic `agent.custom_tool_use`)
  is written twice on that stream, byte for byte.
- `{"kind": "end_idle_streams", "session_id": S?}`: from now on, every event stream of S (or of any
  session) ends cleanly whenever the session's turn is over and the stream told all it had (at once
  when it opens on an idle session), as a provider that holds a stream only while its agent works.
- `{"kind": "delete_session", "session_id": S?}`: the session (without `session_id`: every
  session) is gone, as if deleted through the API or lost by the provider: its streams end and
  every request about it answers 404.
- Provider-specific session faults (`fail_session`; `reschedule_session`, `recover_session`,
  `terminate_session`, `compact_context`) are described in each provider's module.

`GET /_standin/faults` lists the armed faults and those served. Nothing under `/_standin/` is part
of either provider's API, and nothing there needs a key.

Its life as a command (`main`): it listens on loopback, writes its ready file (`{base_url, pid}`)
once it does, and stops on SIGTERM, or by itself after `--idle-exit` seconds in which it had no
request (an open event stream is a request under way, so a followed session is never idle).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from aiohttp import web
from pydantic import BaseModel

from belay.executors.standins.faults import (
    CutStream,
    DuplicateEvent,
    EndIdleStreams,
    Fault,
    FaultRefused,
    ServerError,
    SessionFault,
    StreamFaultT,
    _Fault,
    parse_fault,
)
from belay.executors.standins.holder import until_abandoned
from belay.executors.standins.remote_agent import (
    ScriptedRemoteAgent,
)
from belay.harness.models.scripted import PlanError, ScriptedPlan, load_plan

KEEPALIVE_SECONDS = 10.0
Json = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def unix_now() -> int:
    return int(datetime.now(UTC).timestamp())


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


# -------------------------------------------------------------------------------------- counters


@dataclass
class Deliveries:
    received: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0

    def as_json(self) -> Json:
        return {
            "received": self.received,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
        }


@dataclass
class SessionCounters:
    subagent: str
    status: str = "idle"
    calls_requested: int = 0
    idempotency_conflicts: int = 0
    state_reads: int = 0  # the session or its history read (retrieve, events.list)
    inputs: dict[str, tuple[Any, Deliveries]] = field(default_factory=dict)
    tool_results: dict[str, tuple[str | None, Deliveries]] = field(default_factory=dict)

    def input(self, content: Any) -> Deliveries:
        key = canonical(content)
        if key not in self.inputs:
            self.inputs[key] = (content, Deliveries())
        return self.inputs[key][1]

    def tool_result(self, call_id: str, name: str | None) -> Deliveries:
        if call_id not in self.tool_results:
            self.tool_results[call_id] = (name, Deliveries())
        return self.tool_results[call_id][1]

    def as_json(self) -> Json:
        answered_twice = sorted(
            call_id for call_id, (_, counts) in self.tool_results.items() if counts.accepted > 1
        )
        return {
            "subagent": self.subagent,
            "status": self.status,
            "calls_requested": self.calls_requested,
            "state_reads": self.state_reads,
            "idempotency_conflicts": self.idempotency_conflicts,
            "inputs": [{"content": content, **counts.as_json()} for content, counts in self.inputs.values()],
            "tool_results": {
                call_id: {"name": name, **counts.as_json()}
                for call_id, (name, counts) in self.tool_results.items()
            },
            "answered_twice": answered_twice,
            "any_call_answered_twice": bool(answered_twice),
        }


# ---------------------------------------------------------------------------------------- streams


@dataclass(frozen=True)
class Frame:
    data: bytes
    tool_call: bool = False  # subject to the duplicate_event fault
    ends_stream: bool = False  # a stream that asked to end at its turn's end stops after this one


class EventStream:
    """One open event stream of a session: a queue the session publishes into."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.queue: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.cut: CutStream | None = None
        self.remaining = 0


# ----------------------------------------------------------------------------------------- server


class ApiError(Exception):
    """A refusal in the provider's words; each server renders it in its own error body."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


@dataclass
class RemoteSessionBase:
    """What every remote session has, whatever the provider."""

    id: str
    counters: SessionCounters

    def turn_over(self) -> bool:
        """Idle with no call waiting on its result: the remote agent's turn ended."""
        return self.counters.status == "idle" and getattr(self, "pending", None) is None


SessionT = TypeVar("SessionT", bound=RemoteSessionBase)


def header_tokens(request: web.Request, name: str) -> list[str]:
    """The comma-separated values of a header (a beta header may name several betas)."""
    return [part.strip() for part in request.headers.get(name, "").split(",")]


class StandinServer(Generic[SessionT]):
    """The parts of a stand-in that do not depend on the provider's wire format."""

    provider: ClassVar[str]
    session_faults: ClassVar[tuple[type[_Fault], ...]]
    base_path: ClassVar[str]  # appended to http://host:port to make the SDK's base URL

    def __init__(
        self, plan: ScriptedPlan, *, faults: Iterable[Fault | Json] = (), api_key: str | None = None
    ) -> None:
        self.plan = plan
        self.api_key = api_key
        self.sessions: dict[str, SessionT] = {}
        self.counters: dict[str, SessionCounters] = {}
        self.sessions_created = 0
        self.armed: list[CutStream | ServerError | DuplicateEvent | EndIdleStreams] = []
        self.served: list[Json] = []
        self.streams: dict[str, set[EventStream]] = {}
        self.under_way = 0
        self.last_request = time.monotonic()
        for fault in faults:
            parsed = parse_fault(fault)
            if isinstance(parsed, SessionFault):
                raise FaultRefused(f"{parsed.kind} needs a running session; add it once the session exists")
            self.add_fault(parsed)

    # -- provider hooks

    def add_routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    def error_response(self, error: ApiError) -> web.Response:
        raise NotImplementedError

    def check_request(self, request: web.Request) -> None:
        """Raise `ApiError` when the request lacks what the provider requires (key, beta header)."""
        raise NotImplementedError

    def apply_session_fault(self, session: SessionT, fault: SessionFault) -> None:
        raise NotImplementedError

    def session_not_found(self, session_id: str) -> ApiError:
        raise NotImplementedError

    # -- models: the provider's Models API, as it answers for a model it has or has not
    known_models: ClassVar[re.Pattern[str]]

    def model_json(self, model: str) -> Json:
        raise NotImplementedError

    def unknown_model(self, model: str) -> ApiError:
        raise NotImplementedError

    async def retrieve_model(self, request: web.Request) -> web.Response:
        """`GET /v1/models/{model}`: a model id of the provider's family is known, any other is not."""
        model = request.match_info["model"]
        if not self.known_models.match(model):
            raise self.unknown_model(model)
        return web.json_response(self.model_json(model))

    # -- sessions

    def remote_agent(self, metadata: dict[str, str]) -> ScriptedRemoteAgent:
        try:
            return ScriptedRemoteAgent.for_metadata(self.plan, metadata)
        except PlanError as error:
            raise ApiError(400, str(error)) from None

    def register(self, session: SessionT) -> None:
        self.sessions[session.id] = session
        self.counters[session.id] = session.counters
        self.sessions_created += 1

    def session_of(self, request: web.Request) -> SessionT:
        session_id = request.match_info["session_id"]
        if session_id not in self.sessions:
            raise self.session_not_found(session_id)
        return self.sessions[session_id]

    def forget(self, session: SessionT) -> None:
        """The session is deleted: requests about it answer 404, its streams end; its counters stay."""
        del self.sessions[session.id]
        session.counters.status = "deleted"
        self.end_streams(session.id)

    async def stream_events(self, request: web.Request) -> web.StreamResponse:
        """The session's live event stream: what happens from now on."""
        session = self.session_of(request)
        return await self.drain(request, self.subscribe(session.id))

    # -- counters and faults

    def stats(self) -> Json:
        return {
            "provider": self.provider,
            "sessions_created": self.sessions_created,
            "sessions": {session_id: counters.as_json() for session_id, counters in self.counters.items()},
        }

    def faults(self) -> Json:
        return {"armed": [fault.model_dump() for fault in self.armed], "served": list(self.served)}

    def add_fault(self, value: Fault | Json) -> None:
        fault = parse_fault(value)
        if isinstance(fault, SessionFault):
            if not isinstance(fault, self.session_faults):
                raise FaultRefused(f"the {self.provider} stand-in has no fault {fault.kind!r}")
            if fault.session_id is None:  # delete_session alone may name none: every session
                targets = list(self.sessions.values())
            elif fault.session_id in self.sessions:
                targets = [self.sessions[fault.session_id]]
            else:
                raise FaultRefused(f"no session {fault.session_id}")
            for session in targets:
                self.apply_session_fault(session, fault)
            self.served.append({**fault.model_dump(), "sessions": [session.id for session in targets]})
            return
        if isinstance(fault, ServerError) and fault.after_apply and fault.method not in ("POST", "DELETE"):
            raise FaultRefused("after_apply needs method POST or DELETE: a read has no effect to apply")
        self.armed.append(fault)

    def _claim_server_error(self, request: web.Request) -> ServerError | None:
        for index, fault in enumerate(self.armed):
            if isinstance(fault, ServerError) and fault.matches(request):
                if fault.times > 1:
                    self.armed[index] = fault.model_copy(update={"times": fault.times - 1})
                else:
                    del self.armed[index]
                self.served.append({**fault.model_dump(), "request": f"{request.method} {request.path}"})
                return fault
        return None

    def _claim(self, kind: type[StreamFaultT], session_id: str) -> StreamFaultT | None:
        for index, fault in enumerate(self.armed):
            if isinstance(fault, kind) and fault.session_id in (None, session_id):
                del self.armed[index]
                self.served.append({**fault.model_dump(), "stream_of": session_id})
                return fault
        return None

    # -- streams

    def publish(self, session_id: str, frame: Frame) -> None:
        for stream in self.streams.get(session_id, ()):
            stream.queue.put_nowait(frame)

    def subscribe(self, session_id: str) -> EventStream:
        stream = EventStream(session_id)
        self.streams.setdefault(session_id, set()).add(stream)
        return stream

    def end_streams(self, session_id: str) -> None:
        for stream in self.streams.get(session_id, ()):
            stream.queue.put_nowait(None)

    async def drain(
        self, request: web.Request, stream: EventStream, *, until_end: bool = False
    ) -> web.StreamResponse:
        """Write a stream's frames as server-sent events until the session ends it, the client goes,
        a cut fault strikes, or (with `until_end`) the turn it was opened for ends."""
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"},
        )
        response.force_close()
        try:
            await response.prepare(request)
            while True:
                if self._ends_idle(stream):
                    await response.write_eof()
                    return response
                try:
                    frame = await asyncio.wait_for(stream.queue.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if frame is None:
                    await response.write_eof()
                    return response
                duplicate = frame.tool_call and self._claim(DuplicateEvent, stream.session_id) is not None
                for _ in range(2 if duplicate else 1):
                    if await self._cut_now(request, response, stream):
                        return response
                    await response.write(frame.data)
                    if stream.cut is not None:
                        stream.remaining -= 1
                        if await self._cut_now(request, response, stream):
                            return response
                if until_end and frame.ends_stream:
                    await response.write_eof()
                    return response
        except ConnectionError:  # the client went away
            return response
        finally:
            self.streams.get(stream.session_id, set()).discard(stream)

    def _ends_idle(self, stream: EventStream) -> bool:
        """Whether an `end_idle_streams` fault ends the stream now: its session's turn is over and
        the stream told everything it had."""
        if not any(
            isinstance(f, EndIdleStreams) and f.session_id in (None, stream.session_id) for f in self.armed
        ):
            return False
        session = self.sessions.get(stream.session_id)
        if session is None or not session.turn_over() or not stream.queue.empty():
            return False
        self.served.append({"kind": "end_idle_streams", "stream_of": stream.session_id})
        return True

    async def _cut_now(self, request: web.Request, response: web.StreamResponse, stream: EventStream) -> bool:
        if stream.cut is None:
            stream.cut = self._claim(CutStream, stream.session_id)
            if stream.cut is None:
                return False
            stream.remaining = stream.cut.after_events
        if stream.remaining > 0:
            return False
        if stream.cut.mode == "clean":
            await response.write_eof()
        elif request.transport is not None:
            # close(), not abort(): what was written still arrives, then the body stops unfinished.
            request.transport.close()
        return True

    # -- the application

    def app(self) -> web.Application:
        application = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        application.router.add_get("/_standin/stats", self._stats)
        application.router.add_get("/_standin/faults", self._faults)
        application.router.add_post("/_standin/faults", self._add_fault)
        self.add_routes(application.router)
        application.on_shutdown.append(self._close_all_streams)
        return application

    async def _close_all_streams(self, _application: web.Application) -> None:
        for session_id in list(self.streams):
            self.end_streams(session_id)

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        # What `idle_s` counts from: no request under way (a stream open is one), none since.
        self.under_way += 1
        try:
            return await self._answer(request, handler)
        finally:
            self.under_way -= 1
            self.last_request = time.monotonic()

    def idle_s(self) -> float:
        return 0.0 if self.under_way else time.monotonic() - self.last_request

    async def _answer(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if request.path.startswith("/_standin/"):
            response: web.StreamResponse = await handler(request)
            return response
        try:
            self.check_request(request)
            fault = self._claim_server_error(request)
            if fault is not None and not fault.after_apply:
                return self._fault_response(fault)
            try:
                response = await handler(request)
            except ApiError as error:
                response = self.error_response(error)
            if fault is not None and not response.prepared:
                return self._fault_response(fault)
            return response
        except ApiError as error:
            return self.error_response(error)
        except web.HTTPNotFound:
            return self.error_response(ApiError(404, f"no route {request.method} {request.path}"))
        except web.HTTPMethodNotAllowed:
            return self.error_response(
                ApiError(405, f"method {request.method} not allowed on {request.path}")
            )

    def _fault_response(self, fault: ServerError) -> web.Response:
        return self.error_response(ApiError(fault.status, f"stand-in fault: answered {fault.status}"))

    async def _stats(self, _request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _faults(self, _request: web.Request) -> web.Response:
        return web.json_response(self.faults())

    async def _add_fault(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be one JSON object"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be one JSON object"}, status=400)
        try:
            self.add_fault(body)
        except FaultRefused as error:
            return web.json_response({"error": str(error)}, status=400)
        return web.json_response(self.faults())


async def json_body(request: web.Request) -> Json:
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def query_list(request: web.Request, name: str) -> list[str]:
    """A repeated query parameter, as the SDKs send it (`name[]=a&name[]=b`) or plainly."""
    return [*request.query.getall(f"{name}[]", []), *request.query.getall(name, [])]


def query_limit(request: web.Request, *, default: int, maximum: int) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise ApiError(400, f"limit must be an integer, got {raw!r}") from None
    if not 1 <= limit <= maximum:
        raise ApiError(400, f"limit must be between 1 and {maximum}")
    return limit


def query_order(request: web.Request, *, default: str) -> str:
    order = request.query.get("order", default)
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order!r}")
    return order


# ----------------------------------------------------------------------------- running the server


T = TypeVar("T")


class RunningStandin:
    """A stand-in listening on loopback. Its methods may be called from any thread."""

    def __init__(self, server: StandinServer[Any], base_url: str, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.base_url = base_url
        self._loop = loop

    def stats(self) -> Json:
        return self._on_loop(self.server.stats)

    def faults(self) -> Json:
        return self._on_loop(self.server.faults)

    def add_fault(self, fault: Fault | Json) -> None:
        """Arm a fault, or apply a session fault now; `FaultRefused` when it does not apply."""
        self._on_loop(lambda: self.server.add_fault(fault))

    def _on_loop(self, function: Callable[[], T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return function()
        result: Future[T] = Future()

        def call() -> None:
            try:
                result.set_result(function())
            except BaseException as error:
                result.set_exception(error)

        self._loop.call_soon_threadsafe(call)
        return result.result()


@contextlib.asynccontextmanager
async def running(
    server_class: type[StandinServer[Any]],
    plan: ScriptedPlan | Path | str,
    *,
    faults: Iterable[Fault | Json] = (),
    api_key: str | None = None,
) -> AsyncIterator[RunningStandin]:
    """A stand-in of `server_class` on 127.0.0.1 (a free port) following `plan`; yields its handle."""
    async with serve(server_class(resolve_plan(plan), faults=faults, api_key=api_key)) as standin:
        yield standin


@contextlib.asynccontextmanager
async def serve(
    server: StandinServer[Any], *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[RunningStandin]:
    """Run `server` on host:port (0: a free port) for the duration of the block."""
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_port = runner.addresses[0][1]
        yield RunningStandin(
            server, f"http://{host}:{bound_port}{server.base_path}", asyncio.get_running_loop()
        )
    finally:
        await runner.cleanup()


def resolve_plan(plan: ScriptedPlan | Path | str) -> ScriptedPlan:
    return plan if isinstance(plan, ScriptedPlan) else load_plan(Path(plan))


class StandinReady(BaseModel):
    base_url: str
    pid: int


def read_ready_file(path: Path) -> StandinReady:
    return StandinReady.model_validate_json(path.read_text())


async def _serve_forever(server: StandinServer[Any], options: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stopping.set)

    async def idle_for(limit: float) -> None:
        while server.idle_s() < limit:
            await asyncio.sleep(min(max(limit - server.idle_s(), 0.05), 30.0))

    async def stop_after(watched: Awaitable[None]) -> None:
        await watched
        stopping.set()

    watched = [idle_for(options.idle_exit)] if options.idle_exit else []
    if options.holder_file is not None:
        watched.append(until_abandoned(options.holder_file, options.holder_grace, server.idle_s))
    watchdogs = [asyncio.create_task(stop_after(w)) for w in watched]
    ready_file = options.ready_file
    async with serve(server, host=options.host, port=options.port) as standin:
        ready = StandinReady(base_url=standin.base_url, pid=os.getpid())
        if ready_file is not None:
            temporary = ready_file.with_name(f".{ready_file.name}.{os.getpid()}.tmp")
            temporary.write_text(ready.model_dump_json())
            os.replace(temporary, ready_file)
        print(standin.base_url, flush=True)
        try:
            await stopping.wait()
        finally:
            for watchdog in watchdogs:
                watchdog.cancel()
            # Gone, it is no longer to be found: unless a newer stand-in has taken the file over.
            with contextlib.suppress(OSError, ValueError):
                if ready_file is not None and read_ready_file(ready_file) == ready:
                    ready_file.unlink()


def main(server_class: type[StandinServer[Any]], module: str, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=f"The {server_class.provider} stand-in: serve its wire format on loopback.",
    )
    parser.add_argument("--plan", required=True, type=Path, help="the scripted plan the remote agent follows")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", type=Path, help="written with {base_url, pid} once listening")
    parser.add_argument("--api-key", help="the only key accepted (default: any non-empty key)")
    parser.add_argument(
        "--idle-exit", type=float, metavar="SECONDS", help="stop after this long without a request"
    )
    parser.add_argument("--holder-file", type=Path, help="stop once the process it names (belay) is gone ...")
    parser.add_argument("--holder-grace", type=float, default=0.0, metavar="SECONDS", help="... this long")
    options = parser.parse_args(argv)
    try:
        plan = load_plan(options.plan)
    except PlanError as error:
        problems = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
        print(f"error: {problems} (fix the plan file and start the stand-in again)", file=sys.stderr)
        raise SystemExit(2) from None
    server = server_class(plan, api_key=options.api_key)
    try:
        asyncio.run(_serve_forever(server, options))
    except OSError as error:
        print(f"error: cannot listen on {options.host}:{options.port}: {error.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
