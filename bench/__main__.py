"""`make bench`: run every bench/bench_*.py, write bench/results.json and docs/benchmarks.md.

Each module exposes `run() -> list[Figure]`. Ratios are measured side by side in one run, so a
drift in machine speed affects both sides alike. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import json
import platform
import sys
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from bench.common import Figure

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.json"
REPORT = ROOT / "docs" / "benchmarks.md"


def discover() -> list[str]:
    return sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("only", nargs="*", help="module names (bench_journal, ...); default all")
    args = parser.parse_args()
    names = args.only or discover()
    figures: dict[str, Figure] = {}
    failed: list[str] = []
    for name in names:
        print(f"== {name}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            for figure in module.run():
                figures[figure.key] = figure
                print(f"   {figure.key} = {figure.value:.4g} {figure.unit}  {figure.detail}", flush=True)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    with _locked():
        # Re-read just before writing so that two bench runs never drop each other's figures.
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results.update({key: figure.value for key, figure in figures.items()})
        RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=2) + "\n")
        write_report(figures)
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_report(fresh: dict[str, Figure]) -> None:
    """Keeps rows from earlier partial runs, replacing those measured now."""
    rows: dict[str, str] = {}
    marker = "<!-- figures -->"
    if REPORT.exists() and marker in REPORT.read_text():
        for line in REPORT.read_text().split(marker, 1)[1].splitlines():
            if line.startswith("| `"):
                rows[line.split("`")[1]] = line
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    for f in fresh.values():
        goal = f.goal or "-"
        rows[f.key] = (
            f"| `{f.key}` | {f.value:.4g} {f.unit} | {goal} | {f.detail} | `{f.command}` | {stamp} |"
        )
    intro = (
        "# Benchmarks\n\n"
        "Produced by `make bench` (`python -m bench [module ...]`), which also writes "
        "`bench/results.json`.\n"
        f"Machine: {platform.machine()}, Python {platform.python_version()}; "
        "ratios compare two things measured side by side in the same run.\n\n"
    )
    if REPORT.exists() and marker in REPORT.read_text():
        intro = REPORT.read_text().split(marker, 1)[0]  # notes written above the table are kept
    header = (
        intro + f"{marker}\n"
        "| key | value | goal | detail | command | measured |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
    )
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(header + "\n".join(rows[k] for k in sorted(rows)) + "\n")


if __name__ == "__main__":
    sys.exit(main())
