"""A provider's local stand-in (`belay.executors.standins`) as a process of its own, and what its
counters say against "each input and each tool result once, one remote session per subagent".

Two lives:

- `StandinProcess.for_session(...)`: the stand-in of one session, as a provider's service would
  be: `belay run` / `belay resume` find it by its ready file in the session's directory of the home
  (`<home>/sessions/<id>/standins/<executor>/ready.json`: pid, base URL) and reuse it while it
  answers, else start one, detached (a session of its own: a kill of `belay`, even of its whole
  process group, leaves it running). Each writes itself into the holder file beside it
  (`belay.executors.standins.holder`): the stand-in stops once its holder has been gone, with no
  request, for `STANDIN_GRACE_S` (`BELAY_STANDIN_GRACE_S`), so it outlives a kill of `belay` and a
  resume soon after, never its session by long; `belay gc` stops one whose holder is gone at once
  (`stop_orphan_standins`). A new one has no sessions, like a provider that lost them. One that
  does not answer within `ANSWER_S` (stopped, hung) is killed and replaced, so `belay` never
  hangs on it.
- `StandinProcess(...)`: one started by a test or a benchmark for its own use, in its own process
  group, dying with whoever started it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from belay.executors.endpoints import PROVIDERS, STANDIN_KEY
from belay.executors.standins.holder import holder_alive, write_holder
from belay.lifetime import die_with_parent, tie_to_parent

STANDIN_START_S = 30.0
# How long a session's stand-in outlives the last `belay` process that used it: past a kill and a
# resume soon after; once it is gone, the next resume starts a new one and reseeds the remote
# session, as after a provider lost it.
STANDIN_GRACE_S = 120.0
GRACE_ENV = "BELAY_STANDIN_GRACE_S"
ANSWER_S = 2.0  # a stand-in that does not answer a stats read in this long is taken for dead
READY_FILE = "ready.json"
HOLDER_FILE = "holder.json"


class StandinProcess:
    """`python -m <stand-in> --plan PLAN --port 0 --ready-file F` in its own process group;
    with `api_key`, the only key it accepts (else any). `detached`: not tied to this process's
    life, stopping by itself after `idle_exit_s` without a request, or, with `holder_grace_s`, once
    the process its holder file names has been gone that long."""

    def __init__(
        self,
        executor_type: str,
        plan: Path,
        directory: Path,
        api_key: str | None = None,
        *,
        detached: bool = False,
        idle_exit_s: float | None = None,
        holder_grace_s: float | None = None,
    ) -> None:
        self.variables = PROVIDERS[executor_type]
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        ready = directory / READY_FILE
        ready.unlink(missing_ok=True)
        log = (directory / "standin.log").open("ab")
        command = [sys.executable, "-m", self.variables.standin_module, "--plan", str(plan), "--port", "0"]
        if api_key is not None:
            command += ["--api-key", api_key]
        if idle_exit_s is not None:
            command += ["--idle-exit", str(idle_exit_s)]
        if holder_grace_s is not None:
            command += ["--holder-file", str(directory / HOLDER_FILE), "--holder-grace", str(holder_grace_s)]
        self.api_key = api_key or STANDIN_KEY
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [*command, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent() if tie_to_parent() and not detached else None,
        )
        self.pid = self.process.pid
        deadline = time.monotonic() + STANDIN_START_S
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the stand-in did not start; see {directory / 'standin.log'}")
            time.sleep(0.02)
        self.base_url = str(json.loads(ready.read_text())["base_url"])

    @classmethod
    def found(cls, executor_type: str, directory: Path) -> StandinProcess | None:
        """The stand-in whose ready file is in `directory`, if it is alive and answers."""
        try:
            ready = json.loads((directory / READY_FILE).read_text())
            pid, base_url = int(ready["pid"]), str(ready["base_url"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        standin = cls.__new__(cls)
        standin.variables, standin.directory, standin.api_key = (
            PROVIDERS[executor_type],
            directory,
            STANDIN_KEY,
        )
        standin.process, standin.pid, standin.base_url = None, pid, base_url
        if not standin.is_ours():
            return None
        try:
            standin.stats(timeout=ANSWER_S)
        except (OSError, ValueError):  # stopped or hung: it would hold whoever talks to it
            standin.kill()
            return None
        return standin

    @classmethod
    def for_session(cls, executor_type: str, plan: Path, directory: Path) -> StandinProcess:
        """The session's stand-in: the one running in `directory`, else a new, detached one, held
        by this process from now on. Under a lock, so that two commands started at once share one."""
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / "lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            write_holder(directory / HOLDER_FILE)
            running = cls.found(executor_type, directory)
            if running is not None:
                return running
            grace = float(os.environ.get(GRACE_ENV) or STANDIN_GRACE_S)
            started = cls(executor_type, plan, directory, detached=True, holder_grace_s=grace)
            started.process = None  # not waited for here: it outlives this process
            return started

    def is_ours(self) -> bool:
        """The pid is still the stand-in its ready file names (not a later process given it)."""
        try:
            command = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.directory / READY_FILE).encode() in command

    def environment(self) -> dict[str, str]:
        return {self.variables.base_url: self.base_url, self.variables.api_key: self.api_key}

    @property
    def origin(self) -> str:
        return self.base_url.split("/v1", 1)[0].rstrip("/")

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.origin}/_standin/stats", timeout=timeout) as answer:
            stats: dict[str, Any] = json.loads(answer.read())
        return stats

    def faults(self, timeout: float = 10.0) -> dict[str, Any]:
        """`GET /_standin/faults`: the faults armed and those served."""
        with urllib.request.urlopen(f"{self.origin}/_standin/faults", timeout=timeout) as answer:
            faults: dict[str, Any] = json.loads(answer.read())
        return faults

    def add_fault(self, fault: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /_standin/faults`: e.g. `{"kind": "delete_session"}`, every session lost."""
        request = urllib.request.Request(
            f"{self.origin}/_standin/faults",
            data=json.dumps(dict(fault)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            faults: dict[str, Any] = json.loads(answer.read())
        return faults

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.process.wait()
            return
        if not self.is_ours():
            return
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)  # a stopped one takes the SIGTERM once it goes on
        deadline = time.monotonic() + 10
        while self.is_ours() and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.is_ours():
            self._signal(signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL, as a crash would: its ready file stays, naming a process that is gone."""
        self._signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def _signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, number)  # its own process group: what it started goes too


def session_standins(home: Path) -> Iterator[tuple[str, Path]]:
    """(executor type, directory) of every session stand-in's directory in the home."""
    for directory in sorted(home.glob(f"sessions/*/standins/*/{READY_FILE}")):
        if directory.parent.name in PROVIDERS:
            yield directory.parent.name, directory.parent


def stop_session_standins(home: Path) -> None:
    """Stop every session stand-in of the home that is still running (the drill's, a test's)."""
    for executor_type, directory in session_standins(home):
        standin = StandinProcess.found(executor_type, directory)
        if standin is not None:
            standin.stop()


def stop_orphan_standins(home: Path, *, dry_run: bool = False) -> list[Path]:
    """Stop every session stand-in of the home whose holder (the `belay` process that last used
    it) is gone: no attempt talks to it any more. The directories of those stopped (with
    `dry_run`, of those that would be)."""
    stopped = []
    for executor_type, directory in session_standins(home):
        standin = StandinProcess.found(executor_type, directory)
        if standin is None or holder_alive(directory / HOLDER_FILE):
            continue
        stopped.append(directory)
        if not dry_run:
            standin.stop()
    return stopped


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
