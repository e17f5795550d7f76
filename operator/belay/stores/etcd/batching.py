"""Appends of several sessions sharing one etcd transaction (group commit).

With several writers in one process (the operator, a harness with several subagents), the event
loop's work per RPC, not etcd, bounds the appends per second. So while one append's transaction is
in flight, the appends that come meanwhile wait and go out together, one loop turn after it
returns, as one transaction; a single writer never waits (docs/stores.md, "Appends of several
sessions share a transaction").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from belay.stores.etcd.connection import EtcdConnection
from belay.stores.etcd.limits import MAX_BATCH_BYTES, MAX_TXN_OPERATIONS


@dataclass(slots=True)
class QueuedAppend:
    """An append's transaction waiting to go out with others (see `SharedTransactions.send_queued`).
    `operations`: how many compares, success puts and failure reads it adds to a transaction.
    `outcome`: the transaction's response, where this append's failure reads start in it, and
    whether the transaction held other appends too."""

    session_id: str
    request: bytes
    operations: tuple[int, int, int]
    outcome: asyncio.Future[tuple[Any, int, bool]]


class SharedTransactions:
    """The append transactions of one store: sent at once when none is in flight, queued to go
    out together after it otherwise."""

    def __init__(self, connection: EtcdConnection) -> None:
        self.connection = connection
        # How many append transactions are in flight or about to be sent, and the appends waiting
        # for the next.
        self.in_flight = 0
        self.queued: list[QueuedAppend] = []
        self._senders: set[asyncio.Task[None]] = set()

    def send_alone(self, request: bytes) -> Any:
        """Send one append's transaction now, by itself; `alone_done` once its answer is in."""
        self.in_flight += 1
        return self.connection.encoded_txn(request)

    def queue(self, session_id: str, request: bytes, operations: tuple[int, int, int]) -> QueuedAppend:
        """Another append's transaction is in flight: go out after it, with every append queued
        meanwhile, in one transaction."""
        queued = QueuedAppend(session_id, request, operations, asyncio.get_running_loop().create_future())
        self.queued.append(queued)
        return queued

    def alone_done(self) -> None:
        """A transaction sent by `send_alone` came back (or its caller was cancelled)."""
        if self.queued:
            self.transaction_done()
        else:  # the single writer's case, inline
            self.in_flight -= 1

    def transaction_done(self, shared: bool = False) -> None:
        """An append transaction came back. Appends queued meanwhile go out together, one loop
        turn later: the writers this answer wakes run first, and those that append again at once
        (a writer per session in one process) join the same transaction. After a shared
        transaction that turn is taken even with nothing queued yet: its writers are the ones
        about to append."""
        if self.queued or shared:
            asyncio.get_running_loop().call_soon(self.send_queued)
        else:
            self.in_flight -= 1

    def send_queued(self) -> None:
        """Send the queued appends as one transaction (its slot in `in_flight` is already
        counted). Why: with several writers in one process, the event loop's work per RPC, not
        etcd, bounds the appends per second; one transaction for several appends pays it once.

        Concatenated `TxnRequest` encodings are one `TxnRequest` whose compares, puts and reads
        are those of each in turn (protobuf appends repeated fields), so each append's wire bytes
        go in as they are. The transaction succeeds only if every append's compares hold; when
        one fails, its failure branch reads every append's state and each takes its own slice.
        At most one append per session goes in (etcd refuses a transaction that puts one key
        twice), and the whole stays within etcd's limits on operations and request size."""
        group: list[QueuedAppend] = []
        waiting: list[QueuedAppend] = []
        sessions: set[str] = set()
        compares = puts = reads = size = 0
        for queued in self.queued:
            if queued.outcome.done():  # cancelled while it waited
                continue
            more_compares, more_puts, more_reads = queued.operations
            fits = not group or (
                max(compares + more_compares, puts + more_puts, reads + more_reads) <= MAX_TXN_OPERATIONS
                and size + len(queued.request) <= MAX_BATCH_BYTES
            )
            if queued.session_id in sessions or not fits:
                waiting.append(queued)
                continue
            group.append(queued)
            sessions.add(queued.session_id)
            compares, puts, reads = compares + more_compares, puts + more_puts, reads + more_reads
            size += len(queued.request)
        self.queued = waiting
        if not group:
            self.in_flight -= 1
            return
        task = asyncio.get_running_loop().create_task(self._answer_queued(group))
        self._senders.add(task)  # a task nobody holds may be collected before it is done
        task.add_done_callback(self._senders.discard)

    async def _answer_queued(self, group: list[QueuedAppend]) -> None:
        try:
            request = b"".join(queued.request for queued in group)
            response = await self.connection.encoded_txn(request)
        except Exception as error:  # each append decides what the failure means for it
            for queued in group:
                if not queued.outcome.done():
                    queued.outcome.set_exception(error)
        except BaseException:
            for queued in group:
                queued.outcome.cancel()
            raise
        else:
            failure_from = 0
            for queued in group:
                if not queued.outcome.done():
                    queued.outcome.set_result((response, failure_from, len(group) > 1))
                failure_from += queued.operations[2]
        finally:
            self.transaction_done(len(group) > 1)
