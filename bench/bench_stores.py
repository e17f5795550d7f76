"""Embedded store throughput: SQLite appends (batched and single) and the cost of `latest()`.

Each figure is the median of several timed runs on a fresh database file with the store's default
settings (WAL, synchronous=FULL: every acknowledged append is on disk).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from belay.journal.events import (
    EffectClass,
    EventDraft,
    ModelOutput,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
)
from belay.stores.sqlite import SqliteEventStore, Synchronous
from bench.common import Figure

COMMAND = "python -m bench bench_stores"
BATCH_SIZE = 100
BATCHES_PER_RUN = 100
SINGLE_APPENDS_PER_RUN = 300
RUNS = 3
WRITERS = 8


def realistic_drafts(count: int, start: int = 0) -> list[EventDraft]:
    """A turn-shaped mix: model output, tool request, tool result, a task transition."""
    drafts: list[EventDraft] = []
    for i in range(start, start + count):
        kind = i % 4
        if kind == 0:
            payload: Payload = ModelOutput(
                text=f"Reading the parser to find where quoted keys lose their escape ({i}).",
                tool_calls=(f"op-{i}",),
                input_tokens=1800 + i % 50,
                output_tokens=120,
            )
        elif kind == 1:
            payload = ToolRequest(
                operation_id=f"op-{i}",
                tool="shell",
                arguments={"command": "pytest -q tests/test_parser.py", "cwd": "/workspace"},
                effect=EffectClass.IDEMPOTENT,
                step="reproduce",
            )
        elif kind == 2:
            payload = ToolResult(operation_id=f"op-{i}", ok=True, output="3 passed, 1 failed in 0.12s\n" * 4)
        else:
            payload = Task(task_id=f"t{i % 7}", title="fix quoted keys", status=TaskStatus.RUNNING)
        drafts.append(EventDraft(payload=payload))
    return drafts


async def batched_appends_per_s(
    directory: Path, run: int, *, keyed: bool, synchronous: Synchronous = "FULL"
) -> float:
    store = SqliteEventStore(directory / f"batched-{keyed}-{synchronous}-{run}.db", synchronous=synchronous)
    batches = [realistic_drafts(BATCH_SIZE, b * BATCH_SIZE) for b in range(BATCHES_PER_RUN)]
    try:
        await store.append("warmup", batches[0])
        started = time.perf_counter()
        for number, batch in enumerate(batches):
            await store.append("session", batch, idempotency_key=f"batch-{number}" if keyed else None)
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    return BATCH_SIZE * BATCHES_PER_RUN / elapsed


async def single_appends_per_s(directory: Path, run: int, marks: bool = True) -> float:
    store = SqliteEventStore(directory / f"single-{run}-{marks}.db")
    if not marks:
        # The same fsynced commits with no high-water mark written after them: the mark's own cost.
        store._keeps_marks = False
    drafts = realistic_drafts(SINGLE_APPENDS_PER_RUN)
    try:
        await store.append("warmup", drafts[:1])
        started = time.perf_counter()
        for draft in drafts:
            await store.append("session", [draft])
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    return SINGLE_APPENDS_PER_RUN / elapsed


async def concurrent_single_appends_per_s(directory: Path, run: int, writers: int) -> float:
    """`writers` sessions appending one event at a time side by side through one store, as an
    operator or a harness with subagents does; queued appends share a commit."""
    store = SqliteEventStore(directory / f"concurrent-{run}.db")
    per_writer = SINGLE_APPENDS_PER_RUN // writers * 4
    drafts = realistic_drafts(per_writer)

    async def write(writer: int) -> None:
        for draft in drafts:
            await store.append(f"session-{writer}", [draft])

    try:
        await store.append("warmup", drafts[:1])
        started = time.perf_counter()
        await asyncio.gather(*(write(w) for w in range(writers)))
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    return writers * per_writer / elapsed


async def latest_seconds(directory: Path, history: int) -> float:
    """Median time of `latest("task")` once the session holds `history` events."""
    store = SqliteEventStore(directory / f"latest-{history}.db", synchronous="OFF")
    try:
        for start in range(0, history, 1000):
            await store.append("session", realistic_drafts(min(1000, history - start), start))
        samples = []
        for _ in range(200):
            started = time.perf_counter()
            await store.latest("session", "task")
            samples.append(time.perf_counter() - started)
    finally:
        await store.close()
    return statistics.median(samples)


async def measure() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="belay-bench-stores-") as tmp:
        directory = Path(tmp)
        load = os.getloadavg()[0]
        batched = [await batched_appends_per_s(directory, run, keyed=False) for run in range(RUNS)]
        normal = [
            await batched_appends_per_s(directory, run, keyed=False, synchronous="NORMAL")
            for run in range(RUNS)
        ]
        keyed = [await batched_appends_per_s(directory, run, keyed=True) for run in range(RUNS)]
        pairs = [
            (await single_appends_per_s(directory, run), await single_appends_per_s(directory, run, False))
            for run in range(RUNS)
        ]
        single = [with_mark for with_mark, _ in pairs]
        unmarked = [without for _, without in pairs]
        concurrent = [await concurrent_single_appends_per_s(directory, run, WRITERS) for run in range(RUNS)]
        latest_small = await latest_seconds(directory, 1_000)
        latest_large = await latest_seconds(directory, 100_000)
    events = BATCH_SIZE * BATCHES_PER_RUN
    return [
        Figure(
            key="sqlite_batched_appends_per_s",
            value=statistics.median(batched),
            unit="events/s",
            command=COMMAND,
            detail=f"batches of {BATCH_SIZE}, {events} events per run, median of {RUNS}, synchronous=FULL "
            f"(the default: fsync per commit); 1-min load average {load:.1f} on {os.cpu_count()} cores",
            goal=">= 20000",
        ),
        Figure(
            key="sqlite_batched_appends_per_s_synchronous_normal",
            value=statistics.median(normal),
            unit="events/s",
            command=COMMAND,
            detail="as above with synchronous=NORMAL (no fsync per commit: survives a process crash, "
            "may lose the last commits on power loss)",
        ),
        Figure(
            key="sqlite_batched_idempotent_appends_per_s",
            value=statistics.median(keyed),
            unit="events/s",
            command=COMMAND,
            detail="as above, each batch with an idempotency key (digest of the batch computed per append)",
        ),
        Figure(
            key="sqlite_single_appends_per_s",
            value=statistics.median(single),
            unit="events/s",
            command=COMMAND,
            detail=f"one event per append (one fsynced commit each), {SINGLE_APPENDS_PER_RUN} per run, "
            f"median of {RUNS}",
        ),
        Figure(
            key="sqlite_single_append_mark_cost_ratio",
            value=statistics.median(unmarked) / statistics.median(single),
            unit="x",
            command=COMMAND,
            detail=f"time per single durable append with the high-water mark written and fsynced after "
            f"its commit against the same appends without it: {statistics.median(single):.0f} vs "
            f"{statistics.median(unmarked):.0f} appends/s, median of {RUNS} alternating pairs "
            f"({', '.join(f'{a:.0f}/{b:.0f}' for a, b in pairs)}); 1-min load average {load:.1f}",
        ),
        Figure(
            key="sqlite_concurrent_single_appends_per_s",
            value=statistics.median(concurrent),
            unit="events/s",
            command=COMMAND,
            detail=f"{WRITERS} sessions appending one event per append side by side through one store "
            f"(group commit), median of {RUNS}; compare sqlite_single_appends_per_s",
        ),
        Figure(
            key="sqlite_latest_ratio_1e5_vs_1e3",
            value=latest_large / latest_small,
            unit="x",
            command=COMMAND,
            detail=f"latest(type) median {latest_large * 1e6:.0f} us at 10^5 events vs "
            f"{latest_small * 1e6:.0f} us at 10^3",
            goal="~1 (indexed, independent of history length)",
        ),
    ]


def run() -> list[Figure]:
    return asyncio.run(measure())
