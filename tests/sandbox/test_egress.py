"""The allowlist proxy's rules, as pure functions (tests/sandbox/test_network.py runs it for real)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from belay.sandbox.egress import Allowlist, EgressProxy, Refused, parse_target


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
