"""A pool sandbox (docs/operator.md#the-sandbox-pool): started with the sha256 of a one-time claim
key and no token, it takes no request until a claim with that key gives it the claiming
subagent's token; from then on that token is the only bearer it takes, and it is never claimed
again."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from belay.sandbox.client import NotClaimable, SandboxClient, SandboxError, claim_sandbox
from belay.sandbox.protocol import ReadyFile
from tests.testenv.polling import wait_until_async
from tests.testenv.processes import dies_with_this_process

ENDPOINTS = [
    ("GET", "/healthz"),
    ("POST", "/v1/tools/write_file"),
    ("POST", "/v1/tools/run_command"),
    ("GET", "/v1/files/a.txt"),
    ("PUT", "/v1/files/a.txt"),
    ("POST", "/v1/manifest"),
]


@dataclass
class Server:
    endpoint: str
    workspace: Path
    claim_key: str


async def start_server(tmp_path: Path, credential: list[str]) -> AsyncIterator[tuple[str, Path]]:
    ready_file = tmp_path / "ready.json"
    workspace = tmp_path / "ws"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "belay.sandbox.server",
        *("--workspace", str(workspace), "--port", "0", *credential),
        *("--network-profile", "internet", "--ready-file", str(ready_file)),
        start_new_session=True,
        preexec_fn=dies_with_this_process(),
    )
    try:
        await wait_until_async(
            lambda: ready_file.exists() or process.returncode is not None,
            "the sandbox server's ready file",
            timeout=20,
            interval=0.02,
        )
        yield ReadyFile.model_validate_json(ready_file.read_text()).endpoint, workspace
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


@pytest.fixture
async def pool_sandbox(tmp_path: Path) -> AsyncIterator[Server]:
    key = secrets.token_urlsafe(32)
    digest = hashlib.sha256(key.encode()).hexdigest()
    async for endpoint, workspace in start_server(tmp_path, ["--claim-key-sha256", digest]):
        yield Server(endpoint, workspace, key)


async def statuses(endpoint: str, authorization: str | None) -> dict[tuple[str, str], int]:
    headers = {"Authorization": authorization} if authorization else {}
    found = {}
    async with aiohttp.ClientSession() as session:
        for method, path in ENDPOINTS:
            body = {"path": "a.txt", "content": "x", "command": "touch ran", "paths": []}
            async with session.request(method, f"{endpoint}{path}", headers=headers, json=body) as response:
                found[(method, path)] = response.status
    return found


async def test_before_its_claim_a_pool_sandbox_takes_no_request_whatever_the_bearer(
    pool_sandbox: Server,
) -> None:
    # "Bearer None": what a server comparing against a missing token would take.
    for bearer in [None, "Bearer None", "Bearer ", f"Bearer {pool_sandbox.claim_key}", "Bearer x" * 3]:
        refused = await statuses(pool_sandbox.endpoint, bearer)
        assert set(refused.values()) == {401}, (bearer, refused)
    assert not pool_sandbox.workspace.exists() or not list(pool_sandbox.workspace.iterdir())


async def test_a_claim_with_another_key_is_refused_and_leaves_the_sandbox_unclaimed(
    pool_sandbox: Server,
) -> None:
    token = secrets.token_urlsafe(32)
    for wrong in ["", secrets.token_urlsafe(32), pool_sandbox.claim_key + "x"]:
        with pytest.raises(SandboxError) as refused:
            await claim_sandbox(pool_sandbox.endpoint, wrong, token)
        assert refused.value.status == 401, wrong
    # Nobody's token was set: the token offered with a wrong key opens nothing.
    assert set((await statuses(pool_sandbox.endpoint, f"Bearer {token}")).values()) == {401}
    health = await claim_sandbox(pool_sandbox.endpoint, pool_sandbox.claim_key, token)
    async with SandboxClient(pool_sandbox.endpoint, token, instance=health.instance) as client:
        assert (await client.call("write_file", {"path": "a.txt", "content": "x"}))["ok"]


async def test_once_claimed_only_the_subagents_token_is_taken_and_no_second_claim_succeeds(
    pool_sandbox: Server,
) -> None:
    token, other = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    health = await claim_sandbox(pool_sandbox.endpoint, pool_sandbox.claim_key, token)
    # The same claim again (its answer lost on the way) is answered alike.
    again = await claim_sandbox(pool_sandbox.endpoint, pool_sandbox.claim_key, token)
    assert again.instance == health.instance
    # Another token with the same key: refused, and the first claim stands.
    with pytest.raises(SandboxError) as refused:
        await claim_sandbox(pool_sandbox.endpoint, pool_sandbox.claim_key, other)
    assert refused.value.status == 409 and "claimed already" in str(refused.value)
    for bearer in [f"Bearer {other}", f"Bearer {pool_sandbox.claim_key}", "Bearer None"]:
        assert set((await statuses(pool_sandbox.endpoint, bearer)).values()) == {401}, bearer
    async with SandboxClient(pool_sandbox.endpoint, token, instance=health.instance) as client:
        ran = await client.call("run_command", {"command": "echo $BELAY_WORKSPACE > where"})
        assert ran["ok"] and ran["output"]["exit_code"] == 0
    assert (pool_sandbox.workspace / "where").exists()


async def test_a_sandbox_with_a_token_of_its_own_is_not_claimable(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token = secrets.token_urlsafe(32)
    token_file.write_text(token)
    async for endpoint, _ in start_server(tmp_path, ["--token-file", str(token_file)]):
        with pytest.raises(NotClaimable):
            await claim_sandbox(endpoint, "any-key", secrets.token_urlsafe(32))
        async with SandboxClient(endpoint, token) as client:
            assert (await client.health()).ok
