"""The one thread that writes for a SQLite store, committing the writes queued meanwhile together
(group commit: one fsync for many appends, each still accepted or refused on its own)."""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from belay.stores.base import StoreError, StoreUnavailable

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# The most queued writes one transaction takes in.
MAX_GROUP_WRITES = 64


@dataclass
class _WriteJob:
    work: Callable[[sqlite3.Connection], Any]
    result: Future[Any]
    wakes: str | None  # the session whose watchers an applied job wakes
    durable: bool  # must survive a machine crash once acknowledged
    # Run with the job's value once its transaction is committed and fsynced, before the value is
    # released (the record's high-water mark, `marks`); an OSError fails the job.
    after_durable_commit: Callable[[Any], None] | None = None


class GroupCommitWriter:
    """The one thread that writes for a store instance, committing queued writes together.

    Why: with synchronous=FULL every commit costs an fsync, which dwarfs the work of an append.
    Writes that queue up while a commit is in flight are applied in one `BEGIN IMMEDIATE`
    transaction, each inside its own SAVEPOINT: a write that is refused (StaleLease,
    IdempotencyConflict, a bad draft) is rolled back alone and the others commit; a database
    failure (busy beyond the timeout, I/O, a full disk, a damaged file) rolls back the whole group
    and every write in it fails with what `failure` makes of it (StoreUnavailable, StoreCorrupt),
    having written nothing. Results are released only after the COMMIT.

    A caller may be cancelled while its write waits (its future is then cancelled too). The
    thread claims each future before running its write (`set_running_or_notify_cancel`): a write
    whose future was cancelled first is skipped, and one already claimed can no longer be
    cancelled, so its result is always deliverable. Setting a result on a cancelled future raises,
    and would end this thread and leave every later write waiting forever.
    """

    def __init__(
        self,
        open_connection: Callable[[], sqlite3.Connection],
        wake: Callable[[str], None],
        synchronous: Synchronous = "FULL",
        max_group: int = MAX_GROUP_WRITES,
        failure: Callable[[sqlite3.Error], StoreError] | None = None,
    ) -> None:
        self._open_connection = open_connection
        self._failure = failure or (lambda error: StoreUnavailable(f"nothing written: {error}"))
        self._wake = wake
        self._max_group = max_group
        # The level durable writes commit with (the connection's own, set when it is opened), and
        # the one a group of only non-durable writes commits with: NORMAL skips the fsync in WAL.
        self._durable_level: Synchronous = synchronous
        self._relaxed_level: Synchronous = "NORMAL" if synchronous in ("FULL", "EXTRA") else synchronous
        self._level: Synchronous = synchronous
        self._queue: queue.SimpleQueue[_WriteJob | None] = queue.SimpleQueue()
        self._conn: sqlite3.Connection | None = None
        self.transactions = 0  # committed groups, for tests and benchmarks
        # A daemon thread, so a store that is never closed cannot keep the process alive; a write
        # cut short at exit is rolled back by SQLite like any crash.
        self._thread = threading.Thread(target=self._run, name="belay-sqlite-write", daemon=True)
        self._thread.start()

    def submit(
        self,
        work: Callable[[sqlite3.Connection], Any],
        wakes: str | None,
        durable: bool = True,
        after_durable_commit: Callable[[Any], None] | None = None,
    ) -> Future[Any]:
        job = _WriteJob(work, Future(), wakes, durable, after_durable_commit)
        self._queue.put(job)
        return job.result

    def queued(self) -> int:
        return self._queue.qsize()

    def stop(self) -> None:
        """Finish every write submitted so far, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            group = [first]
            while len(group) < self._max_group:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                group.append(job)
            self._commit(group)
        if self._conn is not None:
            self._conn.close()

    def _roll_back(self) -> None:
        if self._conn is None or not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is in an unknown state: drop it; the next group opens a fresh one.
            self._conn.close()
            self._conn = None

    @staticmethod
    def _after_durable_commit(job: _WriteJob, outcome: tuple[bool, Any]) -> tuple[bool, Any]:
        applied, value = outcome
        if not applied or job.after_durable_commit is None:
            return outcome
        try:
            job.after_durable_commit(value)
        except OSError as error:
            # Committed, but what would say so outside the file is not: not acknowledged either.
            failure = StoreUnavailable(
                f"the write was committed, but the record's high-water mark could not be written: {error}"
            )
            failure.__cause__ = error
            return False, failure
        return outcome

    def _commit(self, queued: list[_WriteJob]) -> None:
        group = [job for job in queued if job.result.set_running_or_notify_cancel()]
        if not group:
            return
        outcomes: list[tuple[bool, Any]] = []
        try:
            if self._conn is None:
                self._conn = self._open_connection()
                self._level = self._durable_level
            conn = self._conn
            level = self._durable_level if any(job.durable for job in group) else self._relaxed_level
            if level != self._level:
                conn.execute(f"PRAGMA synchronous = {level}")
                self._level = level
            conn.execute("BEGIN IMMEDIATE")
            for job in group:
                conn.execute("SAVEPOINT write_job")
                try:
                    value = job.work(conn)
                except sqlite3.Error:
                    raise  # the transaction itself may be gone: fail the whole group
                except Exception as refusal:
                    conn.execute("ROLLBACK TO write_job")
                    conn.execute("RELEASE write_job")
                    outcomes.append((False, refusal))
                else:
                    conn.execute("RELEASE write_job")
                    outcomes.append((True, value))
            conn.execute("COMMIT")
            self.transactions += 1
        except BaseException as failure:
            self._roll_back()
            for job in group:
                error: BaseException = failure
                if isinstance(failure, sqlite3.Error):
                    error = self._failure(failure)
                    error.__cause__ = failure
                elif isinstance(failure, StoreUnavailable):  # the connection would not open
                    error = StoreUnavailable(f"nothing written: {failure}")
                    error.__cause__ = failure
                job.result.set_exception(error)
            if not isinstance(failure, Exception):
                raise
            return
        if level == self._durable_level:
            outcomes = [
                self._after_durable_commit(job, outcome) for job, outcome in zip(group, outcomes, strict=True)
            ]
        for job, (applied, value) in zip(group, outcomes, strict=True):
            if applied:
                job.result.set_result(value)
                if job.wakes is not None:
                    # Watchers also poll; a failed wake-up must never stop this thread.
                    with contextlib.suppress(Exception):
                        self._wake(job.wakes)
            else:
                job.result.set_exception(value)
