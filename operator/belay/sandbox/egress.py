"""Network profile `allowlist` for a local sandbox: a filtering proxy on the harness's side.

The sandbox has a network namespace of its own with only `lo`, so nothing it sends leaves it except
through a Unix socket bound into it: the harness's `EgressProxy`, which opens a connection only to
an allowlisted destination. Inside, the sandbox server forwards `127.0.0.1:3128` to that socket,
and commands find it through `HTTP_PROXY`/`HTTPS_PROXY` (and the lowercase names), so HTTP and HTTPS
clients that honour those variables work; any other connection fails, as with profile `none`.

The proxy speaks HTTP `CONNECT host:port` (HTTPS, or any TCP protocol a client tunnels) and plain
HTTP requests in absolute form (`GET http://host/path`). An allowlist entry is a host name (that
name exactly, any port) or an IP address or range (any port). A name that is not listed is still
opened when it resolves into a listed range. The cloud metadata address is never opened. The
destination is resolved once, on the harness's side, and the connection goes to that address.

Whatever the allowlist says, the proxy never connects to the host it runs on: not to a loopback
address, a link-local one, the unspecified one, or any address of the host's own interfaces. The
harness's own services listen there (the ticket service on loopback, a local store), and the
proxy, unlike the sandbox, can reach them. The check is made on each address right before the
connection to it is opened, after resolution, so no name (`localhost`, one whose record points at
127.0.0.1 or at the host) gets round it. An address is the host's own when a socket can be bound to
it, which is the kernel's own answer, for every interface and alias as they are at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The cloud metadata address hands out node credentials: no sandbox reaches it, whatever its
# allowlist (here, and in the NetworkPolicy the operator writes for a sandbox pod).
METADATA_ADDRESSES = [ipaddress.ip_network("169.254.169.254/32"), ipaddress.ip_network("fd00:ec2::254/128")]

# What profile `internet` means in a cluster: the public internet, and nothing of the IANA
# special-purpose address registries (IPv4: RFC 6890 and its updates; IPv6: likewise), nor
# multicast, nor for IPv6 anything outside global unicast (2000::/3). Among them: the cluster's
# private ranges, carrier-grade NAT (100.64.0.0/10, where some clouds put nodes and pods), all of
# link-local 169.254.0.0/16 (the metadata services), and the IPv4/IPv6 translation prefixes (a
# NAT64 gateway would reach private IPv4 addresses through them). Only the outermost ranges are
# listed; the registry's nested entries (192.0.0.170/32 inside 192.0.0.0/24, ...) fall inside them.
SPECIAL_PURPOSE_IPV4 = tuple(
    ipaddress.IPv4Network(cidr)
    for cidr in (
        "0.0.0.0/8",  # this network
        "10.0.0.0/8",  # private use
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link local, the metadata services
        "172.16.0.0/12",  # private use
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.31.196.0/24",  # AS112-v4
        "192.52.193.0/24",  # AMT
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # private use
        "192.175.48.0/24",  # direct delegation AS112 service
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
    )
)
# IPv6 `internet` is global unicast, less these special-purpose ranges inside it. (Loopback,
# unspecified, IPv4-mapped, 64:ff9b::/96 and 64:ff9b:1::/48 translation, 100::/64 discard,
# 5f00::/16 SRv6, fc00::/7 unique local, fe80::/10 link local and ff00::/8 multicast all lie
# outside 2000::/3.)
GLOBAL_UNICAST_IPV6 = ipaddress.IPv6Network("2000::/3")
SPECIAL_PURPOSE_IPV6 = tuple(
    ipaddress.IPv6Network(cidr)
    for cidr in (
        "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID, AMT, AS112, DETs)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4
        "2620:4f:8000::/48",  # direct delegation AS112 service
        "3fff::/20",  # documentation
    )
)


def wider_than_internet(network: IPNetwork) -> str | None:
    """Why a range reaches more than profile `internet` does (it holds or meets a special-purpose
    range, or lies outside IPv6 global unicast), or None when it stays inside the internet."""
    if isinstance(network, ipaddress.IPv4Network):
        for special in SPECIAL_PURPOSE_IPV4:
            if network.overlaps(special):
                return f"it reaches {special}, a special-purpose range that `internet` never reaches"
        return None
    if not network.subnet_of(GLOBAL_UNICAST_IPV6):
        return f"it reaches outside {GLOBAL_UNICAST_IPV6}, the IPv6 global unicast that `internet` is"
    for special6 in SPECIAL_PURPOSE_IPV6:
        if network.overlaps(special6):
            return f"it reaches {special6}, a special-purpose range that `internet` never reaches"
    return None


MAX_REQUEST_HEAD = 64 * 1024
CONNECT_TIMEOUT_S = 30.0
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class Allowlist:
    names: frozenset[str]
    networks: tuple[IPNetwork, ...]
    ignored: tuple[str, ...]  # entries that are neither a host name nor an address or range

    @classmethod
    def parse(cls, entries: Sequence[str]) -> Allowlist:
        names, networks, ignored = set(), [], []
        for entry in entries:
            text = entry.strip().lower().rstrip(".")
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            if HOST_NAME.match(text):
                names.add(text)
            else:
                ignored.append(entry)
        return cls(frozenset(names), tuple(networks), tuple(ignored))

    def describe(self) -> str:
        opened = sorted(self.names) + [str(network) for network in self.networks]
        text = f"opens only {', '.join(opened)} (any port)" if opened else "opens nothing (empty allowlist)"
        if self.ignored:
            text += f"; ignored entries (neither a host name nor an address): {', '.join(self.ignored)}"
        return text + "; never the metadata address, this host's own, loopback or link-local addresses"

    def admits_address(self, address: IPAddress) -> bool:
        if is_metadata(address):
            return False
        return any(address.version == network.version and address in network for network in self.networks)


def is_metadata(address: IPAddress) -> bool:
    return any(address.version == network.version and address in network for network in METADATA_ADDRESSES)


THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "this host on this network": a connect lands here


def on_this_host(address: IPAddress) -> str | None:
    """Why the proxy must not connect to `address` (it is this host), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified or (address.version == 4 and address in THIS_NETWORK):
        return "this host (the unspecified address)"
    if is_own_address(address):
        return "an address of this host"
    return None


