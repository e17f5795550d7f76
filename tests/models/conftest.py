"""A provider stand-in on loopback: an aiohttp server that records each request and answers with
a response body in the provider's real wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass
class RecordedRequest:
    path: str
    headers: Mapping[str, str]  # case-insensitive, as HTTP headers are
    body: dict[str, Any]


@dataclass
class ProviderStandIn:
    url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    # Each entry: (status, JSON body), answered in order.
    replies: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


@pytest.fixture
async def provider() -> AsyncIterator[ProviderStandIn]:
    stand_in = ProviderStandIn()

    async def answer(request: web.Request) -> web.Response:
        stand_in.requests.append(RecordedRequest(request.path, request.headers.copy(), await request.json()))
        status, body = stand_in.replies.pop(0)
        return web.json_response(body, status=status)

    application = web.Application()
    application.router.add_post("/{tail:.*}", answer)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stand_in.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield stand_in
    await runner.cleanup()
