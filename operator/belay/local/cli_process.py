"""The `belay` command line as a separate process: run to its end, or started as a process group
of its own, stopped at an exact point of its record and killed as a whole; and what its home holds
afterwards (the record's events, the tickets the ticket service filed).

A run is stopped at a point by the harness itself: given `belay.harness.attempt.FAULT_ENV`, it
SIGSTOPs right after recording the event the point names (`<type>:<key>`, see
`belay.harness.attempt.fault_key`). Every process started here dies with whoever started it (the
drill, a test run), however that ends (`belay.lifetime.die_with_parent`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from belay.harness.attempt import FAULT_ENV, fault_key
from belay.journal.events import Event
from belay.lifetime import die_with_parent, process_stopped, tie_to_parent
from belay.local.runtime import LocalHome

RUN_TIMEOUT_S = 120.0


def belay_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "belay.cli.main", "--home", str(home), *args]


def belay_environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if extra is not None:
        env.update(extra)
    return env


def start_belay(
    home: Path, *args: str, stop_after: str | None = None, environment: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = belay_environment(environment)
    if stop_after:
        env[FAULT_ENV] = stop_after
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "belay.log").open("ab")
    return subprocess.Popen(
        belay_command(home, *args),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group, killed as a whole
        # ...and it dies with whoever started it (the drill, a test run), however that ends.
        preexec_fn=die_with_parent() if tie_to_parent() else None,
    )


def run_belay(
    home: Path, *args: str, timeout: float = RUN_TIMEOUT_S, environment: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        belay_command(home, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=belay_environment(environment),
        check=False,
        preexec_fn=die_with_parent(),  # waited for here: this thread outlives it
    )


def is_stopped(pid: int) -> bool:
    return process_stopped(pid)


def kill_group(process: subprocess.Popen[bytes]) -> float:
    """SIGKILL the whole process group; returns the wall-clock time of the kill."""
    killed_at = time.time()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return killed_at


def run_until(
    home: Path,
    args: Sequence[str],
    point: str,
    timeout: float = RUN_TIMEOUT_S,
    environment: Mapping[str, str] | None = None,
) -> tuple[bool, float]:
    """Run `belay ARGS` until it records the event `point` (`<type>:<key>`), then SIGKILL its
    process group. Returns (reached, time of the kill); reached is False if it ended before."""
    process = start_belay(home, *args, stop_after=point, environment=environment)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_stopped(process.pid):
            return True, kill_group(process)
        if process.poll() is not None:
            return False, time.time()
        time.sleep(0.005)
    kill_group(process)
    raise TimeoutError(f"belay {' '.join(args)} neither reached {point} nor ended in {timeout}s")


def run_until_event(
    home: Path,
    args: Sequence[str],
    session_id: str,
    wanted: str,
    timeout: float,
    environment: Mapping[str, str] | None = None,
    when_reached: Callable[[], None] | None = None,
) -> bool:
    """Run `belay ARGS` until an event whose fault key starts with `wanted` is in the record
    (`when_reached` is called then, while the run still goes on)."""
    process = start_belay(home, *args, environment=environment)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(fault_key(e).startswith(wanted) for e in read_events(home, session_id)):
                if when_reached is not None:
                    when_reached()
                return True
            if process.poll() is not None:
                return False
            time.sleep(0.05)
        return False
    finally:
        if process.poll() is None:
            kill_group(process)


def read_events(home: Path, session_id: str) -> list[Event]:
    if not (home / "events.db").exists():
        return []

    async def read() -> list[Event]:
        store = LocalHome(home).open_event_store()
        try:
            return await store.read(session_id)
        finally:
            await store.close()

    return asyncio.run(read())


def tickets_in(home: Path, session_id: str) -> int:
    path = LocalHome(home).tickets_file(session_id)
    if not path.exists():
        return 0
    data: Any = json.loads(path.read_text() or "[]")
    tickets = data.get("tickets", data) if isinstance(data, dict) else data
    return len(tickets)
