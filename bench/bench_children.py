"""Child sessions in parallel on one machine: a coordinator's wall time over its longest child's.

- `children_parallel_ratio`: a coordinator (`belay run`, no cluster) starts four child sessions and
  waits for each; every child makes MODEL_CALLS scripted model calls, each of which waits its
  declared latency (`latency_s` in the plan, as a hosted model's round trip would), the children's
  latencies LATENCIES_S apart. Its wall time, from the start of `belay run COORDINATOR` to its
  end (every child ended, its deliverable collected), over that of `belay run` of the longest
  child alone, as a session of its own (goal: at most 1.3). Run one after the other the four
  would take the sum of their times; in parallel, the longest plus the coordinator's own start
  and the start of a child's process.

Each sample is a fresh home; the two sides take turns, pair by pair, the order swapped each pair;
the figure is median over median. Both sides run the same child plan and the same sandboxes
(no network), and both are timed around the whole `belay run` process.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from belay.journal.verdicts import completed, deliverables
from belay.local.cli_process import belay_command, belay_environment, read_events
from bench.common import Figure

COMMAND = "python -m bench bench_children"
COORDINATOR = "parallel-parts"
CHILDREN = ("part-1", "part-2", "part-3", "part-4")
LATENCIES_S = (4.0, 4.5, 5.0, 5.5)  # each of a child's model calls, by child
MODEL_CALLS = 2  # the calls that wait: the write and the publish of the part
PAIRS = 3
HANG_S = 300.0  # a guard against a hang, never a timing


def child_plan(name: str, latency_s: float) -> dict[str, Any]:
    actions = [
        {
            "tool": "write_file",
            "latency_s": latency_s,
            "arguments": {"path": f"out/{name}.md", "content": f"# {name}\n"},
        },
        {
            "tool": "publish_deliverable",
            "latency_s": latency_s,
            "arguments": {"path": f"out/{name}.md", "name": f"{name}.md"},
        },
    ]
    assert len(actions) == MODEL_CALLS
    step = {"id": "write", "title": f"Write {name}", "actions": actions}
    return {"subagents": {"writer": {"steps": [step]}}}


def manifest(name: str, goal: str, plan: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "request": {"goal": goal},
            "executor": {"type": "scripted", "plan": plan},
            "subagents": [{"name": "writer", "networkProfile": "none"}],
        },
    }


def write_example(directory: Path) -> tuple[Path, Path]:
    """The coordinator's manifest, and the longest child's as a session of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, latency in zip(CHILDREN, LATENCIES_S, strict=True):
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(child_plan(name, latency)))
    starts = [
        {
            "tool": "start_session",
            "arguments": {
                "name": name,
                "part": name,
                "goal": f"Write {name}.",
                "plan": f"{name}.yaml",
                "deliverable": f"{name}.md",
            },
        }
        for name in CHILDREN
    ]
    awaits = [{"tool": "await_session", "arguments": {"name": name}} for name in CHILDREN]
    steps = [
        {"id": "delegate", "title": "Start the parts", "actions": starts},
        {"id": "collect", "title": "Wait for the parts", "actions": awaits},
    ]
    (directory / "coordinator.yaml").write_text(yaml.safe_dump({"subagents": {"writer": {"steps": steps}}}))
    coordinator = directory / "coordinator-session.yaml"
    labels = {"belay.dev/objective": COORDINATOR}
    coordinator.write_text(yaml.safe_dump(manifest(COORDINATOR, "Four parts.", "coordinator.yaml", labels)))
    longest = CHILDREN[LATENCIES_S.index(max(LATENCIES_S))]
    alone = directory / "alone-session.yaml"
    alone.write_text(yaml.safe_dump(manifest(longest, f"Write {longest}.", f"{longest}.yaml")))
    return coordinator, alone


def timed_run(home: Path, session_manifest: Path, session_id: str) -> float:
    """Seconds of `belay run MANIFEST` in a fresh home, from its process start to its end."""
    started = time.perf_counter()
    ran = subprocess.run(
        belay_command(home, "run", "--quiet", str(session_manifest)),
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=belay_environment(None),
        check=False,
    )
    elapsed = time.perf_counter() - started
    if ran.returncode != 0 or not completed(read_events(home, session_id)):
        raise RuntimeError(f"belay run {session_manifest} failed: {ran.stdout}{ran.stderr}")
    return elapsed


def side(samples: list[float]) -> str:
    values = ", ".join(f"{s:.2f}" for s in samples)
    low, high = min(samples), max(samples)
    return f"median {statistics.median(samples):.2f} s (min {low:.2f}, max {high:.2f}; {values})"


def run() -> list[Figure]:
    workdir = Path(tempfile.mkdtemp(prefix="belay-bench-children-"))
    try:
        coordinator, alone = write_example(workdir / "example")
        longest = CHILDREN[LATENCIES_S.index(max(LATENCIES_S))]
        together: list[float] = []
        single: list[float] = []
        loads = [os.getloadavg()[0]]
        for index in range(PAIRS):
            order = [(together, coordinator, COORDINATOR), (single, alone, longest)]
            for samples, session_manifest, session_id in order if index % 2 == 0 else reversed(order):
                home = workdir / f"pair-{index}-{session_id}"
                samples.append(timed_run(home, session_manifest, session_id))
                if session_id == COORDINATOR:
                    collected = deliverables(read_events(home, COORDINATOR))
                    if sorted(collected) != sorted(f"{n}/{n}.md" for n in CHILDREN):
                        raise RuntimeError(f"the coordinator collected {sorted(collected)}")
            loads.append(os.getloadavg()[0])
        latencies = ", ".join(f"{s:g}" for s in LATENCIES_S)
        return [
            Figure(
                key="children_parallel_ratio",
                value=statistics.median(together) / statistics.median(single),
                unit="x",
                command=COMMAND,
                detail=(
                    f"a coordinator and four child sessions on one machine (`belay run`, SQLite record), "
                    f"each child {MODEL_CALLS} scripted model calls of a declared latency ({latencies} s "
                    f"by child; {sum(LATENCIES_S) * MODEL_CALLS:g} s in all, one after the other): the "
                    f"coordinator's `belay run`, every deliverable collected, {side(together)} vs the "
                    f"longest child ({max(LATENCIES_S) * MODEL_CALLS:g} s of model calls) run alone "
                    f"{side(single)}; {PAIRS} alternating pairs, a fresh home each; 1-min load average "
                    f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores"
                ),
                goal="<= 1.3",
            )
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