def is_own_address(address: IPAddress) -> bool:
    """Whether the kernel takes `address` as one of this host's: it lets a socket bind to it. (Where
    binding to any address is allowed, `ip_nonlocal_bind`, every address is taken as the host's and
    refused: the check fails closed.)"""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


class Refused(Exception):
    pass


def parse_target(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, bytes to send first) of a request head; None to send means CONNECT."""
    try:
        request_line, _, rest = head.decode("latin-1").partition("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError as error:
        raise Refused("malformed request line") from error
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise Refused(f"CONNECT needs host:port, got {target!r}")
        return host.strip("[]").lower(), int(port), None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refused(f"only CONNECT and http:// requests in absolute form go through, got {target!r}")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    forwarded = f"{method} {path} {version}\r\n{rest}".encode("latin-1")
    return url.hostname.lower(), url.port or 80, forwarded


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


async def join(
    left: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    right: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    try:
        await asyncio.gather(splice(left[0], right[1]), splice(right[0], left[1]))
    finally:
        for writer in (left[1], right[1]):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class EgressProxy:
    """The harness's side of profile `allowlist`: a proxy on a Unix socket, one per sandbox."""

    def __init__(self, allowlist: Allowlist, socket_path: Path, log_path: Path) -> None:
        self.allowlist = allowlist
        self.socket_path = socket_path
        self.log_path = log_path
        self.opened = 0
        self.refused = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> EgressProxy:
        self.socket_path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(
            self.handle, str(self.socket_path), limit=MAX_REQUEST_HEAD
        )
        # Bound into one sandbox only; its uid differs from the harness's when belay runs as root.
        os.chmod(self.socket_path, 0o666)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self.socket_path.unlink(missing_ok=True)

    def log(self, line: str) -> None:
        with self.log_path.open("a") as handle:
            handle.write(line + "\n")

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Addresses of the destination this allowlist opens, empty when it opens none."""
        with contextlib.suppress(ValueError):
            literal = ipaddress.ip_address(host)
            return [literal] if self.allowlist.admits_address(literal) else []
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            raise Refused(f"cannot resolve {host}: {error}") from error
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        if host in self.allowlist.names:
            return [address for address in addresses if not is_metadata(address)]
        return [address for address in addresses if self.allowlist.admits_address(address)]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            host, port, first = parse_target(head)
            addresses = await self.resolve(host, port)
            if not addresses:
                raise Refused(
                    f"{host}:{port} is not in this sandbox's allowlist ({self.allowlist.describe()})"
                )
            upstream = await self.connect(addresses, port)
        except (Refused, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as error:
            self.refused += 1
            self.log(f"refused: {error}")
            message = f"belay egress proxy: {error}\n".encode()
            with contextlib.suppress(Exception):
                writer.write(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
                    + f"Content-Length: {len(message)}\r\nConnection: close\r\n\r\n".encode()
                    + message
                )
                await writer.drain()
            writer.close()
            return
        self.opened += 1
        self.log(f"opened: {host}:{port}")
        if first is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(first)
        await join((reader, writer), upstream)

    @staticmethod
    async def connect(
        addresses: list[IPAddress], port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        failures, refusals = [], []
        for address in addresses:
            # Checked here, on the very address connected to: the host's own services are never a
            # destination, whatever name led to them.
            reason = on_this_host(address)
            if reason is not None:
                refusals.append(f"{address} is {reason}")
                continue
            try:
                return await asyncio.wait_for(asyncio.open_connection(str(address), port), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as error:
                failures.append(f"{address}: {error}")
        if refusals and not failures:
            raise Refused(f"{'; '.join(refusals)}: the proxy never connects to the host it runs on")
        raise OSError(f"cannot connect: {'; '.join(refusals + failures)}")


async def forward_to_proxy(port: int, socket_path: str) -> asyncio.Server:
    """Inside the sandbox: `127.0.0.1:port` forwards every connection to the proxy's socket."""

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await join((reader, writer), upstream)

    return await asyncio.start_server(forward, "127.0.0.1", port)


def proxy_environment(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}"
    local = "localhost,127.0.0.1,::1"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": local,
        "no_proxy": local,
    }
