"""The allowlist proxy's rules, as pure functions (tests/sandbox/test_network.py runs it for real)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.sandbox.egress import Allowlist, EgressProxy, Refused, on_this_host, parse_target


def test_entries_are_names_addresses_or_ignored() -> None:
    rules = Allowlist.parse(["PyPI.org.", "10.1.2.3", "192.0.2.0/24", "::1", "*.example.com", "a b"])
    assert rules.names == {"pypi.org"}
    assert [str(n) for n in rules.networks] == ["10.1.2.3/32", "192.0.2.0/24", "::1/128"]
    assert rules.ignored == ("*.example.com", "a b")
    assert "opens only pypi.org, 10.1.2.3/32, 192.0.2.0/24, ::1/128 (any port)" in rules.describe()


def test_the_metadata_address_is_never_admitted() -> None:
    rules = Allowlist.parse(["169.254.0.0/16", "0.0.0.0/0"])
    assert rules.admits_address(ipaddress.ip_address("169.254.1.1"))
    assert not rules.admits_address(ipaddress.ip_address("169.254.169.254"))


async def test_a_listed_range_does_not_open_the_metadata_address(tmp_path: Path) -> None:
    proxy = EgressProxy(Allowlist.parse(["169.254.0.0/16"]), tmp_path / "p.sock", tmp_path / "log")
    assert await proxy.resolve("169.254.169.254", 80) == []
    assert await proxy.resolve("169.254.1.1", 80) == [ipaddress.ip_address("169.254.1.1")]
    assert await proxy.resolve("10.0.0.1", 80) == []


def test_connect_and_absolute_http_requests_name_their_destination() -> None:
    assert parse_target(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n") == ("pypi.org", 443, None)
    assert parse_target(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")[:2] == ("::1", 8443)
    host, port, first = parse_target(b"GET http://example.com/a?b=c HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert (host, port) == ("example.com", 80)
    assert first == b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\n\r\n"


@pytest.mark.parametrize(
    "head",
    [
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",
        b"CONNECT nohost HTTP/1.1\r\n\r\n",
    ],
)
def test_other_requests_are_refused(head: bytes) -> None:
    with pytest.raises(Refused):
        parse_target(head)


def own_address() -> str | None:
    """The address this host sends from (no packet leaves: a UDP socket only picks its route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


class CountingListener:
    """A listener on every address of this host (IPv4 and IPv6, one port) that counts connections."""

    def __init__(self) -> None:
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached")
        await writer.drain()
        writer.close()


@pytest.fixture
async def everywhere() -> AsyncIterator[tuple[CountingListener, int]]:
    listener = CountingListener()
    dual = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    dual.bind(("::", 0))
    dual.listen()
    dual.setblocking(False)
    server = await asyncio.start_server(listener.handle, sock=dual)
    yield listener, dual.getsockname()[1]
    server.close()
    await server.wait_closed()


LOOPBACK, LINK_LOCAL, OWN = "a loopback address", "a link-local address", "an address of this host"


def this_host_destinations() -> list[tuple[str, tuple[str, ...]]]:
    """(destination, why it may be refused) for every way a sandbox could name the host."""
    destinations: list[tuple[str, tuple[str, ...]]] = [
        ("localhost", (LOOPBACK,)),
        ("127.0.0.1", (LOOPBACK,)),
        ("127.9.8.7", (LOOPBACK,)),
        ("[::1]", (LOOPBACK,)),
        ("[::ffff:127.0.0.1]", (LOOPBACK,)),
        ("0.0.0.0", ("this host (the unspecified address)",)),
        ("169.254.7.7", (LINK_LOCAL,)),
        ("[fe80::1]", (LINK_LOCAL,)),
        # The machine's own name resolves to one of its addresses: loopback, or an interface's.
        (socket.gethostname(), (LOOPBACK, OWN)),
    ]
    address = own_address()
    if address is not None:
        destinations.append((address, (OWN,)))
    return destinations


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
async def test_no_allowlist_entry_opens_this_host_whatever_names_it(
    tmp_path: Path, everywhere: tuple[CountingListener, int], method: str
) -> None:
    """Every entry below would open the destination by name or by range; the address each one
    resolves to is this host, so the proxy refuses it at the connection, after resolution."""
    listener, port = everywhere
    names = ["localhost", socket.gethostname().lower()]
    allowlist = Allowlist.parse([*names, "0.0.0.0/0", "::/0"])
    proxy = await EgressProxy(allowlist, tmp_path / "p.sock", tmp_path / "log").start()
    answers: dict[str, str] = {}
    try:
        for destination, _ in this_host_destinations():
            target = f"{destination}:{port}"
            head = (
                f"CONNECT {target} HTTP/1.1\r\n\r\n"
                if method == "CONNECT"
                else f"GET http://{target}/ HTTP/1.1\r\nHost: {destination}\r\n\r\n"
            )
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "p.sock"))
            writer.write(head.encode())
            answers[destination] = (await asyncio.wait_for(reader.read(), 30)).decode()
            writer.close()
    finally:
        await proxy.stop()
    not_refused = {
        destination: answers[destination].split("\r\n")[0]
        for destination, why in this_host_destinations()
        if not answers[destination].startswith("HTTP/1.1 403 Forbidden")
        or not any(f"is {reason}" in answers[destination] for reason in why)
        or "never connects to the host it runs on" not in answers[destination]
    }
    assert not_refused == {}
    assert listener.connections == 0
    assert proxy.opened == 0 and proxy.refused == len(answers)


def test_what_is_this_host_is_decided_by_address() -> None:
    for text in [
        "127.0.0.1",
        "127.255.0.1",
        "::1",
        "::ffff:127.0.0.2",
        "169.254.169.254",
        "fe80::2",
        "0.0.0.0",
    ]:
        assert on_this_host(ipaddress.ip_address(text)) is not None, text
    address = own_address()
    if address is not None:
        assert on_this_host(ipaddress.ip_address(address)) == OWN
    # Addresses no interface here holds are other machines.
    for text in ["198.51.100.7", "2001:db8::7", "10.231.77.5"]:
        assert on_this_host(ipaddress.ip_address(text)) is None, text
