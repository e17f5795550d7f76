"""The etcd event store under real faults: a leader stopped mid-stream, the whole cluster down, an
answer lost after the write took effect, and a follower whose watch is cut.

Every fault is real: etcd processes are stopped, and lost answers come from a loopback TCP proxy
that forwards a request to etcd and throws the reply away."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind, UserInput
from belay.stores.base import StoreUnavailable
from belay.stores.etcd import EtcdEventStore
from tests.faults.tcp_proxy import LossyProxy
from tests.testenv.etcd import EtcdCluster

pytestmark = pytest.mark.testenv
# Tries of one append in the lost-leader test, each bounded by the store's operation timeout.
APPEND_ATTEMPTS = 4


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


def note_ids(events: list[Event]) -> list[str]:
    return [e.payload.note_id for e in events if isinstance(e.payload, Note)]


def fresh_prefix() -> str:
    return f"/faults-{uuid.uuid4().hex[:12]}"


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_a_lost_leader_loses_and_duplicates_no_acknowledged_event(
    etcd_cluster: EtcdCluster, how: str
) -> None:
    store = EtcdEventStore(
        etcd_cluster.endpoints,
        prefix=fresh_prefix(),
        request_timeout=1,
        operation_timeout=30,
        credentials=etcd_cluster.credentials,
    )
    session = "leader-loss"
    writers, batches = 4, 12
    acknowledged: dict[str, list[int]] = {}
    acknowledged_after_the_fault: set[str] = set()
    enough_before_the_fault = asyncio.Event()
    fault_done = asyncio.Event()

    async def writer(number: int) -> None:
        for batch in range(batches):
            if batch == batches // 2:
                # The second half of every writer's stream runs on the cluster without its leader.
                await fault_done.wait()
            key = f"w{number}-b{batch}"
            drafts = [note(f"{key}-e{i}") for i in range(2)]
            # What a harness does on an unanswered append: try again with the same key, which
            # either finds the first attempt's events or writes them once. A few tries, not
            # forever: a store that never answers fails the test instead of hanging it.
            for attempt in range(1, APPEND_ATTEMPTS + 1):
                try:
                    stored = await store.append(session, drafts, idempotency_key=key)
                    break
                except StoreUnavailable:
                    if attempt == APPEND_ATTEMPTS:
                        raise
            assert note_ids(stored) == [f"{key}-e0", f"{key}-e1"]
            acknowledged[key] = [e.seq for e in stored]
            if fault_done.is_set():
                acknowledged_after_the_fault.add(key)
            if len(acknowledged) >= writers * 2:
                enough_before_the_fault.set()

    async def lose_the_leader() -> str:
        await enough_before_the_fault.wait()
        leader = await asyncio.to_thread(etcd_cluster.leader_name)
        # "stop" is a clean shutdown (etcd hands leadership over first); "kill" is a crash.
        lose = etcd_cluster.stop_member if how == "stop" else etcd_cluster.kill_member
        await asyncio.to_thread(lose, leader)
        fault_done.set()
        return leader

    try:
        *_, lost = await asyncio.gather(*(writer(n) for n in range(writers)), lose_the_leader())
        assert lost not in etcd_cluster.running_members()
        # Writers carried on after the fault: every batch of every writer was acknowledged.
        assert len(acknowledged) == writers * batches
        assert len(acknowledged_after_the_fault) >= writers * (batches - batches // 2)

        stored = await store.read(session)
        assert [e.seq for e in stored] == list(range(1, writers * batches * 2 + 1))
        ids = note_ids(stored)
        assert len(ids) == len(set(ids)), "an event was written twice"
        by_seq = {e.seq: e for e in stored}
        for key, seqs in acknowledged.items():
            assert note_ids([by_seq[s] for s in seqs]) == [f"{key}-e0", f"{key}-e1"]

        await asyncio.to_thread(etcd_cluster.start_member, lost)
        # The restarted member catches up and serves the same record.
        alone = EtcdEventStore(
            [etcd_cluster.endpoint_of(lost)], prefix=store.prefix, credentials=etcd_cluster.credentials
        )
        try:
            assert [e.seq for e in await alone.read(session)] == [e.seq for e in stored]
        finally:
            await alone.close()
    finally:
        await store.close()


@pytest.mark.slow
async def test_with_etcd_entirely_down_an_append_fails_clearly_and_writes_nothing(
    etcd_cluster: EtcdCluster,
) -> None:
    store = EtcdEventStore(
        etcd_cluster.endpoints,
        prefix=fresh_prefix(),
        request_timeout=0.5,
        operation_timeout=2,
        credentials=etcd_cluster.credentials,
    )
    session = "all-down"
    try:
        await store.append(session, [note("before-1"), note("before-2")])
        await asyncio.gather(
            *(asyncio.to_thread(etcd_cluster.stop_member, n) for n in etcd_cluster.member_names)
        )

        with pytest.raises(StoreUnavailable, match="did not answer") as refused:
            await store.append(session, [note(f"during-{i}") for i in range(5)], idempotency_key="during")
        assert "nothing was written" in str(refused.value)
        with pytest.raises(StoreUnavailable):
            await store.last_seq(session)

        # All members together: each needs a quorum of peers before it reports healthy.
        await asyncio.gather(
            *(asyncio.to_thread(etcd_cluster.start_member, n) for n in etcd_cluster.member_names)
        )
        assert note_ids(await store.read(session)) == ["before-1", "before-2"]
        assert await store.last_seq(session) == 2
        # The same store carries on where the record left off.
        after = await store.append(session, [note("after")], idempotency_key="during")
        assert [e.seq for e in after] == [3]
    finally:
        await store.close()


async def test_an_append_whose_answer_was_lost_returns_its_original_seqs_on_retry(etcd_endpoint: str) -> None:
    proxy = LossyProxy("127.0.0.1", port_of(etcd_endpoint))
    await proxy.start()
    through_proxy = EtcdEventStore(
        [proxy.endpoint], prefix=fresh_prefix(), request_timeout=0.5, operation_timeout=1.5
    )
    direct = EtcdEventStore([etcd_endpoint], prefix=through_proxy.prefix)
    session = "lost-answer"
    try:
        await through_proxy.append(session, [note("first")])
        marker = "lost-answer-" + uuid.uuid4().hex
        drafts = [EventDraft(payload=UserInput(goal=marker)), note("second")]
        proxy.lose_answers_after(marker.encode())

        with pytest.raises(StoreUnavailable, match="same idempotency key"):
            await through_proxy.append(session, drafts, idempotency_key="step-7")
        assert proxy.answers_lost.is_set()
        # The write took effect even though its answer never came back.
        assert [e.seq for e in await direct.read(session)] == [1, 2, 3]

        await proxy.heal()
        retried = await through_proxy.append(session, drafts, idempotency_key="step-7")
        assert [e.seq for e in retried] == [2, 3]
        assert await direct.last_seq(session) == 3
        assert note_ids(await direct.read(session)) == ["first", "second"]
    finally:
        await through_proxy.close()
        await direct.close()
        await proxy.stop()


async def test_an_append_without_a_key_is_written_once_when_its_answer_is_lost(etcd_endpoint: str) -> None:
    """The store settles an unanswered transaction itself: it re-reads the seqs it tried and finds
    its own bytes there, instead of writing the batch a second time."""
    proxy = LossyProxy("127.0.0.1", port_of(etcd_endpoint))
    await proxy.start()
    through_proxy = EtcdEventStore(
        [proxy.endpoint], prefix=fresh_prefix(), request_timeout=0.5, operation_timeout=20
    )
    session = "lost-answer-no-key"
    try:
        await through_proxy.append(session, [note("first")])
        marker = "no-key-" + uuid.uuid4().hex
        proxy.lose_answers_after(marker.encode())

        async def heal_once_lost() -> None:
            await proxy.answers_lost.wait()
            await asyncio.sleep(1.0)  # several request timeouts go by unanswered
            await proxy.heal()

        stored, _ = await asyncio.gather(
            through_proxy.append(session, [EventDraft(payload=UserInput(goal=marker)), note("second")]),
            heal_once_lost(),
        )
        assert [e.seq for e in stored] == [2, 3]
        everything = await through_proxy.read(session)
        assert [e.seq for e in everything] == [1, 2, 3]
        assert note_ids(everything) == ["first", "second"]
    finally:
        await through_proxy.close()
        await proxy.stop()


async def test_a_follower_misses_nothing_when_its_watch_is_cut_and_history_compacted(
    etcd_endpoint: str,
) -> None:
    import aetcd

    proxy = LossyProxy("127.0.0.1", port_of(etcd_endpoint))
    await proxy.start()
    follower_store = EtcdEventStore(
        [proxy.endpoint], prefix=fresh_prefix(), request_timeout=1, operation_timeout=20
    )
    writer = EtcdEventStore([etcd_endpoint], prefix=follower_store.prefix)
    session = "followed"
    total = 60
    seen: list[int] = []
    all_seen = asyncio.Event()
    try:

        async def follow() -> None:
            async for event in follower_store.watch(session, from_seq=1):
                seen.append(event.seq)
                if event.seq == total:
                    all_seen.set()
                    return

        follower = asyncio.create_task(follow())
        async with aetcd.Client(host="127.0.0.1", port=port_of(etcd_endpoint)) as admin:
            for i in range(1, total + 1):
                await writer.append(session, [note(f"n{i}")])
                if i % 20 == 0:
                    # Cut the follower's connection and compact away the history its watch
                    # would resume from: it must re-read from its last seq.
                    await proxy.cut()
                    current = await admin.get_prefix(writer.prefix.encode())
                    await admin.compact(current.header.revision)
        await asyncio.wait_for(all_seen.wait(), timeout=30)
        await follower
        assert seen == list(range(1, total + 1))
    finally:
        await follower_store.close()
        await writer.close()
        await proxy.stop()


@pytest.mark.slow
async def test_a_follower_on_a_killed_member_resumes_without_a_gap(etcd_cluster: EtcdCluster) -> None:
    """The follower talks to the leader only; the leader is killed while the writer goes on through
    the other members. Once the member is back, the follower re-reads from its last seq."""
    leader = etcd_cluster.leader_name()
    prefix = fresh_prefix()
    credentials = etcd_cluster.credentials
    writer = EtcdEventStore(
        etcd_cluster.endpoints,
        prefix=prefix,
        request_timeout=1,
        operation_timeout=30,
        credentials=credentials,
    )
    follower_store = EtcdEventStore(
        [etcd_cluster.endpoint_of(leader)],
        prefix=prefix,
        request_timeout=1,
        operation_timeout=2,
        credentials=credentials,
    )
    session = "followed-through-a-crash"
    total = 30
    seen: list[int] = []
    first_ten = asyncio.Event()

    async def follow() -> None:
        async for event in follower_store.watch(session):
            seen.append(event.seq)
            if event.seq == 10:
                first_ten.set()
            if event.seq == total:
                return

    follower = asyncio.create_task(follow())
    try:
        for i in range(1, 11):
            await writer.append(session, [note(f"n{i}")])
        await asyncio.wait_for(first_ten.wait(), timeout=30)
        await asyncio.to_thread(etcd_cluster.kill_member, leader)
        for i in range(11, total + 1):
            await writer.append(session, [note(f"n{i}")])
        assert seen == list(range(1, 11)), "the follower's only member is down"
        await asyncio.to_thread(etcd_cluster.start_member, leader)
        await asyncio.wait_for(follower, timeout=60)
        assert seen == list(range(1, total + 1))
    finally:
        follower.cancel()
        await writer.close()
        await follower_store.close()
