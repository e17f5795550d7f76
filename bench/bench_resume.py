"""Resuming a session at any history length, and against LangGraph's checkpointer.

- `resume_ratio_1e6_vs_1e3`: median CPU time for a new harness attempt to open the home's stores
  and fold the session's state (`Attempt.state`: the latest usable snapshot plus the events after
  it) at 10^6 events over the same at 10^3, measured in alternation in one run (goal: at most 2).
- `brief_peak_mib_1e6`: peak RSS of `belay brief` as a whole process on the home holding the
  10^6-event session (goal: at most 200 MiB).
- `resume_vs_langgraph_ratio_1e4`: the same resume at 10^4 steps over LangGraph's `get_state` on
  a thread of the same 10^4 steps in its SQLite checkpointer (a new connection and compiled graph
  each time, as a new process would), median CPU times in alternation (goal: at most 1).
- `step_persist_vs_langgraph_ratio_1e4`: what the harness persists per step at 10^4 steps (the
  model output and tool request in one append, the tool result in another, then the incremental
  fold, which writes a snapshot when one is due) over what LangGraph spends per step of the same
  thread (the node's update and its checkpoint, written before the next step: `durability="sync"`),
  wall clock, so that both sides' fsyncs count (goal: under 0.1).

The resume figures are CPU time of this process (every thread's): on a shared machine the wall
clock also counts the time other processes held the cores, and Belay's reads hop to a reader
thread that waits for a core each time. The detail gives the wall-clock medians too.

A step is one turn of `bench.bench_journal.synthetic_drafts`: model output, tool request, tool
result, and now and then a plan step, note, artifact, checkpoint, approval, wait or summary. The
LangGraph thread holds the same payloads, one message each, appended by a node that runs once per
step. Both stores are SQLite files in WAL mode with their default synchronous=FULL.

The sessions are recorded as a harness attempt records them (appends under its lease, the attempt
folding after each append of at most APPEND_BATCH events and writing a snapshot when one is due),
once per run, in a temporary home. Each ends UNFOLDED_TAIL events (half the snapshot interval, the
mean for an attempt stopped at any point) after its latest snapshot, so the 10^3 and the 10^6
sessions differ only in the history behind that snapshot. LangGraph's thread gets its first
STEPS - 1 steps as one input (writing them one checkpoint at a time costs O(steps^2), minutes here,
and leaves the same latest checkpoint, the one `get_state` reads); its later steps run through the
graph one at a time.

LangGraph is installed for this benchmark only: `pip install -e '.[bench]'` (`make bench` does it).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import operator
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from belay.api.agentsession import AgentSession, parse_manifest
from belay.harness.attempt import Attempt
from belay.journal.events import EventDraft, ModelOutput, ToolResult
from belay.journal.snapshots import SNAPSHOT_EVERY
from belay.journal.state import SessionState
from belay.local.runtime import LocalHome
from belay.stores.sqlite import SqliteEventStore, Synchronous
from bench.bench_journal import synthetic_drafts
from bench.common import Figure

COMMAND = "python -m bench bench_resume"
BIG, SMALL = 1_000_000, 1_000
STEPS = 10_000
APPEND_BATCH = 100  # events per append while recording; the attempt folds after each
# Events at the end of each session that no snapshot covers yet: half the interval between two
# snapshots, the mean for an attempt stopped at any point.
UNFOLDED_TAIL = SNAPSHOT_EVERY // 2
RESUME_RUNS = 21
BRIEF_RUNS = 3  # one process each, at each size
PERSIST_ROUNDS = 7
BELAY_STEPS_PER_ROUND = 150  # about 450 events: a round of rounds writes a few snapshots
LANGGRAPH_STEPS_PER_ROUND = 6
INSTALL_HINT = "LangGraph is not installed: pip install -e '.[bench]' (make bench installs it)"


def manifest(session_id: str) -> AgentSession:
    return parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": session_id},
            "spec": {
                "request": {"goal": "Port the billing service to the new ledger API"},
                "executor": {"type": "scripted", "plan": "plan.yaml"},
                "subagents": [{"name": "researcher"}, {"name": "implementer"}],
            },
        }
    )


def steps_of(drafts: Iterable[EventDraft]) -> Iterator[list[EventDraft]]:
    """The drafts a turn at a time: a step starts at each model output (the session's opening
    events belong to the first)."""
    step: list[EventDraft] = []
    for draft in drafts:
        if isinstance(draft.payload, ModelOutput) and any(isinstance(d.payload, ModelOutput) for d in step):
            yield step
            step = []
        step.append(draft)
    if step:
        yield step


def turns(count: int) -> list[list[EventDraft]]:
    """The first `count` steps of a long synthetic session."""
    return list(itertools.islice(steps_of(synthetic_drafts(10 * count + 10)), count))


class Recorder:
    """A harness attempt holding a session's lease: it appends and folds as the harness does."""

    def __init__(self, home: LocalHome, session_id: str, synchronous: Synchronous = "FULL") -> None:
        self.store = SqliteEventStore(home.events_db, synchronous=synchronous)
        self.attempt = Attempt(
            session=manifest(session_id), store=self.store, artifacts=home.open_artifact_store()
        )
        self.session_id = session_id

    async def __aenter__(self) -> Recorder:
        await self.attempt.acquire()
        await self.attempt.state()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.attempt.release()
        await self.store.close()

    async def append(self, drafts: list[EventDraft]) -> None:
        await self.store.append(self.session_id, drafts, lease=self.attempt.lease)

    async def step(self, drafts: list[EventDraft]) -> None:
        """One step as the harness persists it: what the model said and the requests it made in
        one append, the result in another, then the fold (and a snapshot when one is due)."""
        split = next((i for i, d in enumerate(drafts) if isinstance(d.payload, ToolResult)), len(drafts))
        for part in (drafts[:split], drafts[split:]):
            if part:
                await self.attempt.record([d.payload for d in part], subagent=drafts[0].actor.subagent)
        await self.attempt.state()


