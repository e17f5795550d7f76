"""Reading the worst plan under the size cap (belay.api.bounded_yaml): a flow list of single
digits, the most nodes a file under MAX_FILE_BYTES can hold (a million), and the largest such
list the bounds let through (MAX_NODES).

Side by side in one run: the million-node plan read as before the node bound (the pure-Python
reader with its duplicate-key and alias checks, nothing bounding what it composes) against the
same plan through `load_yaml` now (refused at the bound, from the C parser's events); and the
largest plan let through, read by the C reader against the pure-Python reader (`fast=False`,
as on a machine without libyaml).
"""

from __future__ import annotations

import contextlib
import statistics
import time

import yaml

from belay.api.bounded_yaml import MAX_FILE_BYTES, MAX_NODES, BoundedLoader, TooManyNodes, load_yaml
from bench.common import Figure

COMMAND = "python -m bench bench_yaml"
RUNS = 3


def flow_list(nodes: int) -> str:
    return "[" + "0," * (nodes - 1) + "0]"


def seconds(read: object, text: str) -> float:
    start = time.perf_counter()
    with contextlib.suppress(TooManyNodes):
        read(text)  # type: ignore[operator]
    return time.perf_counter() - start


def run() -> list[Figure]:
    worst = flow_list((MAX_FILE_BYTES - 2) // 2)
    assert len(worst) <= MAX_FILE_BYTES
    largest = flow_list(MAX_NODES - 1)  # the list is a node too

    def unbounded(text: str) -> object:
        return yaml.load(text, Loader=BoundedLoader)

    def fast(text: str) -> object:
        return load_yaml(text)

    def pure(text: str) -> object:
        return load_yaml(text, fast=False)

    before = seconds(unbounded, worst)  # about half a minute: measured once
    now = [seconds(fast, worst) for _ in range(RUNS)]
    pairs = [(seconds(fast, largest), seconds(pure, largest)) for _ in range(RUNS)]
    c_reader = statistics.median(c for c, _ in pairs)
    python_reader = statistics.median(p for _, p in pairs)
    nodes = worst.count("0")
    size = f"{len(worst):,} bytes, {nodes:,} nodes"
    return [
        Figure(
            "yaml_worst_plan_before_s",
            before,
            "s",
            COMMAND,
            f"the worst plan under the cap ({size}) read as before the node bound (pure-Python reader, "
            "duplicate keys and aliases checked, nothing bounding the nodes), once",
        ),
        Figure(
            "yaml_worst_plan_s",
            statistics.median(now),
            "s",
            COMMAND,
            f"the same plan through load_yaml now: refused past {MAX_NODES:,} nodes from the C parser's "
            f"events, median of {RUNS} ({', '.join(f'{s:.2f}' for s in now)}); before: {before:.1f} s, "
            "side by side",
        ),
        Figure(
            "yaml_largest_accepted_c_vs_python_ratio",
            c_reader / python_reader,
            "x",
            COMMAND,
            f"the largest plan the bounds let through ({len(largest):,} bytes, {MAX_NODES:,} nodes): "
            f"C reader median {c_reader:.2f} s against the pure-Python reader {python_reader:.2f} s, "
            f"{RUNS} alternating pairs ({', '.join(f'{c:.2f}/{p:.2f}' for c, p in pairs)})",
        ),
        Figure(
            "yaml_largest_accepted_s",
            c_reader,
            "s",
            COMMAND,
            f"the largest plan the bounds let through ({MAX_NODES:,} nodes), C reader, median of {RUNS}",
        ),
    ]
