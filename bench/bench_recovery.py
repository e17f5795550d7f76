"""Local recovery time: from the SIGKILL of a running `belay run` process group to the first event
the resumed attempt (`belay resume`, started right after the kill) writes to the record."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from belay.local.cli_process import kill_group, read_events, run_until, start_belay
from belay.local.drill import DEFAULT_MANIFEST
from bench.common import Figure

RUNS = 20
SESSION = "parser-fix"
# Between a request and its result, in the middle of the implementer's work.
KILL_POINT = "tool_request:implementer.fix.1"


def one_recovery(home: Path) -> float:
    reached, killed_at = run_until(home, ["run", "--quiet", str(DEFAULT_MANIFEST)], KILL_POINT)
    if not reached:
        raise RuntimeError(f"the run ended before {KILL_POINT}")
    last_seq = len(read_events(home, SESSION))
    resume = start_belay(home, "resume", "--quiet", SESSION)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            resumed = [e for e in read_events(home, SESSION) if e.seq > last_seq]
            if resumed:
                recovered_in = resumed[0].created_at.timestamp() - killed_at
                break
            time.sleep(0.005)
        else:
            raise TimeoutError("the resumed attempt wrote nothing within 120 s")
        # Let it finish, so it stops every sandbox it started.
        if resume.wait(timeout=300) != 0:
            raise RuntimeError(f"belay resume failed; see {home / 'belay.log'}")
        return recovered_in
    finally:
        if resume.poll() is None:
            kill_group(resume)


def run() -> list[Figure]:
    samples = []
    workdir = Path(tempfile.mkdtemp(prefix="belay-bench-recovery-"))
    try:
        for index in range(RUNS):
            samples.append(one_recovery(workdir / f"run-{index}"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return [
        Figure(
            key="recovery_local_median_s",
            value=statistics.median(samples),
            unit="s",
            command="python -m bench bench_recovery",
            detail=(
                f"median of {RUNS} runs, SIGKILL of the whole `belay run` group at {KILL_POINT} to the "
                f"first event of `belay resume` (includes its process start); "
                f"min {min(samples):.3f} s, max {max(samples):.3f} s"
            ),
        )
    ]