async def record_session(home: LocalHome, session_id: str, drafts: Iterable[EventDraft], total: int) -> None:
    """Record a session of `total` events in batches, folding after each and snapshotting when
    due; the latest snapshot covers all but the last UNFOLDED_TAIL events, appended by an attempt
    that stopped before its next snapshot was due."""
    pending = iter(drafts)
    async with Recorder(home, session_id, synchronous="NORMAL") as recorder:
        attempt = recorder.attempt
        state, appended = await attempt.state(), 0
        while appended < total - UNFOLDED_TAIL:
            batch = list(itertools.islice(pending, min(APPEND_BATCH, total - UNFOLDED_TAIL - appended)))
            await recorder.append(batch)
            appended += len(batch)
            state = await attempt.state()
        if attempt.artifacts is not None and attempt._snapshot_covers < state.last_seq:
            await attempt._write_snapshot(state, attempt.artifacts)  # the one that was due here
        await recorder.append(list(pending))


async def resume(home: LocalHome, session_id: str) -> SessionState:
    """What a new harness attempt does first: open the stores and fold the session's state."""
    store = home.open_event_store()
    try:
        attempt = Attempt(session=manifest(session_id), store=store, artifacts=home.open_artifact_store())
        return await attempt.state()
    finally:
        await store.close()


def spread(samples: list[tuple[float, float]]) -> str:
    """CPU median with its interquartile range, and the wall-clock median, in milliseconds."""
    cpu = [c for c, _ in samples]
    q1, _, q3 = statistics.quantiles(cpu, n=4)
    wall = statistics.median(w for _, w in samples)
    median = statistics.median(cpu)
    return f"{median * 1e3:.2f} ms CPU (IQR {q1 * 1e3:.2f}-{q3 * 1e3:.2f}; wall {wall * 1e3:.2f})"


def cpu_median(samples: list[tuple[float, float]]) -> float:
    return statistics.median(c for c, _ in samples)


def load_average() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def tail_of(home: LocalHome, session_id: str) -> tuple[int, int]:
    """The events after the latest snapshot, and the whole record's length."""
    state = await resume(home, session_id)
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    try:
        loaded = await load_state(store, home.open_artifact_store(), session_id)
    finally:
        await store.close()
    return state.last_seq - loaded.snapshot_covers, state.last_seq


# --------------------------------------------------------------------------------------------------
# belay brief, as a whole process


# Starts `belay brief` from a small process of its own: on Linux a child's peak RSS starts at the
# peak of the process it was exec'd from (and wait4 reports that), so started from this one, which
# holds the sessions' generators and LangGraph, it would report this one's peak instead of its own.
LAUNCHER = """
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * scale, time.perf_counter() - start)
"""


def brief_peak(home: LocalHome, session_id: str) -> tuple[float, float]:
    """Peak RSS (MiB) and wall seconds of one `belay brief` process."""
    belay = Path(sys.executable).with_name("belay")
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(belay), "--home", str(home.root), "brief", session_id],
        capture_output=True,
        text=True,
        check=True,
    )
    code, peak, wall = launched.stdout.split()
    if code != "0":
        raise RuntimeError(f"belay brief {session_id} failed: {launched.stderr.strip()}")
    return int(peak) / 2**20, float(wall)


# --------------------------------------------------------------------------------------------------
# LangGraph: the same steps in a thread of its SQLite checkpointer


class ThreadState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    step: int
    until: int


