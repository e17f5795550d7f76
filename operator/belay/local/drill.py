"""The interruption drill: interrupt a short session on purpose and check the resumed one.

Each scenario runs `belay` as a separate process group in a fresh home, stops the harness at an
exact point of its record (the harness SIGSTOPs itself right after recording the chosen event, see
`belay.harness.attempt.FAULT_ENV`), SIGKILLs the whole group, and resumes with `belay resume`. The
checks read only the record, the artifact store and the ticket service's file.

The same checks run on every executor (`--executor`): `self-hosted` runs the manifest's plan as a
scripted model; a managed executor (`openai-agents`, `anthropic-managed`) runs against its local
stand-in, one per scenario, started outside the killed process group so the provider outlives the
adapter. For a managed executor the drill also kills the adapter between a tool's recorded result
and its delivery, and checks with the stand-in's counters that the provider saw each input and
each tool result once, and with the record that the remote session is the same before and after.
Each kill point is reported with the record's seq range, the deliverables' hashes, the model,
harness and executor versions, and the transition expected and observed.
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
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from belay.api.agentsession import MANAGED_EXECUTORS, SELF_HOSTED_EXECUTORS
from belay.harness.attempt import FAULT_ENV, HARNESS_VERSION, fault_key
from belay.journal.events import (
    CheckpointEvent,
    Event,
    LifecycleEvent,
    OperationOutcomeEvent,
    RemoteEvent,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.lifetime import die_with_parent, tie_to_parent
from belay.local.runtime import LocalHome

DEFAULT_MANIFEST = Path(__file__).resolve().parents[3] / "examples" / "parser-fix" / "session.yaml"
RUN_TIMEOUT_S = 120.0
STANDIN_START_S = 30.0
EXECUTORS = ("self-hosted", *MANAGED_EXECUTORS)
# The model a managed executor names when the drill moves a manifest to it from another type; the
# stand-in does not read it.
DRILL_MODELS = {"openai-agents": "gpt-5", "anthropic-managed": "claude-sonnet-4-5"}


class DrillCheck(BaseModel):
    name: str
    passed: bool
    detail: str


class SeqRange(BaseModel):
    first: int
    last: int


class KillPoint(BaseModel):
    """One place the drill killed the process group, and what the record shows of it."""

    scenario: str
    point: str  # the event (`<type>:<key>`) the harness recorded right before the kill
    killed_at_seq: int
    record_before: SeqRange  # the record when the group was killed
    record_after: SeqRange | None  # what the resumed attempts recorded
    artifacts: dict[str, str]  # deliverable name -> sha256, after the resume
    models: list[str]  # the model ids the record names
    harness_versions: list[str]
    executor: str  # the executor type and its client's version
    expected: str
    observed: str
    passed: bool
    resume_s: float  # wall time of the `belay resume` that ends the scenario


class DrillReport(BaseModel):
    passed: bool
    checks: list[DrillCheck]
    executor: str = "self-hosted"
    points: list[KillPoint] = Field(default_factory=list)
    # The uninterrupted run: its wall time (`belay run` from start to exit) and its record's size.
    reference_run_s: float | None = None
    reference_events: int | None = None


# --------------------------------------------------------------------------------------------------
# Running `belay` as a process group, and stopping it at a point of its record


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
) -> bool:
    """Run `belay ARGS` until an event whose fault key starts with `wanted` is in the record."""
    process = start_belay(home, *args, environment=environment)
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
# A provider's stand-in, outliving the process groups the drill kills


class StandinProcess:
    """`python -m <stand-in> --plan PLAN --port 0 --ready-file F` in its own process group;
    with `api_key`, the only key it accepts (else any)."""

    def __init__(self, executor_type: str, plan: Path, directory: Path, api_key: str | None = None) -> None:
        from belay.executors.endpoints import PROVIDERS, STANDIN_KEY

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


def remote_sessions(events: Sequence[Event]) -> dict[str, str]:
    """Subagent -> the remote session the record holds for it."""
    return {
        e.payload.subagent: e.payload.remote_session_id
        for e in events
        if isinstance(e, RemoteEvent) and e.payload.kind == "session"
    }


def deliveries(events: Sequence[Event], operation_id: str) -> list[RemoteEvent]:
    return [
        e
        for e in events
        if isinstance(e, RemoteEvent)
        and e.payload.kind == "result_delivered"
        and e.payload.operation_id == operation_id
    ]


# --------------------------------------------------------------------------------------------------
# The scenarios


def executor_kind(manifest: Mapping[str, Any]) -> str:
    executor_type = str(manifest["spec"]["executor"]["type"])
    return "self-hosted" if executor_type in SELF_HOSTED_EXECUTORS else executor_type


def manifest_for(manifest: Mapping[str, Any], source: Path, executor: str) -> dict[str, Any]:
    """The manifest with paths made absolute and `executor` deciding: `self-hosted` runs the plan
    as a scripted model; a managed executor asks its stand-in, whose remote agent follows it."""
    copy: dict[str, Any] = json.loads(json.dumps(manifest))
    spec = copy["spec"]
    plan = spec["executor"].get("plan")
    if plan:
        plan = str((source.parent / plan).resolve())
    own = executor_kind(manifest)
    if executor != own:
        if not plan:
            raise ValueError(f"the manifest has no executor.plan to run on the {executor} executor")
        if executor == "self-hosted":
            spec["executor"] = {"type": "scripted", "plan": plan}
        else:
            spec["executor"] = {"type": executor, "model": DRILL_MODELS[executor], "plan": plan}
    elif plan:
        spec["executor"]["plan"] = plan
    for sub in spec["subagents"]:
        for item in sub.get("inputs", []):
            item["source"] = str((source.parent / item["source"]).resolve())
    return copy


def executor_version(executor: str) -> str:
    from importlib.metadata import version

    if executor == "openai-agents":
        return f"openai-agents (openai {version('openai')})"
    if executor == "anthropic-managed":
        return f"anthropic-managed (anthropic {version('anthropic')})"
    return f"self-hosted ({HARNESS_VERSION})"


class Drill:
    def __init__(self, manifest: Path, workdir: Path, progress: bool, executor: str | None = None) -> None:
        source = manifest.resolve()
        original = yaml.safe_load(source.read_text())
        self.executor = executor or executor_kind(original)
        self.managed = self.executor in MANAGED_EXECUTORS
        self.workdir = workdir / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data = manifest_for(original, source, self.executor)
        self.manifest = self.workdir / f"session-{self.executor}.yaml"
        self.manifest.write_text(yaml.safe_dump(self.data, sort_keys=False))
        if self.managed and not self.data["spec"]["executor"].get("plan"):
            raise ValueError(
                f"{manifest}: the drill runs {self.executor} on its stand-in: give executor.plan"
            )
        self.plan = Path(self.data["spec"]["executor"].get("plan") or "")
        self.progress = progress
        self.checks: list[DrillCheck] = []
        self.points: list[KillPoint] = []
        self.standins: dict[Path, StandinProcess] = {}
        self.reference_run_s: float | None = None
        self.reference_events: int | None = None
        self.session_id = str(self.data["metadata"]["name"])
        self.subagents = len(self.data["spec"]["subagents"])

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append(DrillCheck(name=name, passed=bool(passed), detail=detail))
        if self.progress:
            print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", file=sys.stderr, flush=True)
        return bool(passed)

    def home(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def environment(self, home: Path) -> dict[str, str] | None:
        """What `belay` runs with in this home: a managed executor's stand-in, never a real key."""
        if not self.managed:
            return None
        if home not in self.standins:
            self.standins[home] = StandinProcess(self.executor, self.plan, home / "standin")
        return self.standins[home].environment()

    def run(self) -> DrillReport:
        try:
            reference = self.uninterrupted()
            if reference:
                self.kill_after_tool_request(reference)
                if self.managed:
                    self.kill_before_delivery(reference)
                self.unknown_external_outcome(reference)
                self.undeclared_state(reference)
        finally:
            for standin in self.standins.values():
                standin.stop()
        return DrillReport(
            passed=all(c.passed for c in self.checks),
            checks=self.checks,
            executor=executor_version(self.executor),
            points=self.points,
            reference_run_s=self.reference_run_s,
            reference_events=self.reference_events,
        )

    def report_point(
        self,
        scenario: str,
        point: str,
        before: Sequence[Event],
        after: Sequence[Event],
        expected: str,
        observed: str,
        passed: bool,
        resume_s: float,
    ) -> None:
        last_before = before[-1].seq if before else 0
        resumed = [e for e in after if e.seq > last_before]
        self.points.append(
            KillPoint(
                scenario=scenario,
                point=point,
                killed_at_seq=last_before,
                record_before=SeqRange(first=before[0].seq if before else 0, last=last_before),
                record_after=SeqRange(first=resumed[0].seq, last=resumed[-1].seq) if resumed else None,
                artifacts=deliverables(after),
                models=sorted({e.actor.model_id for e in after if e.actor.model_id}),
                harness_versions=sorted({e.actor.harness_version for e in after if e.actor.harness_version}),
                executor=executor_version(self.executor),
                expected=expected,
                observed=observed,
                passed=passed,
                resume_s=round(resume_s, 2),
            )
        )

    def uninterrupted(self) -> list[Event] | None:
        home = self.home("reference")
        env = self.environment(home)
        started = time.monotonic()
        result = run_belay(home, "run", "--quiet", str(self.manifest), environment=env)
        self.reference_run_s = round(time.monotonic() - started, 2)
        events = read_events(home, self.session_id)
        self.reference_events = len(events)
        ok = result.returncode == 0 and completed(events)
        detail = f"{len(events)} events, deliverables {sorted(deliverables(events))}"
        if not ok:
            detail = f"exit {result.returncode}: {(result.stderr or result.stdout)[-400:]}"
        if not self.check("uninterrupted run completes", ok, detail):
            return None
        if self.managed:
            stats = self.standins[home].stats()
            problems = provider_problems(stats, self.subagents)
            self.check(
                "the provider saw each input and each tool result once (uninterrupted)",
                not problems,
                "; ".join(problems) or provider_summary(stats),
            )
        return events

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
        env = self.environment(home)
        reached, _ = run_until(home, ["run", "--quiet", str(self.manifest)], point, environment=env)
        before = read_events(home, self.session_id)
        self.check(
            "SIGKILL right after a tool request; the request is in the record outside the sandbox",
            reached and bool(before) and fault_key(before[-1]) == point,
            f"killed at {point}; the record (in {home / 'events.db'}) ends with seq {len(before)}",
        )
        started = time.monotonic()
        result = run_belay(home, "resume", "--quiet", self.session_id, environment=env)
        resumed_s = time.monotonic() - started
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
        done = result.returncode == 0 and completed(after) and same
        self.check(
            "the resumed session completes with the same deliverables",
            done,
            f"exit {result.returncode}; {deliverables(after)}",
        )
        operation = candidates[0].payload.operation_id
        reran = [e for e in resumed if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation]
        observed = (
            f"attempt {attempts(after)} ran {operation} again ({candidates[0].payload.effect.value}) on a "
            f"restored sandbox: result at seq {reran[0].seq if reran else '-'}; "
            f"{'completed' if completed(after) else 'not completed'}"
        )
        passed = done and len(reran) == 1 and not twice
        if self.managed:
            passed = self.managed_checks(home, before, after, operation) and passed
        self.report_point(
            "kill after a tool request",
            point,
            before,
            after,
            f"{operation} runs again by its effect class on a restored sandbox, once; the session completes "
            "with the same deliverables",
            observed,
            passed,
            resumed_s,
        )

    def managed_checks(
        self, home: Path, before: Sequence[Event], after: Sequence[Event], operation: str
    ) -> bool:
        """After a kill and a resume: the provider saw each input and result once, the remote
        session is the one the record held before the kill, and the operation's result went out
        once."""
        stats = self.standins[home].stats()
        problems = provider_problems(stats, self.subagents)
        once = self.check(
            "the provider saw each input and each tool result once",
            not problems,
            "; ".join(problems) or provider_summary(stats),
        )
        held, now = remote_sessions(before), remote_sessions(after)
        same = self.check(
            "the remote session id is the same before and after",
            bool(held) and held.items() <= now.items() and len(now) == self.subagents,
            f"before the kill {held}, after the resume {now}",
        )
        sent = deliveries(after, operation)
        delivered = self.check(
            f"the result of {operation} was delivered once",
            len(sent) == 1,
            "; ".join(f"seq {e.seq} attempt {e.actor.attempt} key {e.payload.idempotency_key}" for e in sent)
            or "never delivered",
        )
        return once and same and delivered

    def kill_before_delivery(self, reference: list[Event]) -> None:
        """Kill the adapter between a tool's recorded result and its delivery to the provider."""
        results = [
            e
            for e in reference
            if isinstance(e, ToolResultEvent)
            and any(
                isinstance(r, ToolRequestEvent)
                and r.payload.operation_id == e.payload.operation_id
                and r.payload.tool == "run_command"
                for r in reference
            )
            and deliveries(reference, e.payload.operation_id)
        ]
        if not self.check(
            "a sandbox tool result delivered to the provider",
            bool(results),
            f"kill point {fault_key(results[0])}" if results else "the session has no run_command result",
        ):
            return
        target = results[0]
        point, operation = fault_key(target), target.payload.operation_id
        home = self.home("kill-before-delivery")
        env = self.environment(home)
        reached, _ = run_until(home, ["run", "--quiet", str(self.manifest)], point, environment=env)
        before = read_events(home, self.session_id)
        undelivered = reached and bool(before) and fault_key(before[-1]) == point
        self.check(
            "SIGKILL between a tool's recorded result and its delivery to the provider",
            undelivered and not deliveries(before, operation),
            f"killed at {point}; the record ends with seq {len(before)}; nothing delivered",
        )
        started = time.monotonic()
        result = run_belay(home, "resume", "--quiet", self.session_id, environment=env)
        resumed_s = time.monotonic() - started
        after = read_events(home, self.session_id)
        done = result.returncode == 0 and completed(after) and deliverables(after) == deliverables(reference)
        self.check(
            "the resumed session delivers the result and completes with the same deliverables",
            done,
            f"exit {result.returncode}; {deliverables(after)}",
        )
        provider_ok = self.managed_checks(home, before, after, operation)
        reran = [e for e in after if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation]
        self.check(
            "the tool did not run again",
            len(reran) == 1,
            f"{len(reran)} results recorded for {operation}",
        )
        sent = deliveries(after, operation)
        observed = (
            f"attempt {sent[0].actor.attempt} delivered the result recorded at seq {target.seq} under key "
            f"{sent[0].payload.idempotency_key}"
            if sent
            else "never delivered"
        )
        self.report_point(
            "kill between a tool result and its delivery",
            point,
            before,
            after,
            f"the result of {operation}, recorded before the kill, is delivered once by the next attempt "
            "under its record-derived key; the tool does not run again; the same remote session completes",
            observed,
            done and provider_ok and len(reran) == 1,
            resumed_s,
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
        env = self.environment(home)
        reached, _ = run_until(
            home, ["run", "--quiet", str(self.manifest)], fault_key(request), environment=env
        )
        before = read_events(home, self.session_id)
        # The external system cannot be asked: its outcome stays unknown.
        waiting = run_until_event(
            home,
            ["resume", "--quiet", "--no-ticket-service", self.session_id],
            self.session_id,
            f"wait:reconcile-{op}",
            RUN_TIMEOUT_S,
            environment=env,
        )
        events = read_events(home, self.session_id)
        unknown = [
            e for e in events if isinstance(e, OperationOutcomeEvent) and e.payload.outcome == "unknown"
        ]
        requests = [e for e in events if isinstance(e, ToolRequestEvent) and e.payload.operation_id == op]
        results = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == op]
        brief = run_belay(home, "brief", self.session_id)
        shown = self.check(
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
        started = time.monotonic()
        result = run_belay(home, "resume", "--quiet", self.session_id, environment=env)
        resumed_s = time.monotonic() - started
        after = read_events(home, self.session_id)
        one = self.check(
            "after the user reconciles it, the session completes with exactly one ticket",
            answer.returncode == 0 and result.returncode == 0 and tickets_in(home, self.session_id) == 1,
            f"tickets {tickets_in(home, self.session_id)}, exit {result.returncode}",
        )
        passed = shown and one
        if self.managed:
            passed = self.managed_checks(home, before, after, op) and passed
        self.report_point(
            "kill after an unsafe request",
            fault_key(request),
            before,
            after,
            f"{op} is never repeated blindly: its outcome is unknown until a person reconciles it; "
            "rejected, it runs once and the session completes with one ticket",
            f"outcome unknown and waiting: {bool(unknown) and waiting}; tickets after the reconciliation "
            f"{tickets_in(home, self.session_id)}; {'completed' if completed(after) else 'not completed'}",
            passed,
            resumed_s,
        )

    def undeclared_state(self, reference: list[Event]) -> None:
        manifest = json.loads(json.dumps(self.data))
        for sub in manifest["spec"]["subagents"]:
            sub["declared"] = []  # nothing the work produced survives a sandbox replacement
        home = self.home("undeclared-state")
        env = self.environment(home)
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
        reached, _ = run_until(home, ["run", "--quiet", str(copy)], fault_key(later[0]), environment=env)
        before = read_events(home, self.session_id)
        started = time.monotonic()
        result = run_belay(home, "resume", "--quiet", self.session_id, environment=env)
        resumed_s = time.monotonic() - started
        events = read_events(home, self.session_id)
        failed = [
            e
            for e in events
            if isinstance(e, LifecycleEvent)
            and e.payload.kind == "recovery_failed"
            and e.payload.reason == "UndeclaredState"
        ]
        brief = run_belay(home, "brief", self.session_id)
        passed = self.check(
            "a recovery that needs an undeclared file fails visibly (RecoveryFailed UndeclaredState)",
            reached and result.returncode != 0 and bool(failed) and "UndeclaredState" in brief.stdout,
            failed[0].payload.detail if failed else f"exit {result.returncode}: {result.stderr[-300:]}",
        )
        self.report_point(
            "kill after a verified checkpoint, nothing declared",
            fault_key(later[0]),
            before,
            events,
            "the restore cannot reproduce the verified checkpoint: RecoveryFailed (UndeclaredState), visibly",
            failed[0].payload.detail if failed else f"no recovery_failed event; exit {result.returncode}",
            passed,
            resumed_s,
        )


def run_drill(
    manifest: Path, workdir: Path, *, progress: bool = True, executor: str | None = None
) -> DrillReport:
    return Drill(manifest, workdir, progress, executor).run()


__all__ = [
    "DEFAULT_MANIFEST",
    "EXECUTORS",
    "DrillReport",
    "interruption_points",
    "run_drill",
    "run_until",
    "steps_run_twice",
]
