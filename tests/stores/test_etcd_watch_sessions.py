"""The etcd store's watch of every session when it is cut: it says so once (WATCH_CUT), is opened
again where it stopped and says when it is back (None), and when etcd compacted that history away
meanwhile, it starts from now (None: changes may have been missed)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aetcd import rpc

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import WATCH_CUT
from belay.stores.etcd import EtcdEventStore
from tests.testenv.etcd import EtcdCluster

pytestmark = pytest.mark.testenv

# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 60


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


async def next_item(watch: AsyncIterator[str | None]) -> str | None:
    return await asyncio.wait_for(anext(watch), HANG_GUARD_SECONDS)


async def compact(through: EtcdEventStore) -> None:
    """Compact the whole history up to the current revision, as etcd's auto-compaction would,
    through a store's own channel (and so its credentials)."""
    kv, _ = through._stubs()
    revision = (await kv.Range(rpc.RangeRequest(key=b"\0"))).header.revision
    await kv.Compact(rpc.CompactionRequest(revision=revision, physical=True))


async def test_a_cut_watch_of_every_session_goes_on_or_says_what_it_may_have_missed(
    etcd_cluster: EtcdCluster,
) -> None:
    watched, other = etcd_cluster.member_names[0], etcd_cluster.member_names[1]
    prefix = f"/w{uuid.uuid4().hex[:8]}"
    # The watch goes through one member only, so stopping that member cuts it.
    credentials = etcd_cluster.credentials
    follower = EtcdEventStore(
        [etcd_cluster.endpoint_of(watched)], prefix=prefix, record_key=b"", credentials=credentials
    )
    writer = EtcdEventStore(
        [etcd_cluster.endpoint_of(other)], prefix=prefix, record_key=b"", credentials=credentials
    )
    watch = follower.watch_sessions()
    try:
        assert await next_item(watch) is None
        await writer.append("a", [note("one")])
        assert await next_item(watch) == "a"

        # Cut, with appends meanwhile: it says so, once; opened again it says it is back and
        # delivers them, nothing is missed.
        etcd_cluster.stop_member(watched)
        assert await next_item(watch) == WATCH_CUT
        await writer.append("b", [note("while cut")])
        etcd_cluster.start_member(watched)
        assert await next_item(watch) is None
        assert await next_item(watch) == "b"

        # Cut, with appends and a compaction meanwhile: what it missed is gone, and it says so.
        etcd_cluster.stop_member(watched)
        assert await next_item(watch) == WATCH_CUT
        # Two revisions: the compaction goes past the first revision the watch has not seen.
        await writer.append("c", [note("compacted away")])
        await writer.append("c", [note("compacted away too")])
        await compact(writer)
        etcd_cluster.start_member(watched)
        assert await next_item(watch) is None  # back
        await writer.append("d", [note("after")])
        # Then it finds the history it would go on from compacted and starts from now, saying None
        # again (every session may have moved: "d" is found by looking), or it delivers "d".
        assert await next_item(watch) in (None, "d")
    finally:
        await watch.aclose()  # type: ignore[attr-defined]
        await follower.close()
        await writer.close()
