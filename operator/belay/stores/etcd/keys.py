"""The etcd store's key layout.

Every key is under `prefix` (default `/belay`); a session id is percent-encoded into one path
segment:

    <prefix>/sessions/<id>/head               {"last_seq": n, "chain": link, "seal": ...}; its
                                              mod_revision guards seq assignment
    <prefix>/sessions/<id>/events/<seq:020d>  the event, as its JSON envelope with its chain link
    <prefix>/sessions/<id>/idem/<key>         {"digest": ..., "first_seq": a, "last_seq": b}
    <prefix>/sessions/<id>/claims/<claim>     {"seq": n}: the first event of the batch that took it
    <prefix>/sessions/<id>/lease              {"number": n, "holder": ...}
    <prefix>/sessions/<id>/renewal            {"number": n, "renewed_at": ...}: the last lease renewal
    <prefix>/sessions/<id>/latest/<type>      {"seq": n}: the newest event of that type
    <prefix>/sessions/<id>/segments/<first:020d>  {"first", "last", "sha256", "size"}: an archived
                                              segment, its events' stored bytes in the artifact store
    <prefix>/index/<id>                       empty; one per session, for list_sessions
    <prefix>/segment-trash/<id>/<sha256>      empty; a deleted session's segment not yet deleted
    <prefix>/facts/record-key                 the fingerprint of the key the records are written
                                              with (`belay.stores.key_guard`), written once

Zero-padded seqs make key order seq order, so a range of seqs is one range request.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import quote


def prefix_range_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (etcd's range_end convention)."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


@dataclass(frozen=True)
class SessionKeys:
    """Every key of one session."""

    session_id: str
    root: bytes
    head: bytes
    lease: bytes
    events_prefix: bytes

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def of(prefix: str, session_id: str) -> SessionKeys:
        # Cached: a hit is one lookup, with no Python call, on the append's path.
        if not session_id:
            raise ValueError("session id must not be empty")
        root = f"{prefix}/sessions/{quote(session_id, safe='')}/".encode()
        return SessionKeys(session_id, root, root + b"head", root + b"lease", root + b"events/")

    def event(self, seq: int) -> bytes:
        # Twenty digits: key order is seq order for every seq a 64-bit counter can hold.
        return b"%s%020d" % (self.events_prefix, seq)

    @property
    def renewal(self) -> bytes:
        return self.root + b"renewal"

    def idem(self, key: str) -> bytes:
        return self.root + b"idem/" + quote(key, safe="").encode()

    def claim(self, claim: str) -> bytes:
        return self.root + b"claims/" + quote(claim, safe="").encode()

    def latest(self, event_type: str) -> bytes:
        return self.root + b"latest/" + event_type.encode()

    @property
    def segments_prefix(self) -> bytes:
        return self.root + b"segments/"

    def segment(self, first_seq: int) -> bytes:
        return b"%s%020d" % (self.segments_prefix, first_seq)


def sessions_prefix(prefix: str) -> bytes:
    """Where every session's keys are."""
    return f"{prefix}/sessions/".encode()


def index_prefix(prefix: str) -> bytes:
    """Where the index of sessions is, one empty key per session."""
    return f"{prefix}/index/".encode()


def index_key(prefix: str, session_id: str) -> bytes:
    return f"{prefix}/index/{quote(session_id, safe='')}".encode()


def record_key_fact(prefix: str) -> bytes:
    return f"{prefix}/facts/record-key".encode()


def trash_prefix(prefix: str, session_id: str) -> bytes:
    """Where a deleted session's segments wait for their blobs to be deleted."""
    return f"{prefix}/segment-trash/{quote(session_id, safe='')}/".encode()
