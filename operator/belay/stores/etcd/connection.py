"""The etcd store's connection: one gRPC channel to every endpoint, deadlines and retries.

The client is aetcd's generated gRPC stubs on our own `grpc.aio` channel: one channel can list
several endpoints (round-robin, skipping members that are down), and every call carries its own
deadline so an unreachable cluster becomes a prompt StoreUnavailable.
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


def never_sent(error: grpc.aio.AioRpcError) -> bool:
    """True when gRPC failed the call before it left this process: no member could be connected
    to, so the request cannot have been applied."""
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


class EtcdConnection:
    """The channel to an etcd cluster and the calls on it, each one RPC with its own deadline
    (`request_timeout`); reads are retried until `operation_timeout`.

    The channel binds to the running event loop, so it is made on first use, not here: open one
    connection per event loop."""

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
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._watch: Any = None
        # KV.Txn for a request that is already wire bytes; None until the channel is open.
        self.encoded_txn: Any = None

    def stubs(self) -> tuple[Any, Any]:
        """The KV and Watch stubs, on a channel opened on first use."""
        if self._channel is None:
            options = [
                ("grpc.lb_policy_name", "round_robin"),
                ("grpc.keepalive_time_ms", 5000),
                ("grpc.keepalive_timeout_ms", 2000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ]
            target = grpc_target(self.endpoints)
            if self.credentials is None:
                self._channel = grpc.aio.insecure_channel(target, options=options)
            else:
                # Every member's serving certificate is checked against the CA and the name (or
                # address) the endpoint gives; the client certificate answers --client-cert-auth.
                tls = grpc.ssl_channel_credentials(
                    root_certificates=self.credentials.ca,
                    private_key=self.credentials.key,
                    certificate_chain=self.credentials.cert,
                )
                self._channel = grpc.aio.secure_channel(target, tls, options=options)
            self._kv = rpc.KVStub(self._channel)
            self._watch = rpc.WatchStub(self._channel)
            # KV.Txn for a request that is already wire bytes (no serializer: bytes go as they are).
            self.encoded_txn = self._channel.unary_unary(
                "/etcdserverpb.KV/Txn",
                request_serializer=None,
                response_deserializer=rpc.TxnResponse.FromString,
            )
        return self._kv, self._watch

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
        kv, _ = self.stubs()
        request = rpc.RangeRequest(key=key, range_end=range_end, **options)
        return await kv.Range(request, timeout=self.request_timeout)

    async def txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> Any:
        kv, _ = self.stubs()
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure or [])
        return await kv.Txn(request, timeout=self.request_timeout)

    async def get_json(self, key: bytes) -> tuple[dict[str, Any] | None, int]:
        response = await self.retrying(lambda: self.range(key))
        if not response.kvs:
            return None, 0
        return json.loads(response.kvs[0].value), response.kvs[0].mod_revision

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
