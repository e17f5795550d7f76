"""The ticket service as the harness's `create_ticket` tool reaches it: what a ticket is on the
wire, the HTTP client and `TicketClient`, what the tool runtime calls.

`create` is unsafe: the service does not deduplicate, so calling it twice creates two tickets.
`find` lists the tickets whose client reference names an operation (its id, alone or with the mark
of `belay.harness.effect_marks`); it is the reconcile probe a resumed harness uses to find out
whether a request whose result was lost created one, and the runtime takes as done only a ticket
with the mark. Every request carries the service's credential as a bearer token. The service
itself (on loopback for `belay run`, with a credential made for each attempt) is
`belay.local.tickets`; in a cluster the harness pod reaches any service that answers the same
requests.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from belay.harness.effect_marks import names_operation
from belay.journal.tool_arguments import MAX_TICKET_BODY_CHARS, MAX_TICKET_TITLE_CHARS

# What one ticket may carry: a tracker keeps tickets, not files.
MAX_TITLE_CHARS = MAX_TICKET_TITLE_CHARS
MAX_BODY_CHARS = MAX_TICKET_BODY_CHARS


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


def credential_header(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _request(method: str, url: str, token: str | None, **kwargs: object) -> tuple[int, bytes]:
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=30), headers=credential_header(token)
            ) as session,
            session.request(method, url, **kwargs) as response,  # type: ignore[arg-type]
        ):
            return response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as error:
        raise TicketServiceError(f"ticket service at {url} unreachable: {error!r}") from error


async def create_ticket(
    url: str, title: str, body: str = "", client_ref: str | None = None, *, token: str | None = None
) -> Ticket:
    """Create a ticket. Not idempotent: calling it twice creates two tickets."""
    draft = TicketDraft(title=title, body=body, client_ref=client_ref)
    status, content = await _request("POST", f"{url.rstrip('/')}/tickets", token, json=draft.model_dump())
    if 400 <= status < 500:
        raise TicketRefused(f"ticket service refused the ticket ({status}): {content.decode()[:500]}")
    if status != 201:
        raise TicketServiceError(f"ticket service failed ({status}): {content.decode()[:500]}")
    return Ticket.model_validate_json(content)


async def find_tickets(
    url: str, client_ref: str, *, token: str | None = None, prefix: bool = False
) -> list[Ticket]:
    """Every ticket created with this client reference; with `prefix`, every ticket whose
    reference begins with it."""
    query = {"client_ref_prefix" if prefix else "client_ref": client_ref}
    status, content = await _request("GET", f"{url.rstrip('/')}/tickets", token, params=query)
    if status != 200:
        raise TicketServiceError(
            f"ticket service could not list tickets ({status}): {content.decode()[:500]}"
        )
    return _TICKETS.validate_json(content)


class TicketClient(Protocol):
    # The credential the client sends, which the harness's redactor holds; None: it sends none.
    token: str | None

    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]: ...

    async def find(self, operation_id: str) -> list[dict[str, Any]]:
        """Every ticket whose reference names the operation, marked or not."""
        ...


class TicketServiceClient:
    """The ticket service at `url` with its credential `token`, as the tool runtime calls it."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.token = token

    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]:
        ticket = await create_ticket(self.url, title, body, client_ref=client_ref, token=self.token)
        return ticket.model_dump(mode="json")

    async def find(self, operation_id: str) -> list[dict[str, Any]]:
        found = await find_tickets(self.url, operation_id, token=self.token, prefix=True)
        return [t.model_dump(mode="json") for t in found if names_operation(t.client_ref, operation_id)]
