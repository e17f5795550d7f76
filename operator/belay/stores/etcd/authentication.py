"""etcd's own authentication (user name and password, `credentials`): the pair is exchanged for a
token (`Auth.Authenticate`) and every call carries the token as `token` metadata.

A token can go stale: etcd forgets its simple tokens when a member restarts, and a JWT token
expires. A call refused for its token (UNAUTHENTICATED, "invalid auth token") makes the connection
forget it, and the caller's retry authenticates again: etcd checks the token before it proposes a
request, so a request refused for its token was not applied. A user name and password that etcd
refuses end the call with `AuthenticationRefused`, which names the store and the user, never the
password.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio
from aetcd import rpc

from belay.stores.base import StoreError

AUTHENTICATE_METHOD = "/etcdserverpb.Auth/Authenticate"


class AuthenticationRefused(StoreError):
    """etcd refused the user name and password of the store's credentials."""


class EtcdAuthentication:
    """The token of one connection: obtained on first need, forgotten when etcd says it is stale."""

    def __init__(
        self, endpoints: Sequence[str], username: str, password: str, request_timeout: float
    ) -> None:
        self.endpoints = list(endpoints)
        self.username = username
        self._password = password
        self.request_timeout = request_timeout
        self.token: str | None = None
        self._lock: asyncio.Lock | None = None

    def interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        return [_TokenOnUnaryCalls(self), _TokenOnStreams(self)]

    async def authenticate(self, channel: grpc.aio.Channel) -> None:
        """Obtain a token through `channel` unless one is held; gRPC's error when that fails."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # concurrent calls wait for one authentication
            if self.token is not None:
                return
            request = rpc.AuthenticateRequest(name=self.username, password=self._password)
            response = await rpc.AuthStub(channel).Authenticate(request, timeout=self.request_timeout)
            self.token = response.token

    def refused(self, error: grpc.aio.AioRpcError) -> AuthenticationRefused:
        return AuthenticationRefused(
            f"etcd at {', '.join(self.endpoints)} refused the user {self.username!r} of the store's "
            f"credentials: {error.code().name}: {error.details()}"
        )

    def forget(self, token: str | None) -> None:
        """Forget a token etcd refused (unless another was obtained since)."""
        if token is not None and self.token == token:
            self.token = None

    def metadata(self, details: grpc.aio.ClientCallDetails) -> tuple[grpc.aio.ClientCallDetails, str | None]:
        """The call's details with the token added, and the token (None when none is held yet,
        as for the authentication itself)."""
        token = self.token
        if token is None or details.method == AUTHENTICATE_METHOD:
            return details, None
        metadata = grpc.aio.Metadata(*(details.metadata or ()), ("token", token))
        return details._replace(metadata=metadata), token


def stale_token(error: grpc.aio.AioRpcError) -> bool:
    return error.code() == grpc.StatusCode.UNAUTHENTICATED


class _TokenOnUnaryCalls(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, authentication: EtcdAuthentication) -> None:
        self.authentication = authentication

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        details, token = self.authentication.metadata(client_call_details)
        call = await continuation(details, request)
        try:
            await call
        except grpc.aio.AioRpcError as error:
            if stale_token(error):
                self.authentication.forget(token)
        return call  # whoever awaits it gets its answer or its error


class _TokenOnStreams(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, authentication: EtcdAuthentication) -> None:
        self.authentication = authentication

    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        details, _ = self.authentication.metadata(client_call_details)
        return await continuation(details, request_iterator)
