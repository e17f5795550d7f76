"""The record's integrity: every stored event is a link in a hash chain, checked on every read.

An event is stored as `{"chain":"<link>",` followed by the rest of its envelope (`fields`, see
`belay.journal.events.EnvelopeJson`). Its link is HMAC-SHA256, under the record key, over the
previous event's link and those exact stored bytes; the first event of a session follows
`GENESIS`. The store assigns the links inside the append's transaction and, in the same
transaction, writes the session's head: its last seq, the last link, and a seal (an HMAC over
both). So:

- an edited event no longer matches its link, or its successor no longer follows it;
- a forged (inserted or appended) event would need a link made with the key;
- a removed event leaves a gap in the seqs, or a record shorter than its head says;
- a removed tail with the head moved back to match would need a new seal, made with the key.

Without a record key the same chain is computed with an empty key: it still catches damage and
any change made without recomputing the chain, but whoever can write the store can recompute it.
With a key held where the agents' sandboxes cannot read it, nobody without the key can change the
record unnoticed. What no check inside the store can see is the whole store put back to an older
copy of itself; the SQLite store keeps a high-water mark outside its file for that
(`belay.stores.sqlite.marks`).

The key, at least 32 bytes (surrounding whitespace removed), comes from the first of:
- a store spec's `record_key_file`;
- the file named by `BELAY_RECORD_KEY_FILE` (on one machine: a file outside every sandbox);
- `BELAY_RECORD_KEY`, the key itself (in a cluster: from the record key Secret the chart makes
  by default, `stores.recordKey`, which the operator and the harness pods of sessions on the
  fleet's stores get and no sandbox pod ever does).
Every process that reads or writes a record must hold the key it was written with.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from binascii import hexlify
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from belay.stores.base import RecordCorrupt, StoreError

RECORD_KEY_FILE_ENV = "BELAY_RECORD_KEY_FILE"
RECORD_KEY_ENV = "BELAY_RECORD_KEY"
MIN_KEY_BYTES = 32

GENESIS = b"0" * 64
# What a key's fingerprint is the MAC of (`Chain.fingerprint`): a fixed label, so the fingerprint
# tells keys apart without being anything the chain itself ever MACs.
FINGERPRINT_LABEL = b"belay:record-key-fingerprint:1"
CHAIN_PREFIX = b'{"chain":"'
_LINK_START = len(CHAIN_PREFIX)
_LINK_END = _LINK_START + 64
FIELDS_START = _LINK_END + 2  # after '",'


def _checked_key(key: bytes, where: str) -> bytes:
    # A short key is refused: a record sealed with a guessable key is no better than an unkeyed one.
    key = key.strip()
    if len(key) < MIN_KEY_BYTES:
        raise StoreError(
            f"the record key in {where} is {len(key)} bytes, fewer than {MIN_KEY_BYTES}; make one with "
            "`head -c 32 /dev/urandom | base64`"
        )
    return key


def load_record_key(path: str | Path) -> bytes:
    """The record key kept in a file."""
    try:
        key = Path(path).read_bytes()
    except OSError as error:
        raise StoreError(
            f"cannot read the record key {path}: {error.strerror}; point {RECORD_KEY_FILE_ENV} at the "
            "key the record was written with"
        ) from None
    return _checked_key(key, str(path))


def record_key_for(spec: Mapping[str, Any] | None = None) -> bytes | None:
    """The record key a store opened from `spec` uses (see the module docstring), or None. A spec
    with `record_key` (the key itself; empty: none) takes nothing from the environment: the
    operator opens a session's own store so, with the key from that session's Secret only."""
    if spec is not None and "record_key" in spec:
        given = str(spec["record_key"])
        return _checked_key(given.encode(), "the store's record_key") if given else None
    path = (spec or {}).get("record_key_file") or os.environ.get(RECORD_KEY_FILE_ENV)
    if path:
        return load_record_key(path)
    key = os.environ.get(RECORD_KEY_ENV)
    return _checked_key(key.encode(), RECORD_KEY_ENV) if key else None


@dataclass(frozen=True, slots=True)
class Head:
    """What a session's head record says: the last seq, its link, and the seal over both."""

    last_seq: int
    chain: bytes
    seal: bytes


