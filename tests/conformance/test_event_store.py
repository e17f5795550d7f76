"""The EventStore conformance suite: every backend in EVENT_STORE_BACKENDS passes the same tests."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.journal.events import (
    Event,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Note,
    NoteKind,
    Task,
    TaskStatus,
    UserInput,
)
from belay.stores.base import (
    MAX_PAYLOAD_BYTES,
    ClaimTaken,
    EventStore,
    IdempotencyConflict,
    PayloadTooLarge,
    SessionDeleted,
    StaleLease,
)
from tests.conformance.backends import EventBackend

WRITER_SCRIPT = Path(__file__).with_name("writer_process.py")
# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 30


def note(note_id: str, text: str = "") -> EventDraft:
    return EventDraft(payload=Note(note_id=note_id, kind=NoteKind.FINDING, text=text))


def notes(prefix: str, count: int) -> list[EventDraft]:
    return [note(f"{prefix}-{i}") for i in range(count)]


def note_ids(events: list[Event]) -> list[str]:
    return [e.payload.note_id for e in events if isinstance(e.payload, Note)]


def seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


# --------------------------------------------------------------------------------------------------
# append and seq


async def test_append_assigns_dense_seqs_from_one(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    assert await event_store.last_seq(session) == 0
    first = await event_store.append(session, notes("a", 3))
    second = await event_store.append(session, notes("b", 2))
    assert seqs(first) == [1, 2, 3]
    assert seqs(second) == [4, 5]
    assert all(e.session_id == session for e in first + second)
    assert await event_store.last_seq(session) == 5
    assert await event_store.read(session) == first + second


async def test_sessions_have_independent_seqs(event_backend: EventBackend, event_store: EventStore) -> None:
    one, two = event_backend.session("one"), event_backend.session("two")
    await event_store.append(one, notes("a", 3))
    appended = await event_store.append(two, notes("b", 2))
    assert seqs(appended) == [1, 2]
    assert await event_store.last_seq(one) == 3


async def test_stored_event_keeps_type_parent_and_actor(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    [request] = await event_store.append(session, [EventDraft(payload=UserInput(goal="fix the parser"))])
    draft = EventDraft(payload=ModelOutput(text="looking", input_tokens=7), parent_seq=request.seq)
    [output] = await event_store.append(session, [draft], idempotency_key="turn-1")
    [read_back] = await event_store.read(session, output.seq, output.seq)
    assert read_back == output
    assert read_back.type == "model_output"
    assert read_back.parent_seq == 1
    assert read_back.idempotency_key == "turn-1"
    assert isinstance(read_back.payload, ModelOutput) and read_back.payload.input_tokens == 7


async def test_concurrent_writers_get_dense_seqs_and_atomic_batches(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    writers, batches, batch_size = 8, 15, 4
    # Half the writers share the fixture's handle, half open their own, so both in-process queuing
    # and contention between independent connections are exercised.
    handles = [event_store if w % 2 == 0 else event_backend.open_another() for w in range(writers)]

    async def write(writer: int) -> list[list[Event]]:
        results = []
        for batch in range(batches):
            drafts = notes(f"w{writer}-b{batch}", batch_size)
            results.append(await handles[writer].append(session, drafts))
        return results

    per_writer = await asyncio.wait_for(
        asyncio.gather(*(write(w) for w in range(writers))), HANG_GUARD_SECONDS
    )
    stored = await event_store.read(session)
    total = writers * batches * batch_size
    assert seqs(stored) == list(range(1, total + 1))
    returned = sorted((e for results in per_writer for batch in results for e in batch), key=lambda e: e.seq)
    assert returned == stored
    # Each batch occupies consecutive seqs, in the order its drafts were given.
    for results in per_writer:
        for batch in results:
            assert seqs(batch) == list(range(batch[0].seq, batch[0].seq + batch_size))
            prefix = note_ids(batch)[0].rsplit("-", 1)[0]
            assert note_ids(batch) == [f"{prefix}-{i}" for i in range(batch_size)]


async def test_concurrent_writer_processes_get_dense_seqs_and_atomic_batches(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    processes, batches, batch_size = 4, 8, 25
    await asyncio.to_thread(run_writer_processes, event_backend.spec, session, processes, batches, batch_size)
    stored = await event_store.read(session)
    assert seqs(stored) == list(range(1, processes * batches * batch_size + 1))
    # Every batch is whole and contiguous: its events occupy consecutive seqs in index order.
    for start in range(0, len(stored), batch_size):
        ids = [i.split(":") for i in note_ids(stored[start : start + batch_size])]
        assert {(label, batch) for label, batch, _, _ in ids} == {(ids[0][0], ids[0][1])}
        assert [int(index) for _, _, index, _ in ids] == list(range(batch_size))
    labels = {i.split(":")[0] for i in note_ids(stored)}
    assert labels == {f"p{n}" for n in range(processes)}


def run_writer_processes(
    spec: dict[str, object], session: str, processes: int, batches: int, batch_size: int
) -> None:
    children = [
        subprocess.Popen(
            [
                sys.executable,
                str(WRITER_SCRIPT),
                json.dumps(spec),
                session,
                str(batch_size),
                "100",
                str(batches),
                f"p{n}",
            ],
            stdout=subprocess.DEVNULL,
        )
        for n in range(processes)
    ]
    codes = [child.wait(timeout=HANG_GUARD_SECONDS * 2) for child in children]
    assert codes == [0] * processes


async def test_empty_batch_writes_nothing(event_backend: EventBackend, event_store: EventStore) -> None:
    session = event_backend.session()
    assert await event_store.append(session, []) == []
    assert await event_store.last_seq(session) == 0


# --------------------------------------------------------------------------------------------------
# idempotency


async def test_idempotent_retry_returns_the_original_events_and_writes_nothing(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("before", 2))
    original = await event_store.append(session, notes("batch", 3), idempotency_key="step-7")
    await event_store.append(session, notes("after", 1))
    retried = await event_store.append(session, notes("batch", 3), idempotency_key="step-7")
    assert retried == original
    assert seqs(retried) == [3, 4, 5]
    assert await event_store.last_seq(session) == 6
    # The record survives a new handle (another process would open it the same way).
    again = await event_backend.open_another().append(session, notes("batch", 3), idempotency_key="step-7")
    assert again == original
    assert await event_store.last_seq(session) == 6


async def test_same_key_with_a_different_batch_is_a_conflict(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("batch", 3), idempotency_key="step-7")
    with pytest.raises(IdempotencyConflict):
        await event_store.append(session, notes("other", 3), idempotency_key="step-7")
    with pytest.raises(IdempotencyConflict):
        await event_store.append(session, notes("batch", 2), idempotency_key="step-7")
    changed_parent = [EventDraft(payload=d.payload, parent_seq=1) for d in notes("batch", 3)]
    with pytest.raises(IdempotencyConflict):
        await event_store.append(session, changed_parent, idempotency_key="step-7")
    assert await event_store.last_seq(session) == 3


async def test_idempotency_keys_are_scoped_to_their_session(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    one, two = event_backend.session("one"), event_backend.session("two")
    await event_store.append(one, notes("a", 2), idempotency_key="k")
    in_two = await event_store.append(two, notes("b", 1), idempotency_key="k")
    assert seqs(in_two) == [1]


async def test_concurrent_retries_of_one_key_write_once(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    handles = [event_store, event_backend.open_another(), event_backend.open_another()]
    results = await asyncio.gather(
        *(handles[i % 3].append(session, notes("once", 4), idempotency_key="only-once") for i in range(9))
    )
    assert all(result == results[0] for result in results)
    assert await event_store.last_seq(session) == 4


# --------------------------------------------------------------------------------------------------
# fencing


async def test_leases_advance_and_a_stale_lease_is_refused(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    assert await event_store.current_lease(session) is None
    first = await event_store.acquire_lease(session, "attempt-1")
    assert (first.number, first.holder) == (1, "attempt-1")
    await event_store.append(session, notes("one", 2), lease=first.number)

    second = await event_store.acquire_lease(session, "attempt-2")
    assert second.number == 2
    assert await event_store.current_lease(session) == second

    with pytest.raises(StaleLease):
        await event_store.append(session, notes("zombie", 2), lease=first.number)
    assert await event_store.last_seq(session) == 2

    accepted = await event_store.append(session, notes("two", 1), lease=second.number)
    assert seqs(accepted) == [3]


async def test_a_retry_after_the_lease_moved_on_returns_the_original_and_writes_nothing(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """A replay writes nothing, so there is nothing to fence: the writer learns its batch landed.
    A new batch under the old lease, with a new key, is still refused."""
    session = event_backend.session()
    old = await event_store.acquire_lease(session, "attempt-1")
    original = await event_store.append(session, notes("landed", 2), idempotency_key="k1", lease=old.number)
    await event_store.acquire_lease(session, "attempt-2")
    assert (
        await event_store.append(session, notes("landed", 2), idempotency_key="k1", lease=old.number)
        == original
    )
    with pytest.raises(StaleLease):
        await event_store.append(session, notes("new", 1), idempotency_key="k2", lease=old.number)
    assert await event_store.last_seq(session) == 2


async def test_a_lease_never_acquired_is_refused(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    with pytest.raises(StaleLease):
        await event_store.append(session, notes("early", 1), lease=1)
    lease = await event_store.acquire_lease(session, "attempt-1")
    with pytest.raises(StaleLease):
        await event_store.append(session, notes("ahead", 1), lease=lease.number + 1)
    assert await event_store.last_seq(session) == 0


async def test_a_zombie_writer_is_fenced_by_its_replacement(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Two attempts write side by side; once the replacement holds the lease, the zombie's every
    append is refused, whichever handle and whatever interleaving."""
    session = event_backend.session()
    zombie_store = event_backend.open_another()
    zombie_lease = await zombie_store.acquire_lease(session, "attempt-1")
    await zombie_store.append(session, notes("zombie-before", 2), lease=zombie_lease.number)
    replacement = await event_store.acquire_lease(session, "attempt-2")

    async def zombie() -> int:
        refused = 0
        for i in range(10):
            try:
                await zombie_store.append(session, notes(f"zombie-{i}", 2), lease=zombie_lease.number)
            except StaleLease:
                refused += 1
        return refused

    async def live() -> None:
        for i in range(10):
            await event_store.append(session, notes(f"live-{i}", 2), lease=replacement.number)

    refused, _ = await asyncio.gather(zombie(), live())
    assert refused == 10
    ids = note_ids(await event_store.read(session))
    assert not any(i.startswith("zombie-") and not i.startswith("zombie-before") for i in ids)
    assert len(ids) == 2 + 20


