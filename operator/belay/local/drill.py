"""The interruption drill: interrupt a short session on purpose and check the resumed one.

Each scenario runs `belay` as a separate process group in a fresh home, stops the harness at an
exact point of its record (the harness SIGSTOPs itself right after recording the chosen event, see
`belay.harness.attempt.FAULT_ENV`), SIGKILLs the whole group, and resumes with `belay resume`. The
checks read only the record, the artifact store and the ticket service's file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from belay.harness.attempt import FAULT_ENV, fault_key
from belay.journal.events import (
    CheckpointEvent,
    Event,
    LifecycleEvent,
    OperationOutcomeEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.local.runtime import LocalHome

DEFAULT_MANIFEST = Path(__file__).resolve().parents[3] / "examples" / "parser-fix" / "session.yaml"
RUN_TIMEOUT_S = 120.0


class DrillCheck(BaseModel):
    name: str
    passed: bool
    detail: str


class DrillReport(BaseModel):
    passed: bool
    checks: list[DrillCheck]


# --------------------------------------------------------------------------------------------------
# Running `belay` as a process group, and stopping it at a point of its record


def belay_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "belay.cli.main", "--home", str(home), *args]


def start_belay(home: Path, *args: str, stop_after: str | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
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
    )


def run_belay(home: Path, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    return subprocess.run(
        belay_command(home, *args), capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def is_stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def kill_group(process: subprocess.Popen[bytes]) -> float:
    """SIGKILL the whole process group; returns the wall-clock time of the kill."""
    killed_at = time.time()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return killed_at


def run_until(
    home: Path, args: Sequence[str], point: str, timeout: float = RUN_TIMEOUT_S
) -> tuple[bool, float]:
    """Run `belay ARGS` until it records the event `point` (`<type>:<key>`), then SIGKILL its
    process group. Returns (reached, time of the kill); reached is False if it ended before."""
    process = start_belay(home, *args, stop_after=point)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_stopped(process.pid):
            return True, kill_group(process)
        if process.poll() is not None:
            return False, time.time()
        time.sleep(0.005)
    kill_group(process)
    raise TimeoutError(f"belay {' '.join(args)} neither reached {point} nor ended in {timeout}s")


def run_until_event(home: Path, args: Sequence[str], session_id: str, wanted: str, timeout: float) -> bool:
    """Run `belay ARGS` until an event whose fault key starts with `wanted` is in the record."""
    process = start_belay(home, *args)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(fault_key(e).startswith(wanted) for e in read_events(home, session_id)):
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


# --------------------------------------------------------------------------------------------------
# What the record must show


def interruption_points(events: Sequence[Event]) -> list[str]:
    """Every step boundary (checkpoint) and every gap between a tool request and its result."""
    return [
        fault_key(e)
        for e in events
        if isinstance(e, ToolRequestEvent)
        or (isinstance(e, CheckpointEvent) and not e.payload.checkpoint_id.endswith("/inputs"))
    ]


def steps_run_twice(events: Sequence[Event]) -> list[str]:
    """Steps completed more than once, and operations requested or answered more than once."""
    done = Counter(
        e.payload.task_id
        for e in events
        if isinstance(e, TaskEvent) and "/" in e.payload.task_id and e.payload.status in ("done", "verified")
    )
    requests = Counter(e.payload.operation_id for e in events if isinstance(e, ToolRequestEvent))
    results = Counter(e.payload.operation_id for e in events if isinstance(e, ToolResultEvent))
    return sorted(
        [f"step {k} completed {n} times" for k, n in done.items() if n > 1]
        + [f"{k} requested {n} times" for k, n in requests.items() if n > 1]
        + [f"{k} answered {n} times" for k, n in results.items() if n > 1]
    )


def deliverables(events: Sequence[Event]) -> dict[str, str]:
    return {
        e.payload.name: e.payload.ref.sha256
        for e in events
        if e.type == "artifact" and getattr(e.payload, "deliverable", False)
    }


def completed(events: Sequence[Event]) -> bool:
    return any(isinstance(e, LifecycleEvent) and e.payload.kind == "session_completed" for e in events)


def attempts(events: Sequence[Event]) -> int:
    return max((e.actor.attempt for e in events), default=0)


# --------------------------------------------------------------------------------------------------
# The scenarios


class Drill:
    def __init__(self, manifest: Path, workdir: Path, progress: bool) -> None:
        self.manifest = manifest.resolve()
        self.workdir = workdir / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        self.progress = progress
        self.checks: list[DrillCheck] = []
        self.session_id = str(yaml.safe_load(self.manifest.read_text())["metadata"]["name"])

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append(DrillCheck(name=name, passed=bool(passed), detail=detail))
        if self.progress:
            print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", file=sys.stderr, flush=True)
        return bool(passed)

    def home(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self) -> DrillReport:
        reference = self.uninterrupted()
        if reference:
            self.kill_after_tool_request(reference)
            self.unknown_external_outcome(reference)
            self.undeclared_state(reference)
        return DrillReport(passed=all(c.passed for c in self.checks), checks=self.checks)

    def uninterrupted(self) -> list[Event] | None:
        home = self.home("reference")
        result = run_belay(home, "run", "--quiet", str(self.manifest))
        events = read_events(home, self.session_id)
        ok = result.returncode == 0 and completed(events)
        detail = f"{len(events)} events, deliverables {sorted(deliverables(events))}"
        if not ok:
            detail = f"exit {result.returncode}: {(result.stderr or result.stdout)[-400:]}"
        return events if self.check("uninterrupted run completes", ok, detail) else None

    def kill_after_tool_request(self, reference: list[Event]) -> None:
        verified = {
            e.payload.subagent
            for e in reference
            if isinstance(e, CheckpointEvent) and e.payload.verified and e.payload.subagent
        }
        candidates = [
            e
            for e in reference
            if isinstance(e, ToolRequestEvent)
            and e.payload.tool in ("write_file", "run_command")
            and e.payload.subagent in verified
            and any(
                isinstance(c, CheckpointEvent)
                and c.payload.verified
                and c.payload.subagent == e.payload.subagent
                for c in reference
                if c.seq < e.seq
            )
        ]
        if not self.check(
            "a sandbox tool request after a verified checkpoint",
            bool(candidates),
            f"kill point {fault_key(candidates[0])}" if candidates else "the session has none to interrupt",
        ):
            return
        point = fault_key(candidates[0])
        home = self.home("kill-after-request")
        reached, _ = run_until(home, ["run", "--quiet", str(self.manifest)], point)
        before = read_events(home, self.session_id)
        self.check(
            "SIGKILL right after a tool request; the request is in the record outside the sandbox",
            reached and bool(before) and fault_key(before[-1]) == point,
            f"killed at {point}; the record (in {home / 'events.db'}) ends with seq {len(before)}",
        )
        result = run_belay(home, "resume", "--quiet", self.session_id)
        after = read_events(home, self.session_id)
        resumed = [e for e in after if e.seq > len(before)]
        replaced = [
            e for e in resumed if isinstance(e, LifecycleEvent) and e.payload.kind == "sandbox_replaced"
        ]
        subagents = {
            e.payload.subagent for e in resumed if isinstance(e, LifecycleEvent) and e.payload.subagent
        }
        self.check(
            "every sandbox replaced with a clean one",
            len(replaced) == len(subagents) and len(replaced) > 0,
            "; ".join(e.payload.detail for e in replaced if e.payload.subagent)
            or "no sandbox_replaced event",
        )
        restored = [e for e in resumed if isinstance(e, LifecycleEvent) and e.payload.kind == "restored"]
        expected = {
            sub: [
                c.payload.checkpoint_id
                for c in before
                if isinstance(c, CheckpointEvent) and c.payload.subagent == sub and c.payload.verified
            ]
            for sub in subagents
        }
        from_last_verified = all(
            not expected.get(e.payload.subagent or "")
            or e.payload.checkpoint_id == expected[e.payload.subagent or ""][-1]
            for e in restored
        )
        self.check(
            "declared artifacts restored from the last verified checkpoint and verification re-run",
            bool(restored) and from_last_verified,
            "; ".join(
                f"{e.payload.subagent}: {e.payload.checkpoint_id} ({e.payload.detail})" for e in restored
            ),
        )
        twice = steps_run_twice(after)
        self.check("no completed step ran twice", not twice, ", ".join(twice) or "each step completed once")
        same = deliverables(after) == deliverables(reference)
        self.check(
            "the resumed session completes with the same deliverables",
            result.returncode == 0 and completed(after) and same,
            f"exit {result.returncode}; {deliverables(after)}",
        )

    def unknown_external_outcome(self, reference: list[Event]) -> None:
        unsafe = [e for e in reference if isinstance(e, ToolRequestEvent) and e.payload.effect == "unsafe"]
        if not self.check(
            "the session has an unsafe external operation",
            bool(unsafe),
            f"{unsafe[0].payload.tool} ({unsafe[0].payload.operation_id})" if unsafe else "none to interrupt",
        ):
            return
        request = unsafe[0]
        op = request.payload.operation_id
        home = self.home("unknown-outcome")
        reached, _ = run_until(home, ["run", "--quiet", str(self.manifest)], fault_key(request))
        # The external system cannot be asked: its outcome stays unknown.
        waiting = run_until_event(
            home,
            ["resume", "--quiet", "--no-ticket-service", self.session_id],
            self.session_id,
            f"wait:reconcile-{op}",
            RUN_TIMEOUT_S,
        )
        events = read_events(home, self.session_id)
        unknown = [
            e for e in events if isinstance(e, OperationOutcomeEvent) and e.payload.outcome == "unknown"
        ]
        requests = [e for e in events if isinstance(e, ToolRequestEvent) and e.payload.operation_id == op]
        results = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == op]
        brief = run_belay(home, "brief", self.session_id)
        self.check(
            "an unknown external outcome is shown for reconciliation, not repeated",
            reached
            and waiting
            and bool(unknown)
            and len(requests) == 1
            and not results
            and tickets_in(home, self.session_id) == 0
            and op in brief.stdout,
            f"{op}: outcome unknown, waits on the user (reconcile-{op}); requests {len(requests)}, "
            f"results {len(results)}, tickets {tickets_in(home, self.session_id)}",
        )
        answer = run_belay(home, "reject", self.session_id, f"reconcile-{op}", "-m", "no ticket exists")
        result = run_belay(home, "resume", "--quiet", self.session_id)
        events = read_events(home, self.session_id)
        self.check(
            "after the user reconciles it, the session completes with exactly one ticket",
            answer.returncode == 0 and result.returncode == 0 and tickets_in(home, self.session_id) == 1,
            f"tickets {tickets_in(home, self.session_id)}, exit {result.returncode}",
        )

    def undeclared_state(self, reference: list[Event]) -> None:
        manifest = yaml.safe_load(self.manifest.read_text())
        for sub in manifest["spec"]["subagents"]:
            sub["declared"] = []  # nothing the work produced survives a sandbox replacement
        executor = manifest["spec"]["executor"]
        if executor.get("plan"):
            executor["plan"] = str((self.manifest.parent / executor["plan"]).resolve())
        for sub in manifest["spec"]["subagents"]:
            for item in sub.get("inputs", []):
                item["source"] = str((self.manifest.parent / item["source"]).resolve())
        home = self.home("undeclared-state")
        copy = home / "session-undeclared.yaml"
        copy.write_text(yaml.safe_dump(manifest, sort_keys=False))
        verified = [
            e
            for e in reference
            if isinstance(e, CheckpointEvent)
            and e.payload.verified
            and not e.payload.checkpoint_id.endswith("/inputs")
        ]
        # The first verified checkpoint whose verification looks at the workspace, then the next
        # request of the same subagent: a restore from it needs what the work produced.
        later = [
            e
            for e in reference
            if isinstance(e, ToolRequestEvent)
            and verified
            and e.seq > verified[0].seq
            and e.payload.subagent == verified[0].payload.subagent
        ]
        if not self.check(
            "a verified checkpoint followed by more work",
            bool(later),
            f"kill point {fault_key(later[0])}" if later else "no work follows a verified checkpoint",
        ):
            return
        reached, _ = run_until(home, ["run", "--quiet", str(copy)], fault_key(later[0]))
        result = run_belay(home, "resume", "--quiet", self.session_id)
        events = read_events(home, self.session_id)
        failed = [
            e
            for e in events
            if isinstance(e, LifecycleEvent)
            and e.payload.kind == "recovery_failed"
            and e.payload.reason == "UndeclaredState"
        ]
        brief = run_belay(home, "brief", self.session_id)
        self.check(
            "a recovery that needs an undeclared file fails visibly (RecoveryFailed UndeclaredState)",
            reached and result.returncode != 0 and bool(failed) and "UndeclaredState" in brief.stdout,
            failed[0].payload.detail if failed else f"exit {result.returncode}: {result.stderr[-300:]}",
        )


def run_drill(manifest: Path, workdir: Path, *, progress: bool = True) -> DrillReport:
    return Drill(manifest, workdir, progress).run()


__all__ = [
    "DEFAULT_MANIFEST",
    "DrillReport",
    "interruption_points",
    "run_drill",
    "run_until",
    "steps_run_twice",
]
