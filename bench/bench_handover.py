"""A live session moved to another executor: how much longer `belay resume --executor B` takes to
start the new attempt than a plain `belay resume` on the executor the session ran on.

- `handover_resume_ratio`: the parser-review example (examples/parser-review) run on the
  self-hosted executor, its `belay run` process group SIGKILLed at KILL_POINT, then resumed on the
  OpenAI Agents executor (`belay resume SESSION --executor openai-agents --model gpt-5`, which
  checks the model against the session's local stand-in's rule, starts the stand-in beside the
  attempt, and seeds a new remote session from the record) against a
  plain `belay resume SESSION` after the same kill; median over median (goal: at most 1.5).
- `handover_resume_ratio_openai_agents_to_self_hosted`: the other direction, the same example run
  on the OpenAI Agents executor, resumed with `--executor self-hosted` against a plain resume
  there (which finds the stand-in `belay run` left running and reuses the remote session).

Each sample is one fresh home: `belay run` to the kill point, then one `belay resume`, timed from
just before its process starts to the `created_at` of the `harness_started` event its attempt
records (the first event of the new attempt; `--executor` also records the move before it). The
process start, the CLI's checks (the model checked as the stand-in's Models API would answer),
the attempt's open of the record and whatever of the stand-in's start it waits for all count.
The resume runs to its end (the session must complete) before the record is read, so nothing
polls the record while it is timed. The two sides
of a direction take turns, pair by pair, the order swapped each pair. No provider is configured
(NO_PROVIDER): `belay` uses the session's local stand-in, as `belay run` does on a laptop.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event, ExecutorChange, Lifecycle, LifecycleKind
from belay.journal.verdicts import completed
from belay.local.cli_process import kill_group, read_events, run_until, start_belay
from belay.local.drill.manifest import DRILL_MODELS, manifest_for
from belay.local.standin_process import stop_session_standins
from bench.common import Figure

COMMAND = "python -m bench bench_handover"
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "parser-review" / "session.yaml"
SESSION = "parser-review"
# The second tool result after the first verified step: a step under way, one of its calls
# settled, one step verified before it (the point tests/executors/test_resume_by_hand.py kills at).
KILL_POINT = "tool_result:repository-reviewer.reproduce.1"
PAIRS = 7
HANG_S = 300.0  # a guard against a hang, never a timing
# Nothing configured: `belay` uses the session's local stand-in, never a key of the environment.
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
DIRECTIONS = (
    ("handover_resume_ratio", "self-hosted", "openai-agents"),
    ("handover_resume_ratio_openai_agents_to_self_hosted", "openai-agents", "self-hosted"),
)


def manifest(directory: Path, executor: str) -> Path:
    """The example on `executor`, its paths absolute."""
    data = manifest_for(yaml.safe_load(EXAMPLE.read_text()), EXAMPLE, executor)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def move_to(target: str | None) -> list[str]:
    if target is None:
        return []
    return ["--executor", target] + (["--model", DRILL_MODELS[target]] if target in DRILL_MODELS else [])


def new_attempt_started(events: list[Event], after_seq: int) -> Event:
    return next(
        e
        for e in events
        if e.seq > after_seq
        and isinstance(e.payload, Lifecycle)
        and e.payload.kind == LifecycleKind.HARNESS_STARTED
    )


def one_resume(home: Path, session_manifest: Path, target: str | None) -> tuple[float, float | None]:
    """Seconds from the start of `belay resume` (moved to `target`, or not) to its attempt's
    harness_started, after a kill of `belay run` at KILL_POINT in a fresh home; and, when moved,
    to the executor change it records first (the CLI's checks done)."""
    try:
        run = ["run", "--quiet", str(session_manifest)]
        reached, _ = run_until(home, run, KILL_POINT, timeout=HANG_S, environment=NO_PROVIDER)
        if not reached:
            raise RuntimeError(f"the run ended before {KILL_POINT}; see {home / 'belay.log'}")
        last_seq = read_events(home, SESSION)[-1].seq
        started = time.time()
        resume = start_belay(home, "resume", "--quiet", SESSION, *move_to(target), environment=NO_PROVIDER)
        try:
            code = resume.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            kill_group(resume)
            raise
        events = read_events(home, SESSION)
        if code != 0 or not completed(events):
            raise RuntimeError(f"belay resume {' '.join(move_to(target))} failed; see {home / 'belay.log'}")
        moved = [e for e in events if isinstance(e.payload, ExecutorChange)]
        if bool(moved) != (target is not None):
            raise RuntimeError(f"the record holds {len(moved)} executor changes after a resume to {target}")
        first = new_attempt_started(events, last_seq).created_at.timestamp() - started
        return first, moved[0].created_at.timestamp() - started if moved else None
    finally:
        stop_session_standins(home)


def side(samples: list[float]) -> str:
    values = ", ".join(f"{s:.3f}" for s in samples)
    low, high = min(samples), max(samples)
    return f"median {statistics.median(samples):.3f} s (min {low:.3f}, max {high:.3f}; {values})"


def direction(workdir: Path, key: str, source: str, target: str) -> Figure:
    session_manifest = manifest(workdir / "manifest", source)
    one_resume(workdir / "warm-up", session_manifest, target)  # imports and caches, untimed
    same: list[float] = []
    other: list[float] = []
    changes: list[float] = []
    loads = [os.getloadavg()[0]]
    standin = ", the stand-in's model rule" if target in DRILL_MODELS else ""
    for index in range(PAIRS):
        order = [(same, None), (other, target)]
        for samples, moved in order if index % 2 == 0 else reversed(order):
            first, change = one_resume(workdir / f"pair-{index}-{moved or 'same'}", session_manifest, moved)
            samples.append(first)
            if change is not None:
                changes.append(change)
        loads.append(os.getloadavg()[0])
    return Figure(
        key=key,
        value=statistics.median(other) / statistics.median(same),
        unit="x",
        command=COMMAND,
        detail=(
            f"parser-review run on {source}, `belay run` SIGKILLed at {KILL_POINT}, then `belay resume` "
            f"timed from its process start to its attempt's harness_started, {PAIRS} alternating pairs "
            f"(a fresh home each, the order swapped each pair): `--executor {target}` "
            f"{side(other)}, of which {statistics.median(changes):.3f} s (median) to the executor change "
            f"it records first (process start, the CLI's checks{standin}) vs on {source} {side(same)}; "
            f"local stand-ins, no provider configured; 1-min load average {min(loads):.1f} to "
            f"{max(loads):.1f} on {os.cpu_count()} cores"
        ),
        goal="<= 1.5",
    )


def run() -> list[Figure]:
    workdir = Path(tempfile.mkdtemp(prefix="belay-bench-handover-"))
    try:
        return [direction(workdir / key, key, source, target) for key, source, target in DIRECTIONS]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
