"""What wakes a session's worker, and what it does then (pure, no cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from belay.controller.follow import (
    RecordWatches,
    Step,
    WorkerWake,
    changed_beyond_status,
    pod_view,
    wait_for_next_step,
    worker_step,
)
from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import WATCH_CUT, StoreUnavailable
from belay.stores.sqlite import SqliteEventStore

# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 30


def step(**changes: object) -> Step:
    timers: dict[str, object] = {
        "pass_asked": False,
        "check_asked": False,
        "since_pass": 10.0,
        "since_check": 10.0,
        "resync_s": 3600.0,
        "follow_s": 300.0,
    }
    return worker_step(**{**timers, **changes})  # type: ignore[arg-type]


def test_a_worker_nothing_woke_waits_and_reads_nothing() -> None:
    assert step() is Step.WAIT


def test_a_wake_from_the_cluster_or_the_record_is_a_pass() -> None:
    assert step(pass_asked=True) is Step.PASS
    assert step(pass_asked=True, check_asked=True) is Step.PASS


def test_a_record_that_moved_or_may_have_asks_for_a_check_not_a_pass() -> None:
    assert step(check_asked=True) is Step.CHECK


def test_the_safety_nets_are_slow_timers() -> None:
    assert step(since_check=300.0) is Step.CHECK
    assert step(since_pass=3600.0, since_check=0.0) is Step.PASS
    assert wait_for_next_step(since_pass=100.0, since_check=250.0, resync_s=3600.0, follow_s=300.0) == 50.0


async def test_the_watch_wakes_the_workers_of_the_record_that_moved_and_no_other(tmp_path: Path) -> None:
    store, other_store = SqliteEventStore(tmp_path / "a.db"), SqliteEventStore(tmp_path / "b.db")
    watches = RecordWatches()
    wakes = {name: WorkerWake() for name in ("ns/a", "other-ns/a", "ns/b", "ns/c")}
    try:
        watches.follow(store, "a", "ns/a", wakes["ns/a"])
        watches.follow(store, "a", "other-ns/a", wakes["other-ns/a"])
        watches.follow(store, "b", "ns/b", wakes["ns/b"])
        watches.follow(other_store, "c", "ns/c", wakes["ns/c"])
        # Once each store's watch is in place, every worker on it checks its record once.
        for wake in wakes.values():
            await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
            assert wake.take() == (False, True)

        await store.append("a", [note("one")])
        for name in ("ns/a", "other-ns/a"):
            await asyncio.wait_for(wakes[name].event.wait(), HANG_GUARD_SECONDS)
        assert {name: wake.take() for name, wake in wakes.items()} == {
            "ns/a": (False, True),
            "other-ns/a": (False, True),
            "ns/b": (False, False),
            "ns/c": (False, False),
        }

        watches.unfollow("ns/a")
        await store.append("a", [note("two")])
        await asyncio.wait_for(wakes["other-ns/a"].event.wait(), HANG_GUARD_SECONDS)
        assert wakes["ns/a"].take() == (False, False)
    finally:
        await watches.close()
        await store.close()
        await other_store.close()


class WatchCutOnce(SqliteEventStore):
    """A real store whose first watch is cut at its first announcement; the watch opens again only
    when the test lets it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.cut = False
        self.may_reopen = asyncio.Event()

    async def watch_sessions(self):  # type: ignore[no-untyped-def, override]
        if self.cut:
            await self.may_reopen.wait()
        async for session_id in super().watch_sessions():
            if session_id is not None and not self.cut:
                self.cut = True
                raise StoreUnavailable("the watch was cut")
            yield session_id


async def test_the_periodic_check_is_needed_only_while_the_watch_is_not_in_place(tmp_path: Path) -> None:
    store = WatchCutOnce(tmp_path / "a.db")
    watches = RecordWatches()
    wake = WorkerWake()
    try:
        watches.follow(store, "a", "ns/a", wake)
        assert not watches.watching("ns/a")  # not yet in place: the worker keeps its timer
        await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
        assert wake.take() == (False, True)
        assert watches.watching("ns/a")

        await store.append("a", [note("one")])  # the watch is cut before it says so
        await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
        assert wake.take() == (False, False)  # only woken to look at its timers again
        assert not watches.watching("ns/a")

        store.may_reopen.set()
        await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
        assert wake.take() == (False, True)  # the watch is back and may have missed the append
        assert watches.watching("ns/a")
        assert not watches.watching("ns/unknown")
    finally:
        await watches.close()
        await store.close()


