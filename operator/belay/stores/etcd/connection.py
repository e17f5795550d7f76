"""The etcd store's connection: the gRPC channels to the endpoints, deadlines and retries.

The client is aetcd's generated gRPC stubs on our own `grpc.aio` channels. In plaintext one channel
lists every endpoint (round-robin, skipping members that are down); over TLS each endpoint has its
own channel, so each member's certificate is checked against its own name, and calls go round the
connected ones. Every call carries its own deadline, so an unreachable cluster becomes a prompt
StoreUnavailable. With an etcd user's name and password, calls carry its token (`authentication`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.aio
from aetcd import rpc

from belay.stores.base import PayloadTooLarge, StoreError, StoreUnavailable
from belay.stores.etcd.authentication import EtcdAuthentication, stale_token
from belay.stores.etcd.credentials import EtcdCredentials
from belay.stores.etcd.keys import prefix_range_end

T = TypeVar("T")

# Errors after which the request may or may not have reached the cluster: retried, never trusted.
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        # A stale token (`authentication`): forgotten, and the retry authenticates again.
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


def _host_and_port(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"etcd endpoint needs a host and a port: {endpoint!r}")
    return parts.hostname, parts.port


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def grpc_target(endpoints: Sequence[str]) -> str:
    """`http://host:2379` style endpoints as one gRPC target, balanced round-robin:
    - one DNS name stays a DNS target, so a headless Service's every member is used and followed;
    - otherwise every address is listed; DNS names among several endpoints are resolved once, here.
    """
    hosts = [_host_and_port(endpoint) for endpoint in endpoints]
    if not hosts:
        raise ValueError("at least one etcd endpoint is needed")
    if len(hosts) == 1 and _ip(hosts[0][0]) is None:
        return f"dns:///{hosts[0][0]}:{hosts[0][1]}"
    addresses: list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]] = []
    for host, port in hosts:
        literal = _ip(host)
        if literal is not None:
            addresses.append((literal, port))
            continue
        for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            addresses.append((ipaddress.ip_address(sockaddr[0]), port))
    # One gRPC target holds one address family; IPv4 wins when both are present.
    v4 = [f"{ip}:{port}" for ip, port in dict.fromkeys(addresses) if ip.version == 4]
    if v4:
        return "ipv4:" + ",".join(v4)
    return "ipv6:" + ",".join(f"[{ip}]:{port}" for ip, port in dict.fromkeys(addresses))


# The request messages the store builds with the protobuf library (the append's transaction is
# encoded by hand instead, see `wire`).


def put_op(key: bytes, value: bytes) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))


def range_op(key: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def prefix_range_op(prefix: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix)))


def mod_revision_compare(key: bytes, revision: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision)


def absent_compare(key: bytes) -> Any:
    """True while the key has never been created (or was deleted since)."""
    return rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0)


def never_sent(error: grpc.aio.AioRpcError) -> bool:
    """True when gRPC failed the call before it left this process (no member could be connected
    to), or etcd refused its token, which it checks before proposing a request: either way the
    request cannot have been applied."""
    if stale_token(error):
        return True
    details = (error.details() or "").lower()
    return error.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in details or "connections to all backends failing" in details
    )


def describe(error: BaseException | None) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error)


def permanent(error: grpc.aio.AioRpcError) -> StoreError:
    details = error.details() or ""
    if "too large" in details or "too many operations" in details:
        return PayloadTooLarge(f"etcd refused the request: {details}")
    return StoreError(f"etcd refused the request: {error.code().name}: {details}")


class _MemberChannel:
    """One gRPC channel and the stubs on it."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.kv = rpc.KVStub(channel)
        self.watch = rpc.WatchStub(channel)
        # KV.Txn for a request that is already wire bytes (no serializer: bytes go as they are).
        self.encoded_txn = channel.unary_unary(
            "/etcdserverpb.KV/Txn", request_serializer=None, response_deserializer=rpc.TxnResponse.FromString
        )


