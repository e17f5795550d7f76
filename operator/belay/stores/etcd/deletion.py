"""Deleting a session: one transaction of two range deletes (`<prefix>/sessions/<id>/` and the
index key), so no reader ever sees part of a session; its segments' blobs are deleted after it."""

from __future__ import annotations

import asyncio
import functools

from aetcd import rpc

from belay.stores.base import StoreError
from belay.stores.etcd.appends import KnownHeads
from belay.stores.etcd.connection import EtcdConnection, prefix_range_op, put_op
from belay.stores.etcd.keys import SessionKeys, index_key, prefix_range_end, trash_prefix
from belay.stores.etcd.limits import MAX_TXN_OPERATIONS
from belay.stores.etcd.segments import ArchivedSegments, index_from


async def delete_session(
    connection: EtcdConnection, prefix: str, segments: ArchivedSegments, heads: KnownHeads, session_id: str
) -> None:
    """One transaction deletes the session from etcd; its segments' blobs go after it. Their
    hashes are first written under `<prefix>/segment-trash/<id>/`, outside the session, so a
    deletion cut short before the blobs are gone finishes them when it is run again."""
    keys = SessionKeys.of(prefix, session_id)
    index = index_key(prefix, session_id)
    trash = trash_prefix(prefix, session_id)
    archived = await segments.index(keys)
    if archived:
        segments.store_for(session_id, archived[0])  # refused before anything is deleted
        for start in range(0, len(archived), MAX_TXN_OPERATIONS):
            marks = [
                put_op(trash + s.sha256.encode(), b"") for s in archived[start : start + MAX_TXN_OPERATIONS]
            ]
            await connection.retrying(functools.partial(connection.txn, [], marks))
    deletes = [
        # Read in the same transaction, before the deletes: segments indexed since the read
        # above (an archiver racing the deletion) are deleted too.
        prefix_range_op(keys.segments_prefix),
        rpc.RequestOp(
            request_delete_range=rpc.DeleteRangeRequest(key=keys.root, range_end=prefix_range_end(keys.root))
        ),
        rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=index)),
    ]
    # Deleting what is already gone deletes nothing, so a retry after a lost answer is safe.
    response = await connection.retrying(lambda: connection.txn([], deletes))
    heads.forget(session_id)
    hashes = {s.sha256 for s in index_from(response.responses[0].response_range.kvs)}
    trashed = await connection.retrying(
        lambda: connection.range(trash, prefix_range_end(trash), keys_only=True)
    )
    hashes.update(kv.key[len(trash) :].decode() for kv in trashed.kvs)
    if not hashes:
        return
    if segments.store is None:
        raise StoreError(
            f"session {session_id!r} was deleted from etcd, and the blobs of its {len(hashes)} "
            "archived segments are left: this etcd store was opened without the artifact store "
            "that holds them (its spec's `segments`); delete the session again with it"
        )
    for sha256 in sorted(hashes):
        await asyncio.to_thread(segments.store.delete, sha256)
        segments.forget(sha256)
    await connection.retrying(
        lambda: connection.txn(
            [],
            [
                rpc.RequestOp(
                    request_delete_range=rpc.DeleteRangeRequest(key=trash, range_end=prefix_range_end(trash))
                )
            ],
        )
    )
