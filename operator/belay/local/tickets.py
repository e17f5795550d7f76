"""A small ticket service on loopback: the example external system with an effect that must not be
repeated.

    python -m belay.local.tickets --state FILE --token-file FILE [--port 0] [--ready-file FILE]

Every request must carry the service's credential (`Authorization: Bearer <token>`), else it is
answered `401` and nothing is read or written: the port is open to every process on the machine,
and to every `internet` sandbox. `belay run` makes a new credential for each attempt, held in the
harness's memory only.

`POST /tickets` always creates a new ticket, even for a `client_ref` it has seen: it does not
deduplicate, which is exactly why `create_ticket` is an `unsafe` tool. `GET /tickets?client_ref=X`
lists the tickets carrying a reference, `GET /tickets?client_ref_prefix=X` those whose reference
begins with X; the second is the reconcile probe a resumed harness uses to find out whether a
request whose result was lost did create a ticket.

Tickets live in one JSON file (the session home passes `<home>/sessions/<id>/tickets.json`), written
before the response is sent, so a test can count them and a killed service loses nothing it
acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hmac
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel, Field, ValidationError

from belay.harness.tickets import Ticket, TicketDraft

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# What one request may carry; what one ticket may carry is the wire format's (belay.harness.tickets).
MAX_REQUEST_BYTES = 256 * 1024


class TicketFile(BaseModel):
    next_number: int = 1
    tickets: list[Ticket] = Field(default_factory=list)


@contextlib.contextmanager
def _locked(state_file: Path) -> Iterator[None]:
    """An exclusive lock beside the state file, so two processes never interleave a read-modify-write."""
    lock_path = state_file.with_name(state_file.name + ".lock")
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_tickets(state_file: Path) -> list[Ticket]:
    """Every ticket in a state file (an absent file has none)."""
    return _read(state_file).tickets


def _read(state_file: Path) -> TicketFile:
    try:
        return TicketFile.model_validate_json(state_file.read_text())
    except FileNotFoundError:
        return TicketFile()


def _write(state_file: Path, content: TicketFile) -> None:
    temporary = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
    with temporary.open("w") as handle:
        handle.write(content.model_dump_json(indent=2))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, state_file)


def add_ticket(state_file: Path, draft: TicketDraft) -> Ticket:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    with _locked(state_file):
        content = _read(state_file)
        ticket = Ticket(
            **draft.model_dump(), id=f"TICKET-{content.next_number}", created_at=datetime.now(UTC)
        )
        _write(
            state_file, TicketFile(next_number=content.next_number + 1, tickets=[*content.tickets, ticket])
        )
    return ticket


class TicketService:
    """The ticket service as an in-process aiohttp server: `await start()`, `.url`, `await stop()`;
    it answers only requests that carry `token`."""

    def __init__(self, state_file: Path, token: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if not token:
            raise ValueError("the ticket service needs a credential")
        self.state_file = state_file
        self._expected = f"Bearer {token}".encode()
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("ticket service is not started")
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        application = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[self._authenticated])
        application.router.add_post("/tickets", self._create)
        application.router.add_get("/tickets", self._list)
        application.router.add_get("/tickets/{ticket_id}", self._get)
        return application

    async def start(self) -> TicketService:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> TicketService:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @web.middleware
    async def _authenticated(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, self._expected):
            return web.json_response({"error": "the ticket service needs its credential"}, status=401)
        return await handler(request)

    async def _create(self, request: web.Request) -> web.Response:
        too_large = {"error": f"request body above the ticket service's limit of {MAX_REQUEST_BYTES} bytes"}
        if request.content_length is not None and request.content_length > MAX_REQUEST_BYTES:
            return web.json_response(too_large, status=413)
        try:
            draft = TicketDraft.model_validate_json(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return web.json_response(too_large, status=413)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            return web.json_response({"error": f"invalid ticket: {problems}"}, status=400)
        ticket = await asyncio.to_thread(add_ticket, self.state_file, draft)
        return web.json_response(ticket.model_dump(mode="json"), status=201)

    async def _list(self, request: web.Request) -> web.Response:
        tickets = await asyncio.to_thread(load_tickets, self.state_file)
        client_ref = request.query.get("client_ref")
        if client_ref is not None:
            tickets = [ticket for ticket in tickets if ticket.client_ref == client_ref]
        prefix = request.query.get("client_ref_prefix")
        if prefix is not None:
            tickets = [ticket for ticket in tickets if (ticket.client_ref or "").startswith(prefix)]
        return web.json_response([ticket.model_dump(mode="json") for ticket in tickets])

    async def _get(self, request: web.Request) -> web.Response:
        wanted = request.match_info["ticket_id"]
        for ticket in await asyncio.to_thread(load_tickets, self.state_file):
            if ticket.id == wanted:
                return web.json_response(ticket.model_dump(mode="json"))
        return web.json_response({"error": f"no ticket {wanted}"}, status=404)


# ------------------------------------------------------------------------------------------ main


class TicketServiceReady(BaseModel):
    url: str
    pid: int


async def _serve(state: Path, token: str, host: str, port: int, ready_file: Path | None) -> None:
    service = await TicketService(state, token, host=host, port=port).start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stopping.set)
    if ready_file is not None:
        temporary = ready_file.with_name(ready_file.name + ".tmp")
        temporary.write_text(TicketServiceReady(url=service.url, pid=os.getpid()).model_dump_json())
        os.replace(temporary, ready_file)
    print(f"ticket service listening on {service.url}, state in {state}", flush=True)
    try:
        await stopping.wait()
    finally:
        await service.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m belay.local.tickets", description=__doc__)
    parser.add_argument("--state", required=True, type=Path, help="the tickets JSON file")
    parser.add_argument(
        "--token-file",
        required=True,
        type=Path,
        help="a file holding the credential every request must carry",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", type=Path, help="written with {url, pid} once listening")
    options = parser.parse_args(argv)
    try:
        token = options.token_file.read_text().strip()
    except OSError as error:
        parser.exit(2, f"error: cannot read the credential {options.token_file}: {error.strerror}\n")
    if not token:
        parser.exit(2, f"error: the credential file {options.token_file} is empty\n")
    asyncio.run(_serve(options.state, token, options.host, options.port, options.ready_file))


if __name__ == "__main__":
    main()
