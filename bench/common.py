"""What every benchmark returns: named figures, each with the command that produced it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    key: str  # flat key in bench/results.json
    value: float
    unit: str
    command: str  # what a reader runs to reproduce it
    detail: str = ""  # the side-by-side numbers behind a ratio, run counts, sizes
    goal: str = ""  # e.g. "<= 2", ">= 20000"


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def median_seconds_async(fn: Callable[[], Awaitable[object]], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
