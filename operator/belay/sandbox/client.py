"""Async client for the sandbox server, over a Unix socket (`unix:///path.sock`) or TCP
(`http://host:port`)."""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar, cast
from urllib.parse import quote

import aiohttp
import yarl
from pydantic import TypeAdapter, ValidationError

from belay.journal.events import DeclaredArtifact
from belay.journal.tool_arguments import MAX_COMMAND_TIMEOUT_S
from belay.sandbox.protocol import (
    CLAIM_PATH,
    INSTANCE_HEADER,
    INSTANCE_MISMATCH_STATUS,
    MODE_HEADER,
    NOT_CLAIMABLE_RULE,
    REFUSED_STATUS,
    SHA256_HEADER,
    STOPPING_STATUS,
    ErrorBody,
    Health,
    ToolResponse,
)
from belay.views.escaping import one_line


class SandboxError(Exception):
    """The sandbox answered, but refused the request (bad path, bad hash, missing file, bad token)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WorkspaceRefused(SandboxError):
    """The sandbox refused the workspace's content: the file at `path` breaks `rule`
    (belay.sandbox.workspace.REFUSAL_RULES). Content is the agent's doing: the harness answers this
    with a failed step the agent can put right, never by stopping."""

    def __init__(self, message: str, status: int, path: str, rule: str) -> None:
        super().__init__(message, status)
        self.path = path
        self.rule = rule


class SandboxUnavailable(SandboxError):
    """The sandbox could not be reached, or the connection broke before it answered."""


class SandboxNotAnswering(SandboxUnavailable):
    """The sandbox took the request and gave no answer within its time: its server is stopped
    (SIGSTOP) or hung, not gone."""


class SandboxReplaced(SandboxUnavailable):
    """Another sandbox instance answers at the address: the one this client was bound to is gone,
    and the request was refused before it ran."""


class NotClaimable(SandboxError):
    """The sandbox at the address has a token of its own from its start: it was never a pool
    sandbox (a replacement the operator started cold), so there is nothing to claim."""


# Headroom on top of a command's own timeout for the round trip.
CALL_TIMEOUT_MARGIN_S = 30.0
DEFAULT_TIMEOUT_S = 60.0

# How much of a download is asked for (and held) at once.
DOWNLOAD_CHUNK_BYTES = 1024 * 1024
# A download may stall this long between two pieces; it has no bound as a whole.
DOWNLOAD_READ_TIMEOUT_S = 300.0

_MANIFEST = TypeAdapter(list[DeclaredArtifact])
T = TypeVar("T")


class SandboxClient:
    """`instance`: the sandbox instance this client is bound to (from its health). When set, every
    request names it, and a request reaching another instance raises SandboxReplaced."""

    def __init__(self, endpoint: str, token: str, instance: str | None = None) -> None:
        self.endpoint = endpoint
        self.instance = instance
        self._token = token
        self._session: aiohttp.ClientSession | None = None
        if endpoint.startswith("unix://"):
            self._socket_path: str | None = endpoint.removeprefix("unix://")
            self._base_url = "http://sandbox"
        elif endpoint.startswith(("http://", "https://")):
            self._socket_path = None
            self._base_url = endpoint.rstrip("/")
        else:
            raise ValueError(f"sandbox endpoint must be unix:///path or http://host:port, got {endpoint!r}")

    @property
    def token(self) -> str:
        """The bearer token (for the redactor to hold: never written anywhere)."""
        return self._token

    def __repr__(self) -> str:
        return f"SandboxClient({self.endpoint!r})"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = (
                aiohttp.UnixConnector(path=self._socket_path) if self._socket_path else aiohttp.TCPConnector()
            )
            headers = {"Authorization": f"Bearer {self._token}"}
            if self.instance is not None:
                headers[INSTANCE_HEADER] = self.instance
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> tuple[int, bytes]:
        # `path` arrives percent-encoded; keep it so, or `..` segments would be collapsed on the way.
        url = yarl.URL(f"{self._base_url}{path}", encoded=True)
        try:
            async with self._client().request(
                method,
                url,
                json=json_body,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                body = await response.read()
                status = response.status
        except TimeoutError as error:
            raise SandboxNotAnswering(
                f"sandbox at {self.endpoint} did not answer within {timeout_s:g}s "
                "(its server stopped or hung)"
            ) from error
        except (aiohttp.ClientConnectionError, OSError) as error:
            raise SandboxUnavailable(f"sandbox at {self.endpoint} unreachable: {error!r}") from error
        self._raise_for(method, path, status, body)
        return status, body

    def _raise_for(self, method: str, path: str, status: int, body: bytes) -> None:
        """An answer that is not a success, as the error it means."""
        if status == INSTANCE_MISMATCH_STATUS and self.instance is not None:
            raise SandboxReplaced(f"sandbox at {self.endpoint}: {_error_text(body)}", status)
        if status == STOPPING_STATUS:
            raise SandboxUnavailable(f"sandbox at {self.endpoint}: {_error_text(body)}", status)
        if status == REFUSED_STATUS:
            refusal = _refusal(body)
            if refusal is not None:
                raise WorkspaceRefused(refusal.error, status, refusal.path or "", refusal.rule or "")
        if status >= 400:
            raise SandboxError(f"sandbox {method} {path} -> {status}: {_error_text(body)}", status)

    async def health(self) -> Health:
        _, body = await self._request("GET", "/healthz", timeout_s=10)
        return Health.model_validate_json(body)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one sandbox tool; returns {"ok", "output", "error"}. A tool that ran but failed (a
        missing file, a refused path) is ok=False here, not an exception."""
        timeout = DEFAULT_TIMEOUT_S
        if tool in ("run_command", "mcp_list", "mcp_call"):
            # Whatever the value, the sandbox's validation answers it; only its wait is decided here.
            asked = arguments.get("timeout_s", 120 if tool == "run_command" else 60)
            whole = isinstance(asked, int) and not isinstance(asked, bool)
            timeout = float(asked) if whole and 1 <= asked <= MAX_COMMAND_TIMEOUT_S else DEFAULT_TIMEOUT_S
        _, body = await self._request(
            "POST",
            f"/v1/tools/{quote(tool, safe='')}",
            json_body=arguments,
            timeout_s=timeout + CALL_TIMEOUT_MARGIN_S,
        )
        try:
            return ToolResponse.model_validate_json(body).model_dump()
        except ValidationError as error:
            raise SandboxError(f"sandbox returned a malformed tool response: {error}") from error

    async def put_file(
        self, path: str, data: bytes, sha256: str, mode: int | None = None
    ) -> DeclaredArtifact:
        headers = {SHA256_HEADER: sha256, "Content-Type": "application/octet-stream"}
        if mode is not None:
            headers[MODE_HEADER] = format(mode, "o")
        _, body = await self._request(
            "PUT", f"/v1/files/{quote(path, safe='')}", data=data, headers=headers, timeout_s=300
        )
        return DeclaredArtifact.model_validate_json(body)

    async def get_file(self, path: str) -> bytes:
        _, body = await self._request("GET", f"/v1/files/{quote(path, safe='')}", timeout_s=300)
        return body

    async def download(self, path: str, consume: Callable[[BinaryIO], T], max_bytes: int) -> T:
        """Stream a workspace file to `consume` (run in a thread, given a file to read to its end,
        e.g. an artifact store's `put`) in pieces, never holding it whole; its result once the
        bytes are checked against the sandbox's sha256. A file above `max_bytes`, or one that
        changed while it was sent, is a SandboxError."""
        url = yarl.URL(f"{self._base_url}/v1/files/{quote(path, safe='')}", encoded=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=DOWNLOAD_READ_TIMEOUT_S)
        try:
            response = await self._client().get(url, timeout=timeout)
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as error:
            raise SandboxUnavailable(f"sandbox at {self.endpoint} unreachable: {error!r}") from error
        async with response:
            if response.status >= 400:
                self._raise_for("GET", f"/v1/files/{path}", response.status, await response.read())
            size = response.content_length or 0
            if size > max_bytes:
                raise SandboxError(
                    f"{path!r} is {size} bytes, above the largest file taken out of a workspace "
                    f"({max_bytes} bytes)"
                )
            received = _Received(self._piece_reader(response, asyncio.get_running_loop()), size)
            result = await asyncio.to_thread(consume, cast("BinaryIO", received))
        expected = response.headers.get(SHA256_HEADER, "")
        if received.size != size or received.hash.hexdigest() != expected:
            raise SandboxError(f"{path!r} changed while it was read; read it again")
        return result

    def _piece_reader(
        self, response: aiohttp.ClientResponse, loop: asyncio.AbstractEventLoop
    ) -> Callable[[], bytes]:
        """The next piece of the body (b"" at its end), for a thread to call: read on the loop."""

        async def piece() -> bytes:
            try:
                return await response.content.read(DOWNLOAD_CHUNK_BYTES)
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                raise SandboxUnavailable(
                    f"sandbox at {self.endpoint}: the download broke: {error!r}"
                ) from error

        return lambda: asyncio.run_coroutine_threadsafe(piece(), loop).result()

    async def manifest(self, paths: list[str]) -> list[DeclaredArtifact]:
        _, body = await self._request("POST", "/v1/manifest", json_body={"paths": paths}, timeout_s=120)
        return _MANIFEST.validate_json(body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _Received(io.RawIOBase):
    """A download as a file read front to back in a thread, hashed and counted as it passes, and
    never past the size the sandbox declared."""

    def __init__(self, next_piece: Callable[[], bytes], declared: int) -> None:
        self._next_piece = next_piece
        self._declared = declared
        self._buffer = b""
        self._ended = False
        self.hash = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def _fill(self, wanted: int) -> None:
        while not self._ended and (wanted < 0 or len(self._buffer) < wanted):
            piece = self._next_piece()
            if not piece or self.size + len(piece) > self._declared:
                self._ended = True
                piece = piece[: self._declared - self.size]
            self.hash.update(piece)
            self.size += len(piece)
            self._buffer += piece

    def read(self, size: int | None = -1) -> bytes:
        wanted = -1 if size is None else size
        self._fill(wanted)
        if wanted < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:wanted], self._buffer[wanted:]
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


