"""A test run killed outright leaves nothing running: pytest runs the operator's end-to-end test in
a subprocess, is SIGKILLed midway (the operator, the control plane, the kubelet stand-in's pods and
their harness all running), and a few seconds later no process of that run is alive.

Every child a test starts gets the kernel's parent-death signal, and each pod runs in a PID
namespace of its own whose first process takes the rest with it (docs/testenv.md, "When a test run
is killed"). The processes of the run are those descending from that pytest just before the kill
(by pid and start time, so a recycled pid is not taken for one), and whatever works in or names the
run's temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from belay.lifetime import descendants, die_with_parent, process_table
from tests.api.kubehelpers import REPO_ROOT
from tests.cli.test_interrupted import Process, lies_in, still_alive
from tests.testenv.polling import settle, wait_until

pytestmark = [pytest.mark.testenv, pytest.mark.slow]

SUITE = "tests/controller/test_operator.py"  # the operator end-to-end suite
MIDWAY_TIMEOUT_S = 600.0  # a guard against a hang, never a timing assertion
SETTLE_S = 15.0  # "a few seconds": the kernel delivers the parent-death signals on its own time


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_of(pid: int, base: Path) -> set[Process]:
    table = process_table()
    found = {p for p in descendants(pid) if p in table}
    found |= {p for p in table if lies_in(p, base)}
    found.discard(os.getpid())
    return {Process(p, table[p][1]) for p in found if p in table}


def midway(pid: int) -> bool:
    """The operator runs, and so does a harness pod's process under the kubelet stand-in."""
    lines = [command_line(p) for p in descendants(pid)]
    operator = any("belay.controller" in line and "harness_pod" not in line for line in lines)
    harness = any("belay.controller.harness_pod" in line for line in lines)
    return operator and harness


def test_a_sigkilled_test_run_leaves_no_process_of_it(tmp_path: Path) -> None:
    base = tmp_path / "run"
    log = (tmp_path / "pytest.log").open("wb")
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", SUITE, "-x", "-q", "-p", "no:cacheprovider", f"--basetemp={base}"],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )
    try:
        wait_until(
            lambda: midway(run.pid),
            "the end-to-end test to get midway",
            timeout=MIDWAY_TIMEOUT_S,
            interval=0.1,
            while_running=run,
            describe=lambda: (tmp_path / "pytest.log").read_text()[-4000:],
        )
        before = processes_of(run.pid, base)
        os.kill(run.pid, signal.SIGKILL)  # pytest alone, as a CI time-out would
        run.wait()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        log.close()
    assert len(before) > 3, f"too few processes to tell: {before}"

    left = settle(
        lambda: still_alive(before) | {p for p in processes_of(run.pid, base) if p.pid != run.pid},
        until=lambda left: not left,
        timeout=SETTLE_S,
    )
    named = {p.pid: command_line(p.pid)[:200] for p in left}
    for process in left:  # this test started them: it does not leave them running
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    assert not left, f"alive {SETTLE_S:g}s after pytest was killed: {named}"