def langgraph_available() -> bool:
    try:
        return importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    except ImportError:  # no langgraph at all
        return False


class LangGraphThread:
    """One thread whose node appends a step's messages and loops until `until` steps."""

    CONFIG: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 10**6}

    def __init__(self, path: Path, steps: list[list[EventDraft]]) -> None:
        from langgraph.graph import END, START, StateGraph

        self.path = path
        self.messages = [[draft.model_dump(mode="json") for draft in step] for step in steps]
        self.node_starts: list[float] = []

        def turn(state: ThreadState) -> dict[str, Any]:
            self.node_starts.append(time.perf_counter())
            return {"messages": self.messages[state["step"]], "step": state["step"] + 1}

        def route(state: ThreadState) -> str:
            return END if state["step"] >= state["until"] else "turn"

        builder = StateGraph(ThreadState)
        builder.add_node("turn", turn)
        builder.add_edge(START, "turn")
        builder.add_conditional_edges("turn", route)
        self.builder = builder

    def _run(self, values: dict[str, Any]) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        with sqlite3.connect(self.path, check_same_thread=False) as connection:
            graph = self.builder.compile(checkpointer=SqliteSaver(connection))
            graph.invoke(values, self.CONFIG, durability="sync")
        connection.close()

    def prefill(self, steps: int) -> None:
        """The first `steps - 1` steps' messages as one input, then the last step through the node."""
        self._run(
            {
                "messages": [m for step in self.messages[: steps - 1] for m in step],
                "step": steps - 1,
                "until": steps,
            }
        )

    def steps(self, until: int) -> list[float]:
        """Run the thread on to `until` steps; the seconds from each node's start to the next's."""
        self.node_starts = []
        self._run({"until": until})
        return [b - a for a, b in itertools.pairwise(self.node_starts)]

    def get_state(self) -> Any:
        """What a new process does to resume the thread: connect, compile, read the latest."""
        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(self.path, check_same_thread=False)
        try:
            return self.builder.compile(checkpointer=SqliteSaver(connection)).get_state(self.CONFIG)
        finally:
            connection.close()


# --------------------------------------------------------------------------------------------------


async def alternate(runs: int, *timed: Callable[[], Any]) -> list[list[tuple[float, float]]]:
    """(CPU seconds, wall seconds) of each callable (sync or async), run in alternation. The CPU
    time is this process's, every thread's included: on a shared machine the wall clock also
    counts the time other processes held the cores."""
    samples: list[list[tuple[float, float]]] = [[] for _ in timed]
    for _ in range(runs):
        for fn, out in zip(timed, samples, strict=True):
            cpu, wall = time.process_time(), time.perf_counter()
            result = fn()
            if asyncio.iscoroutine(result):
                await result
            out.append((time.process_time() - cpu, time.perf_counter() - wall))
    return samples