class EtcdConnection:
    """The channels to an etcd cluster and the calls on them, each one RPC with its own deadline
    (`request_timeout`); reads are retried until `operation_timeout`.

    A channel binds to the running event loop, so the channels are made on first use, not here:
    open one connection per event loop."""

    def __init__(
        self,
        endpoints: Sequence[str],
        request_timeout: float,
        operation_timeout: float,
        credentials: EtcdCredentials | None = None,
    ) -> None:
        self.endpoints = list(endpoints)
        self.credentials = credentials
        self.request_timeout = request_timeout
        self.operation_timeout = operation_timeout
        for endpoint in self.endpoints:
            _host_and_port(endpoint)  # refuse a malformed endpoint now, not on first use
        if not self.endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self.authentication: EtcdAuthentication | None = None
        if credentials is not None and credentials.username is not None and credentials.password is not None:
            self.authentication = EtcdAuthentication(
                self.endpoints, credentials.username, credentials.password, request_timeout
            )
        self._members: list[_MemberChannel] = []
        self._turn = 0  # the member channel the next call tries first (TLS)

    def stubs(self) -> tuple[Any, Any]:
        """The KV and Watch stubs of the member channel the next call goes through (channels are
        opened on first use)."""
        member = self._pick()
        return member.kv, member.watch

    def encoded_txn(self, request: bytes) -> Any:
        """KV.Txn for a request that is already wire bytes (`wire`), with the request deadline:
        the call, sent once awaited or once its task runs."""
        return self._pick().encoded_txn(request, timeout=self.request_timeout)

    async def authenticated(self) -> None:
        """With a user name and password: hold a token before a call (at once when one is held).
        A transient failure is raised as gRPC's error, which callers retry; a refusal as
        `AuthenticationRefused`."""
        if self.authentication is None or self.authentication.token is not None:
            return
        try:
            await self.authentication.authenticate(self._pick().channel)
        except grpc.aio.AioRpcError as error:
            if error.code() in TRANSIENT_CODES:
                raise
            raise self.authentication.refused(error) from None

    def forget_token(self) -> None:
        """After a watch was cut: authenticate again before the next one (a watch refused for a
        stale token is cancelled, not failed with UNAUTHENTICATED)."""
        if self.authentication is not None:
            self.authentication.forget(self.authentication.token)

    def _pick(self) -> _MemberChannel:
        """Plaintext: the one channel, which balances over every address itself. TLS: a channel
        per endpoint, taken in turn among those connected; when none is, the next in turn (a call
        on a channel still connecting waits for it, one that failed to connect fails at once), so
        retries go round every member."""
        if not self._members:
            self._members = self._open()
        if len(self._members) == 1:
            return self._members[0]
        count = len(self._members)
        for step in range(count):
            member = self._members[(self._turn + step) % count]
            if member.channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
                self._turn = (self._turn + step + 1) % count
                return member
        member = self._members[self._turn]
        self._turn = (self._turn + 1) % count
        return member

    def _open(self) -> list[_MemberChannel]:
        options = [
            ("grpc.lb_policy_name", "round_robin"),
            ("grpc.keepalive_time_ms", 5000),
            ("grpc.keepalive_timeout_ms", 2000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ]
        if self.credentials is None:
            return [_MemberChannel(grpc.aio.insecure_channel(grpc_target(self.endpoints), options=options))]
        # One channel per endpoint: gRPC checks a server's certificate against its channel's one
        # name, so a channel listing several members would check each against a name that is none
        # of theirs (and no handshake would pass). Each member's certificate is checked against
        # the CA and the name (or address) its own endpoint gives; the client certificate answers
        # --client-cert-auth.
        tls = grpc.ssl_channel_credentials(
            root_certificates=self.credentials.ca,
            private_key=self.credentials.key,
            certificate_chain=self.credentials.cert,
        )
        interceptors = self.authentication.interceptors() if self.authentication is not None else None
        return [
            _MemberChannel(
                grpc.aio.secure_channel(
                    grpc_target([endpoint]), tls, options=options, interceptors=interceptors
                )
            )
            for endpoint in self.endpoints
        ]

    def unavailable(self, last_error: BaseException | None) -> StoreUnavailable:
        detail = f": {describe(last_error)}" if last_error else ""
        return StoreUnavailable(
            f"etcd at {', '.join(self.endpoints)} did not answer within {self.operation_timeout:g}s"
            f"{detail}; nothing was written by the failed call"
        )

    async def retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent call (a read), retrying transient failures until the operation deadline."""
        deadline = time.monotonic() + self.operation_timeout
        delay = 0.05
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise permanent(error) from error
                last_error = error
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
        raise self.unavailable(last_error)

    async def range(self, key: bytes, range_end: bytes = b"", **options: Any) -> Any:
        await self.authenticated()
        kv, _ = self.stubs()
        request = rpc.RangeRequest(key=key, range_end=range_end, **options)
        return await kv.Range(request, timeout=self.request_timeout)

    async def txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> Any:
        await self.authenticated()
        kv, _ = self.stubs()
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure or [])
        return await kv.Txn(request, timeout=self.request_timeout)

    async def get_json(self, key: bytes) -> tuple[dict[str, Any] | None, int]:
        response = await self.retrying(lambda: self.range(key))
        if not response.kvs:
            return None, 0
        return json.loads(response.kvs[0].value), response.kvs[0].mod_revision

    async def close(self) -> None:
        members, self._members = self._members, []
        for member in members:
            await member.channel.close()