async def claim_sandbox(endpoint: str, claim_key: str, token: str) -> Health:
    """Claim the pool sandbox at `endpoint` with its one-time key, giving it `token`, the only
    bearer it takes from then on; its health once claimed. NotClaimable when the sandbox there
    has a token of its own (nothing to claim); SandboxError 401 for a key that is not its own."""
    async with SandboxClient(endpoint, claim_key) as claimer:
        url = yarl.URL(f"{claimer._base_url}{CLAIM_PATH}", encoded=True)
        try:
            async with claimer._client().post(
                url, json={"token": token}, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                body, status = await response.read(), response.status
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as error:
            raise SandboxUnavailable(f"sandbox at {endpoint} unreachable: {error!r}") from error
    refusal = _refusal(body) if status == 409 else None
    if refusal is not None and refusal.rule == NOT_CLAIMABLE_RULE:
        raise NotClaimable(f"sandbox at {endpoint}: {refusal.error}", status)
    claimer._raise_for("POST", CLAIM_PATH, status, body)
    return Health.model_validate_json(body)


def _refusal(body: bytes) -> ErrorBody | None:
    try:
        parsed = ErrorBody.model_validate_json(body)
    except ValidationError:
        return None
    return parsed if parsed.rule else None


def _error_text(body: bytes) -> str:
    """What an error answer says, as one line (aiohttp's own 500 page spans several)."""
    try:
        parsed = ToolResponse.model_validate_json(body)
    except ValidationError:
        return one_line(body.decode(errors="replace")[:500])
    return one_line(parsed.error or body.decode(errors="replace")[:500])
