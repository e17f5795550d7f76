from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest

from belay.harness.tickets import TicketServiceClient, TicketServiceError, create_ticket, find_tickets
from belay.local.tickets import (
    TicketService,
    TicketServiceReady,
    load_tickets,
)
from tests.testenv.polling import wait_until_async

TOKEN = "the-credential-of-this-attempt"


async def test_create_is_not_deduplicated_and_every_ticket_is_in_the_file(tmp_path: Path) -> None:
    state = tmp_path / "sessions" / "demo" / "tickets.json"
    async with TicketService(state, TOKEN) as service:
        first = await create_ticket(
            service.url, "Parser crashes on '='", "details", client_ref="op-1", token=TOKEN
        )
        second = await create_ticket(
            service.url, "Parser crashes on '='", "details", client_ref="op-1", token=TOKEN
        )
        other = await create_ticket(service.url, "Unrelated", client_ref="op-2", token=TOKEN)
    assert (first.id, second.id, other.id) == ("TICKET-1", "TICKET-2", "TICKET-3")
    stored = json.loads(state.read_text())["tickets"]
    assert [t["id"] for t in stored] == ["TICKET-1", "TICKET-2", "TICKET-3"]
    assert [t.client_ref for t in load_tickets(state)] == ["op-1", "op-1", "op-2"]


async def test_find_tickets_is_the_reconcile_probe(tmp_path: Path) -> None:
    async with TicketService(tmp_path / "tickets.json", TOKEN) as service:
        assert await find_tickets(service.url, "op-7", token=TOKEN) == []
        created = await create_ticket(service.url, "Report", "body", client_ref="op-7", token=TOKEN)
        await create_ticket(service.url, "Other", client_ref="op-8", token=TOKEN)
        found = await find_tickets(service.url, "op-7", token=TOKEN)
    assert [(t.id, t.title, t.body) for t in found] == [(created.id, "Report", "body")]


async def test_tickets_survive_a_restart_of_the_service(tmp_path: Path) -> None:
    state = tmp_path / "tickets.json"
    async with TicketService(state, TOKEN) as service:
        await create_ticket(service.url, "Before restart", client_ref="a", token=TOKEN)
    async with TicketService(state, TOKEN) as service:
        after = await create_ticket(service.url, "After restart", client_ref="b", token=TOKEN)
        assert [t.title for t in await find_tickets(service.url, "a", token=TOKEN)] == ["Before restart"]
    assert after.id == "TICKET-2"


async def test_invalid_ticket_is_refused(tmp_path: Path) -> None:
    async with (
        TicketService(tmp_path / "tickets.json", TOKEN) as service,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session,
        session.post(f"{service.url}/tickets", json={"body": "no title", "priority": 1}) as response,
    ):
        assert response.status == 400
        assert "title" in (await response.json())["error"]
    assert load_tickets(tmp_path / "tickets.json") == []


async def test_unreachable_service_is_a_clear_error(tmp_path: Path) -> None:
    async with TicketService(tmp_path / "tickets.json", TOKEN) as service:
        url = service.url
    with pytest.raises(TicketServiceError, match="unreachable"):
        await find_tickets(url, "x", token=TOKEN)


async def test_command_line_service(tmp_path: Path) -> None:
    state = tmp_path / "tickets.json"
    ready_file = tmp_path / "ready.json"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "belay.local.tickets",
        "--state",
        str(state),
        "--token-file",
        str(token_file),
        "--port",
        "0",
        "--ready-file",
        str(ready_file),
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_until_async(
            lambda: ready_file.exists() or process.returncode is not None,
            "the ticket service's ready file",
            timeout=20,
            interval=0.02,
        )
        ready = TicketServiceReady.model_validate_json(ready_file.read_text())
        assert ready.pid == process.pid
        assert ready.url.startswith("http://127.0.0.1:")
        await create_ticket(ready.url, "From the CLI service", client_ref="cli", token=TOKEN)
        with pytest.raises(TicketServiceError, match="401"):
            await create_ticket(ready.url, "Without the credential", client_ref="cli")
        assert [t.title for t in load_tickets(state)] == ["From the CLI service"]
    finally:
        process.terminate()
        assert await process.wait() == 0


async def test_concurrent_creates_each_get_their_own_ticket(tmp_path: Path) -> None:
    state = tmp_path / "tickets.json"
    async with TicketService(state, TOKEN) as service:
        created = await asyncio.gather(
            *(create_ticket(service.url, f"ticket {n}", client_ref=f"op-{n}", token=TOKEN) for n in range(20))
        )
    assert len({ticket.id for ticket in created}) == 20
    assert sorted(t.title for t in load_tickets(state)) == sorted(f"ticket {n}" for n in range(20))


@pytest.mark.parametrize(
    "credential", [None, "", "Bearer wrong", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}"]
)
async def test_every_request_without_the_credential_is_refused_and_changes_nothing(
    tmp_path: Path, credential: str | None
) -> None:
    state = tmp_path / "tickets.json"
    headers = {} if credential is None else {"Authorization": credential}
    async with TicketService(state, TOKEN) as service:
        real = await create_ticket(service.url, "Real", client_ref="op-1", token=TOKEN)
        async with aiohttp.ClientSession(headers=headers) as session:
            for method, path in [("POST", "/tickets"), ("GET", "/tickets"), ("GET", f"/tickets/{real.id}")]:
                body = {"title": "forged", "client_ref": "op-1"}
                async with session.request(method, service.url + path, json=body) as response:
                    assert response.status == 401, (method, path)
                    assert "credential" in (await response.json())["error"]
                    assert "Real" not in await response.text()
    assert [t.title for t in load_tickets(state)] == ["Real"]


async def test_the_probe_finds_every_ticket_naming_an_operation_marked_or_not(tmp_path: Path) -> None:
    async with TicketService(tmp_path / "tickets.json", TOKEN) as service:
        for ref in ["w.s.1", "w.s.1~" + "0" * 64, "w.s.1~anything", "w.s.10~" + "1" * 64, "w.s.1x", None]:
            await create_ticket(service.url, f"ref {ref}", client_ref=ref, token=TOKEN)
        found = await TicketServiceClient(service.url, TOKEN).find("w.s.1")
        prefixed = await find_tickets(service.url, "w.s.1", token=TOKEN, prefix=True)
    assert [t["client_ref"] for t in found] == ["w.s.1", "w.s.1~" + "0" * 64, "w.s.1~anything"]
    assert len(prefixed) == 5  # the service matches the prefix; the client keeps what names the operation
