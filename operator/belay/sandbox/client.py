"""Async client for the sandbox server, over a Unix socket (`unix:///path.sock`) or TCP
(`http://host:port`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp
import yarl
from pydantic import TypeAdapter, ValidationError

from belay.journal.events import DeclaredArtifact
from belay.sandbox.protocol import (
    INSTANCE_HEADER,
    INSTANCE_MISMATCH_STATUS,
    MODE_HEADER,
    REFUSED_STATUS,
    SHA256_HEADER,
    STOPPING_STATUS,
    ErrorBody,
    Health,
    ToolResponse,
)


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


class SandboxReplaced(SandboxUnavailable):
    """Another sandbox instance answers at the address: the one this client was bound to is gone,
    and the request was refused before it ran."""


# Headroom on top of a command's own timeout for the round trip.
CALL_TIMEOUT_MARGIN_S = 30.0
DEFAULT_TIMEOUT_S = 60.0

_MANIFEST = TypeAdapter(list[DeclaredArtifact])


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
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as error:
            raise SandboxUnavailable(f"sandbox at {self.endpoint} unreachable: {error!r}") from error
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
        return status, body

    async def health(self) -> Health:
        _, body = await self._request("GET", "/healthz", timeout_s=10)
        return Health.model_validate_json(body)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one sandbox tool; returns {"ok", "output", "error"}. A tool that ran but failed (a
        missing file, a refused path) is ok=False here, not an exception."""
        timeout = float(arguments.get("timeout_s", 120)) if tool == "run_command" else DEFAULT_TIMEOUT_S
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


def _refusal(body: bytes) -> ErrorBody | None:
    try:
        parsed = ErrorBody.model_validate_json(body)
    except ValidationError:
        return None
    return parsed if parsed.rule else None


def _error_text(body: bytes) -> str:
    try:
        parsed = ToolResponse.model_validate_json(body)
    except ValidationError:
        return body.decode(errors="replace")[:500]
    return parsed.error or body.decode(errors="replace")[:500]
