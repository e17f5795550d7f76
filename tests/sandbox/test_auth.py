from __future__ import annotations

import aiohttp
import pytest

from belay.sandbox.client import SandboxClient, SandboxError, SandboxReplaced, SandboxUnavailable
from belay.sandbox.local import LocalSandbox

ENDPOINTS = [
    ("GET", "/healthz"),
    ("POST", "/v1/tools/list_files"),
    ("GET", "/v1/files/a.txt"),
    ("PUT", "/v1/files/a.txt"),
    ("POST", "/v1/manifest"),
]


async def test_every_endpoint_refuses_requests_without_the_token(sandbox: LocalSandbox) -> None:
    connector = aiohttp.UnixConnector(path=sandbox.endpoint.removeprefix("unix://"))
    async with aiohttp.ClientSession(connector=connector) as session:
        for method, path in ENDPOINTS:
            for authorization in [None, "Bearer wrong", "Basic abc", f"Bearer {sandbox.token}x"]:
                headers = {"Authorization": authorization} if authorization else {}
                async with session.request(
                    method, f"http://sandbox{path}", headers=headers, json={}
                ) as response:
                    assert response.status == 401, (method, path, authorization)
                    assert "token" in (await response.json())["error"]
    assert not list(sandbox.files.iterdir())


async def test_client_with_wrong_token_gets_a_clear_error(sandbox: LocalSandbox) -> None:
    async with SandboxClient(sandbox.endpoint, "not-the-token") as client:
        with pytest.raises(SandboxError, match="401") as caught:
            await client.call("write_file", {"path": "a.txt", "content": "x"})
    assert caught.value.status == 401
    assert not (sandbox.files / "a.txt").exists()


async def test_right_token_is_accepted(sandbox: LocalSandbox) -> None:
    health = await sandbox.client.health()
    assert health.ok
    assert health.profile == "none"
    # Inside its own PID namespace the server is the child of bwrap's first process.
    assert health.pid == 2


async def test_a_client_bound_to_another_instance_is_refused_before_anything_runs(
    sandbox: LocalSandbox,
) -> None:
    health = await sandbox.client.health()
    assert health.instance == sandbox.instance  # the local sandbox's marker is the server's id
    async with SandboxClient(sandbox.endpoint, sandbox.token, instance="a-lost-instance") as client:
        with pytest.raises(SandboxReplaced, match="meant for a-lost-instance") as caught:
            await client.call("write_file", {"path": "a.txt", "content": "x"})
    assert isinstance(caught.value, SandboxUnavailable)
    assert not (sandbox.files / "a.txt").exists()
    # The client bound to the instance that answers goes through.
    assert (await sandbox.client.call("write_file", {"path": "a.txt", "content": "x"}))["ok"]
