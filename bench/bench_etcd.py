"""etcd event store: append latency and throughput, side by side with raw etcd puts.

One etcd member is started on loopback by the same code the test fixtures use (tests/testenv).
The baseline is a plain etcd Put of a value the size of the stored event, sent over the store's
own gRPC channel: the same client, the same connection, the same bytes, so the ratio isolates
what the store adds (building the event, the transaction's compares, the head and index keys).
A third series, a hand-built transaction with the append's compare and puts, shows how much of
that is etcd's work and how much the store's own. A draft serializes its payload when it is made,
so the main series, like the raw put whose value is ready before the clock starts, times only the
write; a fourth series makes the draft inside the timed region too, for the whole cost a writer
sees.

Latency: single-event appends to one session, one at a time, alternating one for one with raw
puts and raw transactions so drift on a shared machine hits both alike. Throughput: several concurrent
writers, each appending to its own session through one store (one event loop), against as many
concurrent raw putters on the same channel, in alternating rounds; the ratio is the median of each
round's appends/s over the raw puts/s of the round before it. The machine's load average is part
of every figure's detail: other work on a shared machine slows both sides, never one alone.

Archive: one session of 10^5 events archived to segments in an S3 server on loopback (the
store's `archive`, with its defaults), and the bytes etcd holds for the session before and after.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from aetcd import rpc
from tests.testenv.etcd import EtcdServer
from tests.testenv.s3 import S3Server

from belay.journal.events import EffectClass, EnvelopeJson, EventDraft, ToolRequest, build_event
from belay.stores.etcd import ARCHIVE_KEEP_EVENTS, SEGMENT_EVENTS, EtcdEventStore, prefix_range_end
from belay.stores.integrity import GENESIS, Chain
from belay.stores.s3 import S3ArtifactStore
from bench.common import Figure

COMMAND = "python -m bench bench_etcd"
WARMUP = 100
SAMPLES = 2000
WRITERS = 8
THROUGHPUT_ROUNDS = 7
ROUND_SECONDS = 1.0
ARCHIVED_SESSION_EVENTS = 10**5
ARCHIVE_BATCH = 10  # events per append, each with an idempotency key, as a harness step writes them
ARCHIVE_GOAL_EVENTS = 10**4


def draft(i: int) -> EventDraft:
    return EventDraft(
        payload=ToolRequest(
            operation_id=f"op-{i}",
            tool="shell",
            arguments={"command": "pytest -q tests/test_parser.py", "cwd": "/workspace"},
            effect=EffectClass.IDEMPOTENT,
            step="reproduce",
        )
    )


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(endpoint: str) -> list[Figure]:
    store = EtcdEventStore([endpoint], prefix="/bench")
    kv, _ = store._stubs()
    # The same bytes a stored event occupies (its chain link in front), written by a plain Put
    # through the same channel.
    probe = await store.append("probe", [draft(0)])
    value, link = store.chain.stored(
        GENESIS, EnvelopeJson("probe", probe[0].created_at, None).fields(draft(0), 1)
    )
    head_value = b'{"last_seq":%d,"chain":"%s","seal":"%s"}' % (10**6, link, store.chain.seal(10**6, link))

    async def raw_put(i: int) -> None:
        await kv.Put(rpc.PutRequest(key=f"/bench-raw/k{i:020d}".encode(), value=value), timeout=5)

    # The floor under an append: a hand-built transaction with the same compare and puts (event,
    # head, latest-of-type), none of the store's own work. It splits the overhead between etcd
    # (a compare-and-three-puts transaction against one put) and the store's Python.
    head_revision = [0]

    async def raw_txn(i: int) -> None:
        request = rpc.TxnRequest()
        compare = request.compare.add()
        compare.key, compare.target = b"/bench-txn/head", rpc.Compare.MOD
        compare.mod_revision = head_revision[0]
        for key, data in (
            (f"/bench-txn/events/{i:020d}".encode(), value),
            (b"/bench-txn/head", head_value),
            (b"/bench-txn/latest/tool_request", b'{"seq":%d}' % i),
        ):
            put = request.success.add().request_put
            put.key, put.value = key, data
        response = await kv.Txn(request, timeout=5)
        head_revision[0] = response.header.revision

    # Drafts are made up front, as the raw put's value is: both sides time only the write.
    drafts = [[draft(i)] for i in range(WARMUP + 4 * SAMPLES + 1)]

    async def append(i: int) -> None:
        await store.append("latency", drafts[i])

    async def draft_and_append(i: int) -> None:
        await store.append("latency", [draft(i)])

    for i in range(WARMUP):
        await raw_put(i)
        await raw_txn(i)
        await append(i)

    raw_samples: list[float] = []
    txn_samples: list[float] = []
    append_samples: list[float] = []
    whole_samples: list[float] = []
    series = (
        (raw_put, raw_samples),
        (raw_txn, txn_samples),
        (append, append_samples),
        (draft_and_append, whole_samples),
    )
    counter = WARMUP
    for _ in range(SAMPLES):
        for operation, samples in series:
            counter += 1
            started = time.perf_counter()
            await operation(counter)
            samples.append(time.perf_counter() - started)

    async def throughput(operation_for: Callable[[int, int], Awaitable[None]], seconds: float) -> float:
        stop_at = time.perf_counter() + seconds
        done = [0] * WRITERS

        async def worker(n: int) -> None:
            i = 0
            while time.perf_counter() < stop_at:
                i += 1
                await operation_for(n, i)
                done[n] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(WRITERS)))
        return sum(done) / (time.perf_counter() - started)

    async def raw_for(n: int, i: int) -> None:
        await raw_put(n * 10_000_000 + i)

    async def append_for(n: int, i: int) -> None:
        await store.append(f"throughput-{n}", [draft(i)])

    await throughput(raw_for, ROUND_SECONDS / 4)
    await throughput(append_for, ROUND_SECONDS / 4)
    raw_rates: list[float] = []
    append_rates: list[float] = []
    for _ in range(THROUGHPUT_ROUNDS):
        raw_rates.append(await throughput(raw_for, ROUND_SECONDS))
        append_rates.append(await throughput(append_for, ROUND_SECONDS))
    await store.close()
    load = load_average()  # the last minute: the throughput rounds and the end of the latency series
    raw_rate, append_rate = statistics.median(raw_rates), statistics.median(append_rates)
    concurrent_ratio = statistics.median(a / r for a, r in zip(append_rates, raw_rates, strict=True))
    rounds = (
        f"{WRITERS} writers, one session each, single-event appends, against {WRITERS} concurrent raw "
        f"putters, {THROUGHPUT_ROUNDS} alternating rounds of {ROUND_SECONDS:g} s each"
    )

    raw_p50, append_p50 = statistics.median(raw_samples), statistics.median(append_samples)
    txn_p50 = statistics.median(txn_samples)
    whole_p50 = statistics.median(whole_samples)
    ratio = append_p50 / raw_p50
    runs = f"{SAMPLES} of each, alternating, {len(value)}-byte events; {load}"
    return [
        Figure(
            "etcd_append_overhead_ratio",
            ratio,
            "x",
            COMMAND,
            detail=f"append p50 {append_p50 * 1e3:.3f} ms / raw put p50 {raw_p50 * 1e3:.3f} ms; a raw "
            f"transaction with the append's compare and puts: p50 {txn_p50 * 1e3:.3f} ms ({runs})",
            goal="<= 1.3",
        ),
        Figure("etcd_append_p50_ms", append_p50 * 1e3, "ms", COMMAND, detail=runs),
        Figure("etcd_append_p99_ms", percentile(append_samples, 0.99) * 1e3, "ms", COMMAND, detail=runs),
        Figure("etcd_raw_put_p50_ms", raw_p50 * 1e3, "ms", COMMAND, detail=runs),
        Figure("etcd_raw_put_p99_ms", percentile(raw_samples, 0.99) * 1e3, "ms", COMMAND, detail=runs),
        Figure(
            "etcd_raw_txn_overhead_ratio",
            txn_p50 / raw_p50,
            "x",
            COMMAND,
            detail="the floor under etcd_append_overhead_ratio: a hand-built transaction with the same "
            f"compare and puts, against a raw put ({runs})",
        ),
        Figure(
            "etcd_append_with_draft_overhead_ratio",
            whole_p50 / raw_p50,
            "x",
            COMMAND,
            detail=f"making the draft (payload serialized) and appending it: p50 {whole_p50 * 1e3:.3f} ms, "
            f"against a raw put ({runs})",
        ),
        Figure(
            "etcd_concurrent_append_ratio",
            concurrent_ratio,
            "x",
            COMMAND,
            detail=f"median of each round's appends/s over raw puts/s: {_rates(append_rates)} against "
            f"{_rates(raw_rates)} ({rounds}; {load})",
            goal=">= 0.8",
        ),
        Figure(
            "etcd_append_throughput",
            append_rate,
            "events/s",
            COMMAND,
            detail=f"median round; {rounds}; raw puts side by side: {raw_rate:.0f}/s ({load})",
        ),
        Figure(
            "etcd_raw_put_throughput",
            raw_rate,
            "puts/s",
            COMMAND,
            detail=f"median round, {WRITERS} concurrent putters, {THROUGHPUT_ROUNDS} rounds of "
            f"{ROUND_SECONDS:g} s ({load})",
        ),
    ]


def _rates(rates: list[float]) -> str:
    return "/".join(f"{rate:.0f}" for rate in rates)


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def python_work_after_wake() -> Figure:
    """The same Python work (an event's stored bytes with its chain link, and the event itself, as
    an append makes them), timed back to back and right after a short sleep, the state an append's
    work runs in after its caller's await."""
    one = draft(1)
    created_at = datetime.now(UTC)
    pause = 0.0005
    chain = Chain(None)

    def work(seq: int) -> float:
        started = time.perf_counter()
        _, link = chain.stored(GENESIS, EnvelopeJson("s", created_at, None).fields(one, seq))
        build_event(
            one, seq=seq, session_id="s", created_at=created_at, idempotency_key=None, chain=link.decode()
        )
        return time.perf_counter() - started

    warm = [work(seq) for seq in range(1, SAMPLES + 1)]
    after_sleep = []
    for seq in range(1, SAMPLES + 1):
        time.sleep(pause)
        after_sleep.append(work(seq))
    warm_p50, after_p50 = statistics.median(warm), statistics.median(after_sleep)
    return Figure(
        "python_work_after_wake_ratio",
        after_p50 / warm_p50,
        "x",
        COMMAND,
        detail=f"one event's stored bytes and model: p50 {after_p50 * 1e6:.1f} us after a {pause * 1e3:g} ms "
        f"sleep, "
        f"{warm_p50 * 1e6:.1f} us back to back ({SAMPLES} of each)",
    )


