"""One run of the drill: the session prepared for its executor, a fresh home per scenario, the checks
and kill points found so far, and the two steps every scenario takes: kill a run at a point of its
record, and resume it.

A managed executor runs on its local stand-in exactly as a person's `belay run` does: nothing is
configured (the provider's variables are blanked, so a real key is never used), `belay run` starts
the session's stand-in in the home and `belay resume` finds it there (`belay.local.standin_process`);
the drill kills the `belay` process group only, and reads the stand-in's counters where it finds it."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import yaml

from belay.api.agentsession import MANAGED_EXECUTORS, read_manifest
from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event
from belay.journal.verdicts import deliverables
from belay.local.cli_process import read_events
from belay.local.drill.manifest import (
    executor_kind,
    executor_version,
    handover_refusal,
    manifest_for,
    move_options,
)
from belay.local.drill.report import (
    BeforeAfter,
    DrillCheck,
    DrillReport,
    KillPoint,
    SeqRange,
    SkippedScenario,
)
from belay.local.drill.waiting import Stalled, Watched, run_watched
from belay.local.runtime import LocalHome
from belay.local.standin_process import StandinProcess, stop_session_standins


class Resumed(NamedTuple):
    result: Watched  # `stalled` says what it waited on when the drill had to stop it
    events: list[Event]  # the whole record after the resume
    seconds: float  # wall time of the `belay resume`


class SessionStandins:
    """The stand-in `belay` started for the drill's session in each home, found as `belay resume`
    finds it."""

    def __init__(self, executor: str, session_id: str) -> None:
        self.executor, self.session_id = executor, session_id
        self.homes: set[Path] = set()

    def __getitem__(self, home: Path) -> StandinProcess:
        directory = LocalHome(home).standin_dir(self.session_id, self.executor)
        found = StandinProcess.found(self.executor, directory)
        if found is None:
            raise LookupError(f"no {self.executor} stand-in is running in {directory}")
        return found

    def stop(self) -> None:
        for home in self.homes:
            stop_session_standins(home)


def executor_label(executor: str) -> str:
    # Where a stand-in answers, the report says so: its scripted plan decided, no model did.
    local = ", on its local stand-in (scripted plan)" if executor in MANAGED_EXECUTORS else ""
    return executor_version(executor) + local


class Drill:
    def __init__(
        self,
        manifest: Path,
        workdir: Path,
        progress: bool,
        executor: str | None = None,
        handover_to: str | None = None,
        answer_waits: bool = False,
    ) -> None:
        source = manifest.resolve()
        original = read_manifest(source)  # read as every manifest is: bounded, no key twice
        self.executor = executor or executor_kind(original)
        refusal = handover_refusal(self.executor, handover_to)
        if refusal:
            raise ValueError(refusal)
        self.managed = self.executor in MANAGED_EXECUTORS
        # With a handover, each interrupted run is resumed on `handover_to` (the reference runs on
        # `executor` alone); `moved` holds the homes whose session was moved already.
        self.handover_to = handover_to
        self.moved: set[Path] = set()
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
        # Whether the drill answers, as a person would, the waits that decide nothing (`waiting`).
        self.answer_waits = answer_waits
        self.answered: list[str] = []
        self.checks: list[DrillCheck] = []
        self.skipped: list[SkippedScenario] = []
        self.points: list[KillPoint] = []
        self.children: list[str] = []  # the child sessions the reference run started
        self.pages: list[BeforeAfter] = []
        self.differing: list[str] = []  # "<scenario>: <session>: <deliverable> ...", for the verdict
        self.reference_run_s: float | None = None
        self.reference_events: int | None = None
        self.session_id = str(self.data["metadata"]["name"])
        self.standins = SessionStandins(self.executor, self.session_id)
        self.target_standins = SessionStandins(handover_to or self.executor, self.session_id)
        self.executor_label = executor_label(self.executor)
        if handover_to:
            self.executor_label += f", handed over to {executor_label(handover_to)}"
        self.subagents = len(self.data["spec"]["subagents"])

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append(DrillCheck(name=name, passed=bool(passed), detail=detail))
        if self.progress:
            print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", file=sys.stderr, flush=True)
        return bool(passed)

    def skip(self, scenario: str, reason: str) -> None:
        if self.children:  # a coordinator: the work it could be interrupted in is its children's
            reason += (
                f"; the work is done by its child sessions ({', '.join(self.children)}): the drill "
                "interrupts them instead"
            )
        self.skipped.append(SkippedScenario(scenario=scenario, reason=reason))
        if self.progress:
            print(f"SKIP {scenario}: {reason}", file=sys.stderr, flush=True)

    def home(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def environment(self, home: Path) -> dict[str, str] | None:
        """What `belay` runs with in this home: for a managed executor, no provider configured,
        so that `belay` uses the session's local stand-in, never a real key."""
        involved = {self.executor, self.handover_to} & set(MANAGED_EXECUTORS)
        if not involved:
            return None
        self.standins.homes.add(home)
        # Every provider blanked: a handover reaches a second executor, whose key must not be used either.
        return {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}

    def kill_run_at(
        self, home: Path, env: dict[str, str] | None, point: str, manifest: Path | None = None
    ) -> tuple[bool, list[Event]]:
        """`belay run` in `home`, its process group killed right after it records `point`: whether
        it got there, and the record then."""
        run = ["run", "--quiet", str(manifest or self.manifest)]
        result = self.watch(home, run, env, stop_after=point)
        if result.stalled:
            raise Stalled(f"before it reached {point}, {result.stalled}")
        return result.reached, read_events(home, self.session_id)

    def watch(
        self,
        home: Path,
        args: list[str],
        env: dict[str, str] | None,
        stop_after: str | None = None,
        kill_when: tuple[str, str] | None = None,
    ) -> Watched:
        """`belay ARGS` in `home`, watched (`belay.local.drill.waiting`); the waits the drill
        answered are kept for the report."""
        result = run_watched(
            home,
            args,
            self.session_id,
            environment=env,
            stop_after=stop_after,
            kill_when=kill_when,
            answer_waits=self.answer_waits,
        )
        self.answered += [f"{home.name}: {command}" for command in result.answered]
        return result

    def resume_args(self, home: Path, *options: str) -> list[str]:
        """`resume SESSION`, with the move to the handover's executor on the first resume in `home`
        (later ones go on where the record says the session is)."""
        move = []
        if self.handover_to and home not in self.moved:
            self.moved.add(home)
            move = move_options(self.handover_to)
        return ["resume", "--quiet", *options, self.session_id, *move]

    def resume(self, home: Path, env: dict[str, str] | None) -> Resumed:
        started = time.monotonic()
        result = self.watch(home, self.resume_args(home), env)
        seconds = time.monotonic() - started
        return Resumed(result, read_events(home, self.session_id), seconds)

    def same_deliverables(self, reference: Sequence[Event], after: Sequence[Event], scenario: str) -> bool:
        """Whether a resumed run delivered what the reference did; each deliverable that differs is
        kept for the verdict. Across a handover, the manifest's deliverables: a provider's own
        outputs (a managed stand-in's remote notes, published when a turn did every call the first
        time) belong to the executor that ran, not to the work."""
        named = {str(sub["deliverable"]) for sub in self.data["spec"]["subagents"] if sub.get("deliverable")}

        def of_the_work(events: Sequence[Event]) -> dict[str, str]:
            found = deliverables(events)
            return {n: sha for n, sha in found.items() if n in named} if self.handover_to else found

        now, then = of_the_work(after), of_the_work(reference)
        differ = [
            f"{self.session_id}: {name} missing"
            if name not in now
            else f"{self.session_id}: {name} differs (sha256 {now[name][:12]}, reference {sha256[:12]})"
            for name, sha256 in sorted(then.items())
            if now.get(name) != sha256
        ]
        self.differing += [f"{scenario}: {d}" for d in differ]
        return not differ and now.keys() == then.keys()

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
                executor=self.executor_label,
                expected=expected,
                observed=observed,
                passed=passed,
                resume_s=round(resume_s, 2),
            )
        )

    def stop_standins(self) -> None:
        self.standins.stop()

    def report(self) -> DrillReport:
        return DrillReport(
            passed=all(c.passed for c in self.checks),
            checks=self.checks,
            skipped=self.skipped,
            executor=self.executor_label,
            handover_to=self.handover_to,
            points=self.points,
            reference_run_s=self.reference_run_s,
            reference_events=self.reference_events,
            pages=self.pages,
            answered=self.answered,
            differing=self.differing,
        )
