"""The record's MAC and where its key comes from (`belay.stores.integrity`)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from belay.stores.base import RecordCorrupt, StoreError
from belay.stores.integrity import (
    GENESIS,
    RECORD_KEY_ENV,
    RECORD_KEY_FILE_ENV,
    Chain,
    Head,
    RecordCheck,
    link_of,
    record_key_for,
)
from belay.stores.sqlite import SqliteEventStore


@given(key=st.binary(max_size=200), message=st.binary(max_size=2000))
def test_the_chain_mac_is_hmac_sha256(key: bytes, message: bytes) -> None:
    chain = Chain(key)
    expected = hmac.new(key, message, hashlib.sha256).hexdigest().encode()
    assert chain.mac(message) == expected
    stored, link = chain.stored(GENESIS, message)
    assert link == hmac.new(key, GENESIS + message, hashlib.sha256).hexdigest().encode()
    assert stored == b'{"chain":"' + link + b'",' + message
    assert link_of("s", 1, stored) == link
    assert chain.seal(7, link) == hmac.new(key, b"head:7:" + link, hashlib.sha256).hexdigest().encode()


def test_no_key_is_the_empty_key() -> None:
    assert (
        Chain(None).mac(b"m")
        == Chain(b"").mac(b"m")
        == hmac.new(b"", b"m", hashlib.sha256).hexdigest().encode()
    )


def test_the_key_comes_from_the_spec_then_the_key_file_then_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RECORD_KEY_FILE_ENV, raising=False)
    monkeypatch.delenv(RECORD_KEY_ENV, raising=False)
    assert record_key_for({}) is None
    monkeypatch.setenv(RECORD_KEY_ENV, "v" * 32)
    assert record_key_for({}) == b"v" * 32
    file_key = tmp_path / "env.key"
    file_key.write_bytes(b"f" * 40 + b"\n")
    monkeypatch.setenv(RECORD_KEY_FILE_ENV, str(file_key))
    assert record_key_for({}) == b"f" * 40  # surrounding whitespace is not part of the key
    spec_key = tmp_path / "spec.key"
    spec_key.write_bytes(b"s" * 32)
    assert record_key_for({"record_key_file": str(spec_key)}) == b"s" * 32


def test_a_short_or_unreadable_key_is_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RECORD_KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(RECORD_KEY_ENV, "too short")
    with pytest.raises(StoreError, match=r"fewer than 32.*urandom"):
        record_key_for({})
    monkeypatch.setenv(RECORD_KEY_FILE_ENV, str(tmp_path / "missing.key"))
    with pytest.raises(StoreError, match=f"cannot read the record key .*missing.key.*{RECORD_KEY_FILE_ENV}"):
        SqliteEventStore(tmp_path / "events.db")


@pytest.mark.parametrize(
    "stored",
    [
        b'{"seq":1,"type":"note"}',
        b'{"chain":"' + b"a" * 63 + b'","seq":1}',
        b'{"chain":"' + b"a" * 65 + b'","seq":1}',
    ],
)
def test_an_event_without_a_chain_field_is_refused(stored: bytes) -> None:
    with pytest.raises(RecordCorrupt, match="at seq 4: the stored event has no chain field"):
        link_of("s", 4, stored)


@pytest.mark.parametrize("link", [b"g" * 64, b"A" * 64])
def test_a_link_that_is_not_what_the_chain_makes_is_refused(link: bytes) -> None:
    chain = Chain(None)
    genuine, genuine_link = chain.stored(GENESIS, b'"seq":1}')
    head = Head(1, genuine_link, chain.seal(1, genuine_link))
    RecordCheck(chain, "s", 1, None, head).event(1, genuine)
    with pytest.raises(RecordCorrupt, match="at seq 1: the stored event does not match its link"):
        RecordCheck(chain, "s", 1, None, head).event(1, genuine.replace(genuine_link, link))
