"""The local ticket service bounds what one request carries: a clear 413 for a body above the limit,
a clear 400 for a ticket above the size of a ticket, and nothing created either way. The client
refuses such a ticket itself, as a ValueError: the harness records a failed call, never an unknown
outcome."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from belay.harness.tickets import MAX_TITLE_CHARS, create_ticket
from belay.local.tickets import MAX_REQUEST_BYTES, TicketService, load_tickets

TOKEN = "the-credential-of-this-attempt"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}


async def chunked_body() -> AsyncIterator[bytes]:
    """Sent without a Content-Length: only reading can find out how big it is."""
    for _ in range(MAX_REQUEST_BYTES // 65536 + 2):
        yield b" " * 65536


async def test_a_body_above_the_limit_gets_413_and_creates_nothing(tmp_path: Path) -> None:
    state = tmp_path / "tickets.json"
    async with TicketService(state, TOKEN) as service, aiohttp.ClientSession(headers=AUTHORIZED) as session:
        for body in (b" " * (MAX_REQUEST_BYTES + 1), chunked_body()):
            async with session.post(f"{service.url}/tickets", data=body) as response:
                assert response.status == 413
                assert f"limit of {MAX_REQUEST_BYTES} bytes" in (await response.json())["error"]
    assert load_tickets(state) == []


async def test_a_title_above_the_limit_is_refused_by_the_service_and_by_the_client(tmp_path: Path) -> None:
    state = tmp_path / "tickets.json"
    title = "t" * (MAX_TITLE_CHARS + 1)
    async with TicketService(state, TOKEN) as service, aiohttp.ClientSession(headers=AUTHORIZED) as session:
        async with session.post(f"{service.url}/tickets", json={"title": title}) as response:
            assert response.status == 400
            assert "title" in (await response.json())["error"]
        with pytest.raises(ValueError, match="title"):
            await create_ticket(service.url, title, token=TOKEN)
    assert load_tickets(state) == []