async def measure() -> list[Figure]:
    if not langgraph_available():
        raise RuntimeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="belay-bench-resume-") as tmp:
        home = LocalHome(Path(tmp) / "home")
        thread_steps = turns(STEPS + PERSIST_ROUNDS * BELAY_STEPS_PER_ROUND + 1)
        started = time.perf_counter()
        await record_session(home, "resume-1e3", synthetic_drafts(SMALL), SMALL)
        await record_session(home, "resume-1e6", synthetic_drafts(BIG), BIG)
        thread_drafts = [d for step in thread_steps[:STEPS] for d in step]
        await record_session(home, "steps-1e4", thread_drafts, len(thread_drafts))
        recorded = time.perf_counter() - started
        tails = {sid: await tail_of(home, sid) for sid in ("resume-1e3", "resume-1e6", "steps-1e4")}

        # Resume at 10^6 events against 10^3.
        await alternate(3, lambda: resume(home, "resume-1e3"), lambda: resume(home, "resume-1e6"))
        small, big = await alternate(
            RESUME_RUNS, lambda: resume(home, "resume-1e3"), lambda: resume(home, "resume-1e6")
        )
        load_resume = load_average()

        # belay brief as a whole process.
        briefs = {
            "resume-1e3": [brief_peak(home, "resume-1e3") for _ in range(BRIEF_RUNS)],
            "resume-1e6": [brief_peak(home, "resume-1e6") for _ in range(BRIEF_RUNS)],
        }
        peak_mib = {sid: statistics.median(p for p, _ in runs) for sid, runs in briefs.items()}
        brief_wall = {sid: statistics.median(w for _, w in runs) for sid, runs in briefs.items()}
        load_brief = load_average()

        # Against LangGraph at 10^4 steps: resume, then the cost of each further step.
        thread = LangGraphThread(Path(tmp) / "langgraph.db", thread_steps)
        started = time.perf_counter()
        thread.prefill(STEPS)
        prefilled = time.perf_counter() - started
        messages = len(thread.get_state().values["messages"])
        await alternate(3, lambda: resume(home, "steps-1e4"), thread.get_state)
        belay_resume, langgraph_resume = await alternate(
            RESUME_RUNS, lambda: resume(home, "steps-1e4"), thread.get_state
        )
        load_langgraph = load_average()

        belay_step, langgraph_step = [], []
        next_belay, next_langgraph = STEPS, STEPS
        async with Recorder(home, "steps-1e4") as recorder:
            for _ in range(PERSIST_ROUNDS):
                started = time.perf_counter()
                for step in thread_steps[next_belay : next_belay + BELAY_STEPS_PER_ROUND]:
                    await recorder.step(step)
                belay_step.append((time.perf_counter() - started) / BELAY_STEPS_PER_ROUND)
                next_belay += BELAY_STEPS_PER_ROUND
                next_langgraph += LANGGRAPH_STEPS_PER_ROUND
                langgraph_step.append(statistics.mean(thread.steps(next_langgraph)))
        load_persist = load_average()

    belay_step_m, langgraph_step_m = statistics.median(belay_step), statistics.median(langgraph_step)
    setup = f"sessions recorded in {recorded:.0f} s"
    return [
        Figure(
            key="resume_ratio_1e6_vs_1e3",
            value=cpu_median(big) / cpu_median(small),
            unit="x",
            command=COMMAND,
            detail=(
                f"a new attempt's open of the home's stores + Attempt.state, median of {RESUME_RUNS} "
                f"alternating runs: {spread(big)} at {tails['resume-1e6'][1]} events vs {spread(small)} at "
                f"{tails['resume-1e3'][1]}; each the latest snapshot plus the {UNFOLDED_TAIL} events after "
                f"it (snapshots every {SNAPSHOT_EVERY} events, as the harness writes them); {setup}; "
                f"{load_resume}"
            ),
            goal="<= 2",
        ),
        Figure(
            key="brief_peak_mib_1e6",
            value=peak_mib["resume-1e6"],
            unit="MiB",
            command=COMMAND,
            detail=(
                f"`belay --home HOME brief SESSION`, one process per run: peak RSS "
                f"{peak_mib['resume-1e6']:.0f} MiB, {brief_wall['resume-1e6']:.1f} s wall at "
                f"{tails['resume-1e6'][1]} events (median of {BRIEF_RUNS}); "
                f"{peak_mib['resume-1e3']:.0f} MiB, "
                f"{brief_wall['resume-1e3']:.1f} s at {tails['resume-1e3'][1]} (median of {BRIEF_RUNS}); "
                f"{load_brief}"
            ),
            goal="<= 200",
        ),
        Figure(
            key="resume_vs_langgraph_ratio_1e4",
            value=cpu_median(belay_resume) / cpu_median(langgraph_resume),
            unit="x",
            command=COMMAND,
            detail=(
                f"{STEPS} steps, median of {RESUME_RUNS} alternating runs: Belay open + Attempt.state "
                f"{spread(belay_resume)} ({tails['steps-1e4'][1]} events, {tails['steps-1e4'][0]} after "
                f"the latest snapshot) vs LangGraph {version('langgraph')} connect + compile + get_state "
                f"{spread(langgraph_resume)} ({messages} messages, SqliteSaver "
                f"{version('langgraph-checkpoint-sqlite')}; "
                f"its first {STEPS - 1} steps given as one input, in {prefilled:.0f} s); {load_langgraph}"
            ),
            goal="<= 1",
        ),
        Figure(
            key="step_persist_vs_langgraph_ratio_1e4",
            value=belay_step_m / langgraph_step_m,
            unit="x",
            command=COMMAND,
            detail=(
                f"wall clock per step from {STEPS} steps on, median of {PERSIST_ROUNDS} alternating rounds: "
                f"Belay {belay_step_m * 1e3:.2f} ms (two appends and the fold, snapshots included, mean of "
                f"{BELAY_STEPS_PER_ROUND} steps a round; rounds {min(belay_step) * 1e3:.2f}-"
                f"{max(belay_step) * 1e3:.2f} ms) vs LangGraph {langgraph_step_m * 1e3:.1f} ms (node "
                f"start to node start, durability=sync, {LANGGRAPH_STEPS_PER_ROUND} steps a round; "
                f"rounds {min(langgraph_step) * 1e3:.1f}-{max(langgraph_step) * 1e3:.1f} ms); "
                f"{load_persist}"
            ),
            goal="< 0.1",
        ),
    ]


def version(package: str) -> str:
    from importlib.metadata import version as installed

    return installed(package)


def run() -> list[Figure]:
    return asyncio.run(measure())
