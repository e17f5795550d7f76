"""Following records: one session from a seq on, or every session at once.

A watch catches up by reading, then follows an etcd watch from the revision of that read; a cut or
compacted watch, or a seq that does not follow the last one, falls back to re-reading from the
last seq delivered. A watch is cut by the DELETE of an event key (an archive or a deletion) and
tells a deletion, when it re-reads, from the head key's create_revision (gone, or a recreated
head has a new one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import unquote

import grpc
import grpc.aio
from aetcd import rpc

from belay.journal.events import Event
from belay.stores.base import WATCH_CUT, SessionDeleted, StoreUnavailable
from belay.stores.etcd.connection import EtcdConnection
from belay.stores.etcd.keys import SessionKeys, prefix_range_end, sessions_prefix
from belay.stores.etcd.reads import RecordReader, parse_events


class WatchCut(Exception):
    """An etcd watch ended: cancelled, compacted, events deleted, or the stream closed."""


class Watches:
    """The followers of one etcd store's records; each `watch` is a gRPC stream of its own, and
    `watch_sessions` one stream for every session."""

    def __init__(self, connection: EtcdConnection, prefix: str, reader: RecordReader) -> None:
        self.connection = connection
        self.prefix = prefix
        self.reader = reader

    async def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        """Catch up by reading, then follow an etcd watch from the revision of that read. A cut or
        compacted watch, or a seq that does not follow the last one, falls back to re-reading
        from the last seq delivered, so no event is ever skipped or repeated."""
        keys = SessionKeys.of(self.prefix, session_id)
        next_seq = max(from_seq, 1)
        incarnation = 0  # the session's, once seen
        delivered = False
        while True:
            try:
                events, revision, check = await self.reader.read_at(keys, next_seq, None, None)
                # Read after the events: a head recreated (or gone) since the session was first
                # seen means the session was deleted, and these events may belong to its successor.
                current = await self.reader.incarnation(keys)
                if (incarnation and current != incarnation) or (delivered and not current):
                    raise SessionDeleted(f"session {session_id!r} was deleted at seq {next_seq - 1}")
                incarnation = incarnation or current
                for event in events:
                    yield event
                    next_seq = event.seq + 1
                    delivered = True
                check.head_is_current = False  # what the watch brings was appended since
                async for seq, value in self._follow(keys, revision + 1):
                    if seq < next_seq:
                        continue
                    if seq > next_seq:
                        break
                    check.event(seq, value)
                    yield parse_events([value])[0]
                    next_seq += 1
                    delivered = True
            except (grpc.aio.AioRpcError, StoreUnavailable, WatchCut):
                self.connection.forget_token()
                await asyncio.sleep(0.1)

    async def _follow(self, keys: SessionKeys, start_revision: int) -> AsyncIterator[tuple[int, bytes]]:
        """(seq, stored bytes) of each event put from `start_revision` on."""
        await self.connection.authenticated()
        _, watch_stub = self.connection.stubs()
        # `hasleader` makes a member that lost its leader cancel the watch instead of going quiet.
        call = watch_stub.Watch(metadata=(("hasleader", "true"),))
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=keys.events_prefix,
                        range_end=prefix_range_end(keys.events_prefix),
                        start_revision=start_revision,
                    )
                )
            )
            async for response in call:
                if response.canceled or response.compact_revision:
                    raise WatchCut(response.cancel_reason or f"compacted at {response.compact_revision}")
                for change in response.events:
                    if change.type == rpc.Event.PUT:
                        yield int(change.kv.key[-20:]), change.kv.value
                    else:
                        # Archived (`archive`) or the whole session deleted: the re-read after the
                        # cut tells which, from the head's incarnation.
                        raise WatchCut("events were deleted")
            raise WatchCut("watch stream ended")
        finally:
            call.cancel()

    async def watch_sessions(self) -> AsyncIterator[str | None]:
        """One etcd watch on every session's keys (one gRPC stream, however many sessions; a watch
        per session would be a stream each). A cut watch says so (WATCH_CUT) and is opened again
        from the revision after the last one it delivered, and says None once it is back; when
        that revision was compacted away, it starts from now (None too: changes may have been
        missed)."""
        root = sessions_prefix(self.prefix)
        next_revision = 0  # 0: from the current revision, announced with None
        cut = False  # said WATCH_CUT, and not yet None
        while True:
            call = None
            try:
                await self.connection.authenticated()
                _, watch_stub = self.connection.stubs()
                call = watch_stub.Watch(metadata=(("hasleader", "true"),))
                await call.write(
                    rpc.WatchRequest(
                        create_request=rpc.WatchCreateRequest(
                            key=root, range_end=prefix_range_end(root), start_revision=next_revision
                        )
                    )
                )
                async for response in call:
                    if response.compact_revision:
                        next_revision = 0
                        break
                    if response.canceled:
                        raise WatchCut(response.cancel_reason or "watch canceled")
                    if response.created:
                        if next_revision == 0:
                            next_revision = response.header.revision + 1
                            yield None
                        elif cut:
                            yield None  # back: a follower that heard of the cut looks again
                        cut = False
                        continue
                    moved: dict[str, None] = {}
                    for change in response.events:
                        next_revision = max(next_revision, change.kv.mod_revision + 1)
                        session_id, _, rest = change.kv.key[len(root) :].partition(b"/")
                        # An append puts its events; a deletion deletes every key of the session.
                        if change.type != rpc.Event.PUT or rest.startswith(b"events/"):
                            moved[unquote(session_id.decode())] = None
                    for session_id in moved:
                        yield session_id
            except (grpc.aio.AioRpcError, WatchCut):
                self.connection.forget_token()
                if not cut and next_revision != 0:
                    # Once per cut: the store (or the member the watch went through) went away. A
                    # member without a leader cancels the watch (`hasleader`) and takes none again
                    # until it has one, so a store that cannot write is heard of here.
                    cut = True
                    yield WATCH_CUT
                await asyncio.sleep(0.1)
            finally:
                if call is not None:
                    call.cancel()