class CutWatch(SqliteEventStore):
    """A real store whose watch is cut once, after it is in place, while its reads answer or not."""

    def __init__(self, path: Path, answers: bool) -> None:
        super().__init__(path)
        self.answers = answers
        self.cut_now = asyncio.Event()

    async def watch_sessions(self):  # type: ignore[no-untyped-def, override]
        yield None
        await self.cut_now.wait()
        yield WATCH_CUT
        await asyncio.Event().wait()  # cut for good

    async def last_seq(self, session_id: str) -> int:
        if not self.answers:
            raise StoreUnavailable("no quorum")
        return await super().last_seq(session_id)


async def test_a_cut_watch_has_every_worker_check_at_once_only_when_its_store_does_not_answer(
    tmp_path: Path,
) -> None:
    for answers, checks in ((False, (False, True)), (True, (False, False))):
        store = CutWatch(tmp_path / f"{answers}.db", answers)
        watches = RecordWatches()
        wakes = {name: WorkerWake() for name in ("ns/a", "ns/b")}
        try:
            watches.follow(store, "a", "ns/a", wakes["ns/a"])
            watches.follow(store, "b", "ns/b", wakes["ns/b"])
            for wake in wakes.values():  # in place: each checks once
                await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
                assert wake.take() == (False, True)
            # Cut: each wakes to look at its timers; a store that does not answer has each check
            # now (and so report it), one that answers leaves them to their timers.
            store.cut_now.set()
            for wake in wakes.values():
                await asyncio.wait_for(wake.event.wait(), HANG_GUARD_SECONDS)
            await asyncio.sleep(0.2)  # the read that tells, then its wakes
            assert {name: wake.take() for name, wake in wakes.items()} == {"ns/a": checks, "ns/b": checks}
            assert not watches.watching("ns/a")
        finally:
            await watches.close()
            await store.close()


def note(note_id: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=note_id, kind=NoteKind.FINDING, text=""))


def test_the_operators_own_status_write_does_not_wake_the_worker_and_anything_else_does() -> None:
    body = {
        "metadata": {"name": "s", "resourceVersion": "1", "generation": 1, "managedFields": [{"time": "a"}]},
        "spec": {"request": {"goal": "g"}},
        "status": {"lastSeq": 1},
    }
    status_written = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": "2", "managedFields": [{"time": "b"}]},
        "status": {"lastSeq": 2},
    }
    assert changed_beyond_status(None, body)
    assert not changed_beyond_status(body, status_written)
    annotated = {**status_written, "metadata": {**status_written["metadata"], "annotations": {"a": "b"}}}
    assert changed_beyond_status(status_written, annotated)
    edited = {**status_written, "spec": {"request": {"goal": "another"}}}
    assert changed_beyond_status(status_written, edited)
    deleting = {**status_written, "metadata": {**status_written["metadata"], "deletionTimestamp": "now"}}
    assert changed_beyond_status(status_written, deleting)


def pod(phase: str | None, **metadata: object) -> dict[str, object]:
    labels = {"belay.dev/component": "harness", "belay.dev/attempt": "1", "belay.dev/session": "s"}
    status = {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "False"}]} if phase else {}
    return {"metadata": {"name": "s-harness-1", "labels": labels, **metadata}, "status": status}


def test_a_pods_view_changes_with_its_phase_and_deletion_and_not_with_its_conditions() -> None:
    created = pod(None)
    scheduled = pod("Pending")
    assert pod_view(created) == pod_view(scheduled)  # a pod without a phase yet counts as Pending
    assert pod_view(scheduled) != pod_view(pod("Running"))
    assert pod_view(scheduled) != pod_view(pod("Pending", deletionTimestamp="now"))
    conditions = pod("Pending")
    conditions["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    assert pod_view(scheduled) == pod_view(conditions)