class Chain:
    """Links and seals under one record key (an empty key when there is none).

    The MAC is HMAC-SHA256 (RFC 2104), computed from the key's inner and outer hash states made
    once here: `hmac.digest` sets up the key on every call, which costs twice as much, and an
    append makes one link per event and one seal, right after the event loop wakes (see
    docs/stores.md on keeping the append's work small). A test checks it against `hmac`."""

    def __init__(self, key: bytes | None) -> None:
        key = key or b""
        block = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of `message` under the key, as 64 hex digits."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return hexlify(outer.digest())

    def fingerprint(self) -> str:
        """Which key this is, to compare with the one a store's records were written with."""
        return self.mac(FINGERPRINT_LABEL).decode()

    def stored(self, previous: bytes, fields: bytes) -> tuple[bytes, bytes]:
        """The stored bytes of an event whose envelope text (after the opening brace) is `fields`,
        following the event whose link is `previous`; and its own link."""
        inner = self._inner.copy()
        inner.update(previous + fields)
        outer = self._outer.copy()
        outer.update(inner.digest())
        link = hexlify(outer.digest())
        return CHAIN_PREFIX + link + b'",' + fields, link

    def seal(self, last_seq: int, link: bytes) -> bytes:
        return self.mac(b"head:%d:%s" % (last_seq, link))


def link_of(session_id: str, seq: int, stored: bytes) -> bytes:
    """The link an event's stored bytes carry, after checking the shape around it. (Whether it is
    64 hex digits needs no check of its own: it is compared with a computed link, or, as the link
    before a range, hashed into the next one.)"""
    if not stored.startswith(CHAIN_PREFIX) or stored[_LINK_END:FIELDS_START] != b'",':
        raise RecordCorrupt(
            session_id,
            seq,
            "the stored event has no chain field (written by a Belay without the hash chain, or "
            "changed since)",
        )
    return stored[_LINK_START:_LINK_END]


class RecordCheck:
    """Checks a contiguous run of one session's stored events, in seq order, against the chain
    and the session's head.

    `previous` is the stored event before `first_seq` (None for seq 1, or when it is missing).
    `head` is the head record, when it was read; `head_is_current` when it was read in the same
    snapshot as the events given to `event`, so none may lie beyond it.
    """

    def __init__(
        self,
        chain: Chain,
        session_id: str,
        first_seq: int,
        previous: bytes | None,
        head: Head | None,
        *,
        head_is_current: bool = True,
    ) -> None:
        self.chain = chain
        self.session_id = session_id
        self.first_seq = max(first_seq, 1)
        self.expected = self.first_seq
        self.head = head
        self.head_is_current = head_is_current
        self.link: bytes | None = GENESIS
        if self.first_seq > 1:
            self.link = None if previous is None else link_of(session_id, self.first_seq - 1, previous)
        self._sealed = False

    def corrupt(self, seq: int, problem: str) -> RecordCorrupt:
        return RecordCorrupt(self.session_id, seq, problem)

    def _check_head(self, head: Head) -> None:
        # Checked where the head is relied on, after the events before it: a record read with the
        # wrong key then fails at its first event, which says more than its head would.
        if not self._sealed:
            if not hmac.compare_digest(self.chain.seal(head.last_seq, head.chain), head.seal):
                raise self.corrupt(
                    head.last_seq,
                    "the session's head record (its last seq and link) does not match its seal: it was "
                    f"changed after it was written (or sealed under another record key: check "
                    f"{RECORD_KEY_FILE_ENV} and {RECORD_KEY_ENV})",
                )
            self._sealed = True

    def event(self, seq: int, stored: bytes) -> None:
        if seq != self.expected:
            raise self.corrupt(
                self.expected, f"the event at seq {self.expected} is missing (the next is {seq})"
            )
        if self.link is None:
            raise self.corrupt(seq - 1, f"the event at seq {seq - 1} is missing")
        if self.head_is_current:
            if self.head is None:
                raise self.corrupt(seq, "the session has events but no head record")
            if seq > self.head.last_seq:
                self._check_head(self.head)
                raise self.corrupt(
                    seq,
                    f"the event is beyond the last one written (the head records seq {self.head.last_seq})",
                )
        link = link_of(self.session_id, seq, stored)
        if not hmac.compare_digest(link, self.chain.mac(self.link + stored[FIELDS_START:])):
            raise self.corrupt(
                seq,
                "the stored event does not match its link in the hash chain: it was changed, inserted "
                "or moved after it was written (or written under another record key than this "
                f"process holds: check {RECORD_KEY_FILE_ENV} and {RECORD_KEY_ENV})",
            )
        if self.head is not None and seq == self.head.last_seq:
            self._check_head(self.head)
            if link != self.head.chain:
                raise self.corrupt(seq, "the last event is not the one the session's head record names")
        self.link = link
        self.expected = seq + 1

    def ran_to(self, to_seq: int | None) -> None:
        """The events given are all there is up to `to_seq` (None: the end), the read was not cut
        short by a limit: the record must reach that seq, or the one its head records if lower."""
        if self.head is None:
            return
        through = self.head.last_seq if to_seq is None else min(to_seq, self.head.last_seq)
        if self.expected <= through:
            self._check_head(self.head)
            raise self.corrupt(
                self.expected,
                f"the events from seq {self.expected} to {through} are missing (the "
                f"session's head records seq {self.head.last_seq})",
            )
