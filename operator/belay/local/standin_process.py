"""A provider's local stand-in (`belay.executors.standins`) as a process of its own, in its own
process group, so it outlives the `belay` process groups the drill kills; and what its counters
say against "each input and each tool result once, one remote session per subagent"."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from belay.executors.endpoints import PROVIDERS, STANDIN_KEY
from belay.lifetime import die_with_parent, tie_to_parent

STANDIN_START_S = 30.0


class StandinProcess:
    """`python -m <stand-in> --plan PLAN --port 0 --ready-file F` in its own process group;
    with `api_key`, the only key it accepts (else any)."""

    def __init__(self, executor_type: str, plan: Path, directory: Path, api_key: str | None = None) -> None:
        self.variables = PROVIDERS[executor_type]
        directory.mkdir(parents=True, exist_ok=True)
        ready = directory / "standin.ready.json"
        ready.unlink(missing_ok=True)
        log = (directory / "standin.log").open("ab")
        command = [sys.executable, "-m", self.variables.standin_module, "--plan", str(plan), "--port", "0"]
        if api_key is not None:
            command += ["--api-key", api_key]
        self.api_key = api_key or STANDIN_KEY
        self.process = subprocess.Popen(
            [*command, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent() if tie_to_parent() else None,
        )
        deadline = time.monotonic() + STANDIN_START_S
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the stand-in did not start; see {directory / 'standin.log'}")
            time.sleep(0.02)
        self.base_url = str(json.loads(ready.read_text())["base_url"])

    def environment(self) -> dict[str, str]:
        return {self.variables.base_url: self.base_url, self.variables.api_key: self.api_key}

    def stats(self) -> dict[str, Any]:
        origin = self.base_url.split("/v1", 1)[0].rstrip("/")
        with urllib.request.urlopen(f"{origin}/_standin/stats", timeout=10) as answer:
            stats: dict[str, Any] = json.loads(answer.read())
        return stats

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def provider_problems(stats: Mapping[str, Any], subagents: int) -> list[str]:
    """What the stand-in's counters show against "each input and each tool result once, one
    remote session per subagent, no call answered twice"."""
    problems = []
    if stats.get("sessions_created") != subagents:
        problems.append(f"{stats.get('sessions_created')} remote sessions created for {subagents} subagents")
    for session_id, session in stats.get("sessions", {}).items():
        for given in session.get("inputs", []):
            if given.get("accepted") != 1:
                problems.append(f"{session_id}: an input accepted {given.get('accepted')} times")
        for call_id, counts in session.get("tool_results", {}).items():
            if counts.get("accepted") != 1:
                problems.append(
                    f"{session_id}: the result of {call_id} accepted {counts.get('accepted')} times"
                )
        if session.get("answered_twice"):
            problems.append(f"{session_id}: calls answered twice: {', '.join(session['answered_twice'])}")
        answered = sum(1 for c in session.get("tool_results", {}).values() if c.get("accepted") == 1)
        if answered != session.get("calls_requested"):
            problems.append(
                f"{session_id}: {session.get('calls_requested')} calls asked for, {answered} answered"
            )
    return problems


def provider_summary(stats: Mapping[str, Any]) -> str:
    results = [c for s in stats.get("sessions", {}).values() for c in s.get("tool_results", {}).values()]
    inputs = [i for s in stats.get("sessions", {}).values() for i in s.get("inputs", [])]

    def total(rows: list[Any], key: str) -> int:
        return sum(int(row.get(key, 0)) for row in rows)

    return (
        f"{stats.get('sessions_created')} remote sessions; inputs received {total(inputs, 'received')}, "
        f"accepted {total(inputs, 'accepted')}; tool results received {total(results, 'received')}, "
        f"accepted {total(results, 'accepted')}, duplicates {total(results, 'duplicates')}, "
        f"rejected {total(results, 'rejected')}"
    )
