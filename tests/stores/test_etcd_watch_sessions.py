"""The etcd store's watch of every session when it is cut: opened again where it stopped, and when
etcd compacted that history away meanwhile, it says that changes may have been missed (None)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc.aio
import pytest
from aetcd import rpc

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.etcd import EtcdEventStore, grpc_target
from tests.testenv.etcd import EtcdCluster

pytestmark = pytest.mark.testenv

# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 60


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


async def next_item(watch: AsyncIterator[str | None]) -> str | None:
    return await asyncio.wait_for(anext(watch), HANG_GUARD_SECONDS)


async def compact(endpoint: str) -> None:
    """Compact the whole history up to the current revision, as etcd's auto-compaction would."""
    async with grpc.aio.insecure_channel(grpc_target([endpoint])) as channel:
        kv = rpc.KVStub(channel)
        revision = (await kv.Range(rpc.RangeRequest(key=b"\0"))).header.revision
        await kv.Compact(rpc.CompactionRequest(revision=revision, physical=True))


async def test_a_cut_watch_of_every_session_goes_on_or_says_what_it_may_have_missed(
    etcd_cluster: EtcdCluster,
) -> None:
    watched, other = etcd_cluster.member_names[0], etcd_cluster.member_names[1]
    prefix = f"/w{uuid.uuid4().hex[:8]}"
    # The watch goes through one member only, so stopping that member cuts it.
    follower = EtcdEventStore([etcd_cluster.endpoint_of(watched)], prefix=prefix, record_key=b"")
    writer = EtcdEventStore([etcd_cluster.endpoint_of(other)], prefix=prefix, record_key=b"")
    watch = follower.watch_sessions()
    try:
        assert await next_item(watch) is None
        await writer.append("a", [note("one")])
        assert await next_item(watch) == "a"

        # Cut, with appends meanwhile: the watch opened again delivers them, nothing is missed.
        etcd_cluster.stop_member(watched)
        await writer.append("b", [note("while cut")])
        etcd_cluster.start_member(watched)
        assert await next_item(watch) == "b"

        # Cut, with appends and a compaction meanwhile: what it missed is gone, and it says so.
        etcd_cluster.stop_member(watched)
        # Two revisions: the compaction goes past the first revision the watch has not seen.
        await writer.append("c", [note("compacted away")])
        await writer.append("c", [note("compacted away too")])
        await compact(etcd_cluster.endpoint_of(other))
        etcd_cluster.start_member(watched)
        assert await next_item(watch) is None
        await writer.append("d", [note("after")])
        assert await next_item(watch) == "d"
    finally:
        await watch.aclose()  # type: ignore[attr-defined]
        await follower.close()
        await writer.close()
