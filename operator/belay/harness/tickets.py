"""The ticket service as the harness's `create_ticket` tool reaches it: what a ticket is on the
wire, the HTTP client and `TicketClient`, what the tool runtime calls.

`create` is unsafe: the service does not deduplicate, so calling it twice creates two tickets.
`find` lists the tickets carrying a client reference (the operation id); it is the reconcile probe
a resumed harness uses to find out whether a request whose result was lost created one. The
service itself (on loopback for `belay run`) is `belay.local.tickets`; in a cluster the harness pod
reaches any service that answers the same two requests.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# What one ticket may carry: a tracker keeps tickets, not files.
MAX_TITLE_CHARS = 512
MAX_BODY_CHARS = 64 * 1024


class TicketDraft(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    client_ref: str | None = Field(default=None, max_length=512)


class Ticket(TicketDraft):
    id: str
    created_at: datetime


class TicketServiceError(Exception):
    """The ticket service refused a request or could not be reached."""


class TicketRefused(TicketServiceError, ValueError):
    """The service answered that the ticket is not acceptable (a 4xx): nothing was created, so the
    call can fail with this reason instead of leaving an unknown outcome. A ValueError, which the
    harness records as a failed tool result."""


_TICKETS = TypeAdapter(list[Ticket])


async def _request(method: str, url: str, **kwargs: object) -> tuple[int, bytes]:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.request(method, url, **kwargs) as response,  # type: ignore[arg-type]
        ):
            return response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as error:
        raise TicketServiceError(f"ticket service at {url} unreachable: {error!r}") from error


async def create_ticket(url: str, title: str, body: str = "", client_ref: str | None = None) -> Ticket:
    """Create a ticket. Not idempotent: calling it twice creates two tickets."""
    draft = TicketDraft(title=title, body=body, client_ref=client_ref)
    status, content = await _request("POST", f"{url.rstrip('/')}/tickets", json=draft.model_dump())
    if 400 <= status < 500:
        raise TicketRefused(f"ticket service refused the ticket ({status}): {content.decode()[:500]}")
    if status != 201:
        raise TicketServiceError(f"ticket service failed ({status}): {content.decode()[:500]}")
    return Ticket.model_validate_json(content)


async def find_tickets(url: str, client_ref: str) -> list[Ticket]:
    """The reconcile probe: every ticket created with this client reference."""
    status, content = await _request("GET", f"{url.rstrip('/')}/tickets", params={"client_ref": client_ref})
    if status != 200:
        raise TicketServiceError(
            f"ticket service could not list tickets ({status}): {content.decode()[:500]}"
        )
    return _TICKETS.validate_json(content)


class TicketClient(Protocol):
    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]: ...

    async def find(self, client_ref: str) -> list[dict[str, Any]]: ...


class TicketServiceClient:
    """The ticket service at `url`, as the tool runtime calls it."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]:
        ticket = await create_ticket(self.url, title, body, client_ref=client_ref)
        return ticket.model_dump(mode="json")

    async def find(self, client_ref: str) -> list[dict[str, Any]]:
        return [t.model_dump(mode="json") for t in await find_tickets(self.url, client_ref)]