async def session_bytes(store: EtcdEventStore, session_id: str) -> tuple[int, int]:
    """Bytes (keys and values) etcd holds for the session: everything under its prefix and its
    index entry; and the same for its events alone."""
    kv, _ = store._stubs()
    root = f"{store.prefix}/sessions/{session_id}/".encode()
    events = root + b"events/"
    total = event_bytes = 0
    start = root
    while True:
        page = await kv.Range(
            rpc.RangeRequest(key=start, range_end=prefix_range_end(root), limit=5000), timeout=30
        )
        for item in page.kvs:
            size = len(item.key) + len(item.value)
            total += size
            if item.key.startswith(events):
                event_bytes += size
        if not page.more:
            break
        start = page.kvs[-1].key + b"\0"
    index = await kv.Range(rpc.RangeRequest(key=store._index_key(session_id)), timeout=30)
    total += sum(len(item.key) + len(item.value) for item in index.kvs)
    return total, event_bytes


async def measure_archive(endpoint: str, s3: S3Server) -> list[Figure]:
    """A session of 10^5 events, archived with the store's defaults: what etcd holds for it before
    and after, against the goal of at most 10^4 events' worth (that many times the mean bytes of
    one stored event key and value, as measured on this session)."""
    segments = S3ArtifactStore(
        "belay-bench-segments", client=s3.client(), prefix="segments", create_bucket=True
    )
    store = EtcdEventStore([endpoint], prefix="/bench-archive", segments=segments)
    session = "archived"
    for batch in range(ARCHIVED_SESSION_EVENTS // ARCHIVE_BATCH):
        first = batch * ARCHIVE_BATCH
        await store.append(
            session, [draft(first + i) for i in range(ARCHIVE_BATCH)], idempotency_key=f"step-{batch}"
        )
    before, event_bytes = await session_bytes(store, session)
    started = time.perf_counter()
    assert len(await store.read(session)) == ARCHIVED_SESSION_EVENTS
    read_before_seconds = time.perf_counter() - started
    per_event = event_bytes / ARCHIVED_SESSION_EVENTS
    started = time.perf_counter()
    made = await store.archive(session)
    archive_seconds = time.perf_counter() - started
    after, events_after = await session_bytes(store, session)
    started = time.perf_counter()
    whole = await store.read(session)
    read_seconds = time.perf_counter() - started
    assert len(whole) == ARCHIVED_SESSION_EVENTS
    await store.close()
    goal_bytes = ARCHIVE_GOAL_EVENTS * per_event
    kept = ARCHIVED_SESSION_EVENTS - sum(s.last - s.first + 1 for s in made)
    return [
        Figure(
            "etcd_bytes_per_session_after_archive",
            after,
            "bytes",
            COMMAND,
            detail=f"a {ARCHIVED_SESSION_EVENTS}-event session ({ARCHIVE_BATCH} events an append, each "
            f"with an idempotency key): {before} bytes in etcd before archiving, {after} after "
            f"({events_after} of them its newest {kept} events, the rest its head, indexes and "
            f"{ARCHIVED_SESSION_EVENTS // ARCHIVE_BATCH} idempotency records); 10^4 events' worth is "
            f"{goal_bytes:.0f} bytes ({per_event:.0f} per stored event); {len(made)} segments of "
            f"{SEGMENT_EVENTS} events, keeping the newest {ARCHIVE_KEEP_EVENTS}, archived in "
            f"{archive_seconds:.1f} s; the whole record reads back in {read_before_seconds:.1f} s from etcd "
            f"alone, {read_seconds:.1f} s across the segments and etcd",
            goal=f"<= {goal_bytes:.0f} (10^4 events' worth)",
        ),
    ]


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="belay-bench-etcd-") as run_dir:
        server = EtcdServer(Path(run_dir), name="bench-etcd")
        s3 = S3Server(Path(run_dir) / "s3")
        server.start()
        s3.start()
        try:
            return [
                *asyncio.run(measure(server.endpoint)),
                *asyncio.run(measure_archive(server.endpoint, s3)),
                python_work_after_wake(),
            ]
        finally:
            s3.stop()
            server.stop()