# --------------------------------------------------------------------------------------------------
# crash safety


async def test_a_writer_killed_mid_batch_leaves_no_part_of_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    batch_size, text_bytes = min(1500, event_backend.max_batch_events or 1500), 2000
    rng = random.Random()
    killed_in_flight = 0
    for _ in range(3):
        killed_in_flight += await asyncio.to_thread(
            run_and_kill_writer, event_backend.spec, session, batch_size, text_bytes, rng
        )
        stored = await event_store.read(session)
        assert seqs(stored) == list(range(1, len(stored) + 1))
        by_batch: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for e in stored:
            assert isinstance(e.payload, Note)
            _, batch, index, size = e.payload.note_id.split(":")
            by_batch[batch].append((e.seq, int(index)))
            assert int(size) == batch_size
        for batch, members in by_batch.items():
            assert [index for _, index in members] == list(range(batch_size)), f"batch {batch} is partial"
            assert [s for s, _ in members] == list(range(members[0][0], members[0][0] + batch_size))
    assert killed_in_flight >= 1
    # The store stays writable after the crashes, continuing the same dense seq.
    last = await event_store.last_seq(session)
    appended = await event_backend.open_another().append(session, notes("after-crash", 2))
    assert seqs(appended) == [last + 1, last + 2]


async def test_appends_that_need_not_be_durable_keep_every_other_guarantee(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """`durable=False` only lets a machine crash take off a tail: order, seqs, replays, leases and
    claims are what they are for any append, on every backend."""
    session = event_backend.session()
    lease = await event_store.acquire_lease(session, "attempt-1")
    first = await event_store.append(session, notes("relaxed", 2), lease=lease.number, durable=False)
    second = await event_store.append(session, notes("durable", 1), lease=lease.number)
    third = await event_store.append(
        session, notes("keyed", 2), idempotency_key="k", lease=lease.number, claim="c", durable=False
    )
    assert seqs(first + second + third) == [1, 2, 3, 4, 5]
    # A replay is answered the same whatever its own durability.
    assert await event_backend.open_another().append(session, notes("keyed", 2), idempotency_key="k") == third
    with pytest.raises(IdempotencyConflict):
        await event_store.append(session, notes("other", 1), idempotency_key="k", durable=False)
    with pytest.raises(ClaimTaken):
        await event_store.append(session, notes("again", 1), lease=lease.number, claim="c", durable=False)
    await event_backend.open_another().acquire_lease(session, "attempt-2")
    with pytest.raises(StaleLease):
        await event_store.append(session, notes("stale", 1), lease=lease.number, durable=False)
    assert await event_backend.open_another().read(session) == first + second + third


async def test_appends_that_need_not_be_durable_survive_their_writer_being_killed(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Only a machine crash may lose them: a writer process SIGKILLed after its appends were
    acknowledged leaves every one of them in the record."""
    session = event_backend.session()
    acknowledged = await asyncio.to_thread(
        run_writer_until_acknowledged, event_backend.spec, session, batches=5, batch_size=3
    )
    stored = note_ids(await event_store.read(session))
    for batch in acknowledged:
        assert [f"r:{batch}:{index}:3" for index in range(3)] == [
            i for i in stored if i.startswith(f"r:{batch}:")
        ], f"acknowledged batch {batch} is not whole in the record"
    assert len(acknowledged) >= 5


def run_writer_until_acknowledged(
    spec: dict[str, object], session: str, batches: int, batch_size: int
) -> list[int]:
    """Start a writer of non-durable appends, SIGKILL it once `batches` of them were acknowledged,
    and return the batches it reported acknowledged."""
    command = [sys.executable, str(WRITER_SCRIPT), json.dumps(spec), session, str(batch_size), "10"]
    child = subprocess.Popen([*command, "0", "r", "relaxed"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acknowledged: list[int] = []
    try:
        for line in child.stdout:
            word, batch, *_ = line.split()
            if word == "done":
                acknowledged.append(int(batch))
                if len(acknowledged) >= batches:
                    child.send_signal(signal.SIGKILL)
                    break
        else:
            raise AssertionError(f"the writer exited on its own with {child.wait()}")
        child.wait()
        return acknowledged
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def run_and_kill_writer(
    spec: dict[str, object], session: str, batch_size: int, text_bytes: int, rng: random.Random
) -> int:
    """Start a writer, let it commit at least one batch, then SIGKILL it at a random moment inside
    a later append. Returns 1 if the kill landed while an append was in flight, else 0."""
    child = subprocess.Popen(
        [
            sys.executable,
            str(WRITER_SCRIPT),
            json.dumps(spec),
            session,
            str(batch_size),
            str(text_bytes),
            "0",
            "k",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        durations: list[float] = []
        for line in child.stdout:
            word, *rest = line.split()
            if word == "done":
                durations.append(float(rest[1]))
            elif word == "begin" and len(durations) >= 2:
                # Somewhere inside this append, including its commit. The first batch also paid
                # for connecting, so the later, shorter batches bound the moment of the kill.
                time.sleep(rng.uniform(0, min(durations[1:]) * 0.8))
                child.send_signal(signal.SIGKILL)
                break
        else:
            raise AssertionError(f"the writer exited on its own with {child.wait()}")
        remaining = child.stdout.read()
        child.wait()
        return 0 if "done" in remaining else 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --------------------------------------------------------------------------------------------------
# reads


async def test_read_ranges_tail_and_limits(event_backend: EventBackend, event_store: EventStore) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("n", 10))
    assert seqs(await event_store.read(session, 3, 7)) == [3, 4, 5, 6, 7]
    assert seqs(await event_store.read(session, 8)) == [8, 9, 10]
    assert seqs(await event_store.read(session, 2, limit=3)) == [2, 3, 4]
    assert await event_store.read(session, 11) == []
    assert seqs(await event_store.tail(session, 3)) == [8, 9, 10]
    assert seqs(await event_store.tail(session, 50)) == list(range(1, 11))
    assert await event_store.read(event_backend.session("never-written")) == []
    assert await event_store.tail(event_backend.session("never-written"), 5) == []


async def test_latest_of_type(event_backend: EventBackend, event_store: EventStore) -> None:
    session = event_backend.session()
    assert await event_store.latest(session, "task") is None
    await event_store.append(
        session,
        [
            EventDraft(payload=Task(task_id="t1", status=TaskStatus.PLANNED)),
            note("n1"),
            EventDraft(payload=Task(task_id="t1", status=TaskStatus.RUNNING)),
        ],
    )
    await event_store.append(session, notes("more", 5))
    latest_task = await event_store.latest(session, "task")
    assert latest_task is not None and latest_task.seq == 3
    assert isinstance(latest_task.payload, Task) and latest_task.payload.status == TaskStatus.RUNNING
    latest_note = await event_store.latest(session, "note")
    assert latest_note is not None and latest_note.seq == 8
    assert await event_store.latest(session, "checkpoint") is None
    await event_store.append(session, [EventDraft(payload=Lifecycle(kind=LifecycleKind.HARNESS_STARTED))])
    latest_lifecycle = await event_store.latest(session, "lifecycle")
    assert latest_lifecycle is not None and latest_lifecycle.seq == 9


async def test_list_sessions(event_backend: EventBackend, event_store: EventStore) -> None:
    names = [event_backend.session(label) for label in ("b", "a", "c")]
    for name in names:
        await event_store.append(name, notes("x", 1))
    listed = [s for s in await event_store.list_sessions() if s.startswith(event_backend.session_prefix)]
    assert sorted(listed) == sorted(names)


async def test_payload_too_large_is_refused_and_writes_nothing(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    big = note("big", "x" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(PayloadTooLarge, match="artifact"):
        await event_store.append(session, [note("small"), big])
    assert await event_store.last_seq(session) == 0
    # Just under the limit is fine.
    fits = note("fits", "x" * (MAX_PAYLOAD_BYTES - 200))
    assert seqs(await event_store.append(session, [fits])) == [1]


# --------------------------------------------------------------------------------------------------
# watch


async def collect(watch: AsyncIterator[Event], count: int) -> list[Event]:
    events: list[Event] = []
    async for event in watch:
        events.append(event)
        if len(events) == count:
            break
    return events


async def test_watch_sees_history_then_live_appends_with_no_gap(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("history", 5))
    other_writer = event_backend.open_another()
    watcher = asyncio.create_task(collect(event_store.watch(session, from_seq=3), 3 + 12))

    async def write_live() -> None:
        for i in range(6):
            # Alternate handles: appends through this handle and through an independent one (as
            # another process would make them) must both reach the watcher.
            writer = event_store if i % 2 == 0 else other_writer
            await writer.append(session, notes(f"live{i}", 2))
            await asyncio.sleep(0)

    await write_live()
    seen = await asyncio.wait_for(watcher, HANG_GUARD_SECONDS)
    assert seqs(seen) == list(range(3, 18))
    assert seen == (await event_store.read(session, 3))


async def test_watch_waits_for_a_session_that_has_no_events_yet(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    watcher = asyncio.create_task(collect(event_store.watch(session), 2))
    await asyncio.sleep(0.01)
    assert not watcher.done()
    await event_store.append(session, notes("first", 2))
    assert seqs(await asyncio.wait_for(watcher, HANG_GUARD_SECONDS)) == [1, 2]


async def test_a_cut_watch_resumes_from_its_last_seq(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("a", 4))
    first_watch = event_store.watch(session)
    seen = await asyncio.wait_for(collect(first_watch, 2), HANG_GUARD_SECONDS)
    aclose = getattr(first_watch, "aclose", None)
    if aclose is not None:
        await aclose()
    await event_store.append(session, notes("b", 3))
    resumed = await asyncio.wait_for(
        collect(event_store.watch(session, seen[-1].seq + 1), 5), HANG_GUARD_SECONDS
    )
    assert seqs(seen + resumed) == list(range(1, 8))


async def test_many_watchers_see_the_same_stream(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    watchers = [asyncio.create_task(collect(event_store.watch(session), 20)) for _ in range(4)]
    for i in range(10):
        await event_store.append(session, notes(f"n{i}", 2))
    results = await asyncio.wait_for(asyncio.gather(*watchers), HANG_GUARD_SECONDS)
    stored = await event_store.read(session)
    assert all(result == stored for result in results)


# --------------------------------------------------------------------------------------------------
# delete_session


async def test_a_deleted_session_is_gone_and_its_id_starts_again_at_seq_one(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    doomed, kept = event_backend.session("doomed"), event_backend.session("kept")
    lease = await event_store.acquire_lease(doomed, "attempt-1")
    request = EventDraft(payload=UserInput(goal="fix the parser"))
    await event_store.append(doomed, [request, *notes("a", 3)], idempotency_key="first", lease=lease.number)
    await event_store.append(kept, notes("b", 2), idempotency_key="first")

    await event_store.delete_session(doomed)

    assert await event_store.read(doomed) == []
    assert await event_store.tail(doomed, 10) == []
    assert await event_store.last_seq(doomed) == 0
    assert await event_store.latest(doomed, "user_input") is None
    assert await event_store.current_lease(doomed) is None
    listed = await event_store.list_sessions()
    assert doomed not in listed and kept in listed
    assert note_ids(await event_store.read(kept)) == ["b-0", "b-1"]
    assert (await event_store.append(kept, notes("b", 2), idempotency_key="first"))[0].seq == 1

    # The id is new again: seqs from 1, its old idempotency key unused, its old lease stale.
    again = await event_store.append(doomed, [note("new")], idempotency_key="first")
    assert seqs(again) == [1] and note_ids(again) == ["new"]
    with pytest.raises(StaleLease):
        await event_store.append(doomed, [note("zombie")], lease=lease.number)
    assert doomed in await event_store.list_sessions()


async def test_deleting_twice_or_an_unknown_session_does_nothing(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("a", 2))
    await event_store.delete_session(session)
    await event_store.delete_session(session)
    await event_store.delete_session(event_backend.session("never-written"))
    assert await event_store.last_seq(session) == 0


async def test_a_writer_that_knew_the_deleted_session_starts_it_again_at_seq_one(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    other_writer = event_backend.open_another()
    await other_writer.append(session, notes("before", 3))
    await event_store.delete_session(session)
    assert seqs(await other_writer.append(session, [note("after")])) == [1]
    assert note_ids(await event_store.read(session)) == ["after"]
    assert session in await event_store.list_sessions()


async def test_a_watch_of_a_deleted_session_ends_with_session_deleted(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, notes("old", 2))
    watch = event_store.watch(session)
    seen = [await asyncio.wait_for(anext(watch), HANG_GUARD_SECONDS) for _ in range(2)]
    assert note_ids(seen) == ["old-0", "old-1"]
    waiting = asyncio.create_task(anext(watch))
    await asyncio.sleep(0.01)
    await event_store.delete_session(session)
    # A new session under the same id never reaches the old watch as if it were more of the same.
    await event_store.append(session, notes("new", 3))
    with pytest.raises(SessionDeleted):
        await asyncio.wait_for(waiting, HANG_GUARD_SECONDS)


# --------------------------------------------------------------------------------------------------
# watch_sessions


async def moved_until(watch: AsyncIterator[str | None], prefix: str, wanted: set[str]) -> set[str]:
    """The sessions (of this test) the watch names until it has named every wanted one."""
    seen: set[str] = set()
    while not wanted <= seen:
        moved = await asyncio.wait_for(anext(watch), HANG_GUARD_SECONDS)
        if moved is not None and moved.startswith(prefix):
            seen.add(moved)
    return seen


async def test_watch_sessions_names_each_session_whose_record_moved_and_no_other(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    appended, elsewhere, deleted, idle = (event_backend.session(label) for label in "abcd")
    for session in (deleted, idle):
        await event_store.append(session, notes("before", 1))
    watch = event_store.watch_sessions()
    # None first: the watch is in place, and whatever happened before it is for the reader to read.
    assert await asyncio.wait_for(anext(watch), HANG_GUARD_SECONDS) is None
    await event_store.append(appended, notes("a", 2))
    # Through another handle, as another process would append.
    await event_backend.open_another().append(elsewhere, notes("b", 1))
    await event_store.delete_session(deleted)
    seen = await moved_until(watch, event_backend.session_prefix, {appended, elsewhere, deleted})
    # The last change (after every other one): the idle session was never named before it.
    await event_store.append(appended, notes("last", 1))
    seen |= await moved_until(watch, event_backend.session_prefix, {appended})
    assert idle not in seen
    await watch.aclose()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------
# cancelled callers


async def test_appends_cancelled_at_random_moments_leave_the_store_working(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Writers go on while others' appends are cancelled before, during and after their write. A
    cancelled append is written whole or not at all; every other append completes; seqs stay
    dense; the store keeps answering."""
    session = event_backend.session()
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    handles = [event_store, event_backend.open_another()]
    rounds, per_round, batch_size = 6, 12, 3
    completed: list[list[Event]] = []
    cancelled = 0
    for round_number in range(rounds):
        tasks = [
            asyncio.create_task(handles[i % 2].append(session, notes(f"r{round_number}-a{i}", batch_size)))
            for i in range(per_round)
        ]
        doomed = rng.sample(range(per_round), per_round // 2)
        for index in doomed:
            await asyncio.sleep(rng.choice([0, 0, rng.uniform(0, 0.003)]))
            tasks[index].cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG_GUARD_SECONDS)
        for index, outcome in enumerate(done):
            if isinstance(outcome, asyncio.CancelledError):
                assert index in doomed, f"seed {seed}: append {index} was cancelled without being asked to"
                cancelled += 1
            else:
                assert isinstance(outcome, list), f"seed {seed}: append {index} failed: {outcome!r}"
                completed.append(outcome)
    assert cancelled > 0
    # The store still works, through both handles, after everything above.
    for handle in handles:
        completed.append(
            await asyncio.wait_for(
                handle.append(session, notes(f"after-{id(handle)}", 2)), HANG_GUARD_SECONDS
            )
        )
    stored = await event_store.read(session)
    assert seqs(stored) == list(range(1, len(stored) + 1)), f"seed {seed}"
    by_seq = {e.seq: e for e in stored}
    for batch in completed:
        assert [by_seq[e.seq] for e in batch] == batch, f"seed {seed}"
    # Every batch in the record, cancelled or not, is whole and contiguous.
    batches: dict[str, list[int]] = defaultdict(list)
    for event in stored:
        prefix, index = note_ids([event])[0].rsplit("-", 1)
        batches[prefix].append(int(index))
    assert all(indexes == list(range(len(indexes))) for indexes in batches.values()), f"seed {seed}"
    assert {len(indexes) for prefix, indexes in batches.items() if not prefix.startswith("after")} <= {
        batch_size
    }
