"""The fencing lease of a session and the renewals that say its holder is alive.

The lease is a number in `<root>lease`, advanced by a transaction that compares the key's
mod_revision with the one just read; an append compares the same mod_revision in its own
transaction (`belay.stores.etcd.appends`), never etcd's lock API. A renewal overwrites
`<root>renewal` only while the lease is the one it read, so it never lands after a newer attempt
took the session.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Any

import grpc
import grpc.aio

from belay.journal.events import canonical_json, now_utc
from belay.stores.base import Lease, LeaseRenewal, StaleLease
from belay.stores.etcd.appends import KnownHeads
from belay.stores.etcd.connection import (
    TRANSIENT_CODES,
    EtcdConnection,
    mod_revision_compare,
    permanent,
    put_op,
)
from belay.stores.etcd.keys import SessionKeys


class Leases:
    """The leases of one etcd store's sessions. Taking a lease makes the head `heads` remembers
    for the session stale: the next append reads the lease afresh."""

    def __init__(self, connection: EtcdConnection, prefix: str, heads: KnownHeads) -> None:
        self.connection = connection
        self.prefix = prefix
        self.heads = heads

    async def acquire(self, session_id: str, holder: str) -> Lease:
        keys = SessionKeys.of(self.prefix, session_id)
        deadline = time.monotonic() + self.connection.operation_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                current, mod_revision = await self._lease_record(keys)
                number = (current["number"] if current else 0) + 1
                # A lost answer followed by a retry may advance the number twice; that only makes
                # one more number stale, which is what a new holder wants anyway.
                written = await self.connection.txn(
                    [mod_revision_compare(keys.lease, mod_revision)],
                    [put_op(keys.lease, canonical_json({"number": number, "holder": holder}))],
                )
                if written.succeeded:
                    self.heads.forget(session_id)
                    return Lease(session_id=session_id, number=number, holder=holder)
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise permanent(error) from error
                last_error = error
                await asyncio.sleep(0.05)
        raise self.connection.unavailable(last_error)

    async def _lease_record(self, keys: SessionKeys) -> tuple[dict[str, Any] | None, int]:
        """The lease key's record and mod_revision, one RPC (no retry: the caller's loop retries)."""
        response = await self.connection.range(keys.lease)
        if not response.kvs:
            return None, 0
        return json.loads(response.kvs[0].value), response.kvs[0].mod_revision

    async def current(self, session_id: str) -> Lease | None:
        record, _ = await self.connection.get_json(SessionKeys.of(self.prefix, session_id).lease)
        if record is None:
            return None
        return Lease(session_id=session_id, number=record["number"], holder=record["holder"])

    async def renew(self, session_id: str, lease: int) -> LeaseRenewal:
        keys = SessionKeys.of(self.prefix, session_id)
        deadline = time.monotonic() + self.connection.operation_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                current, mod_revision = await self._lease_record(keys)
                if current is None or current["number"] != lease:
                    held = current["number"] if current else 0
                    raise StaleLease(
                        f"renewal of lease {lease} of session {session_id!r}; the current lease is {held}"
                    )
                renewal = LeaseRenewal(session_id=session_id, number=lease, renewed_at=now_utc())
                record = {"number": lease, "renewed_at": renewal.renewed_at.isoformat()}
                # Written only while the lease is the one just read: a renewal never lands after
                # a newer attempt took the session.
                written = await self.connection.txn(
                    [mod_revision_compare(keys.lease, mod_revision)],
                    [put_op(keys.renewal, canonical_json(record))],
                )
                if written.succeeded:
                    return renewal
                continue  # the lease moved since it was read: read it again
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT_CODES:
                    raise permanent(error) from error
                last_error = error
                await asyncio.sleep(0.05)
        raise self.connection.unavailable(last_error)

    async def last_renewal(self, session_id: str) -> LeaseRenewal | None:
        record, _ = await self.connection.get_json(SessionKeys.of(self.prefix, session_id).renewal)
        if record is None:
            return None
        return LeaseRenewal(
            session_id=session_id,
            number=record["number"],
            renewed_at=datetime.fromisoformat(record["renewed_at"]),
        )
