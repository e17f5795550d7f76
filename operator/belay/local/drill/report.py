"""What the drill reports: each check, and each place it killed the process group."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DrillCheck(BaseModel):
    name: str
    passed: bool
    detail: str


class SkippedScenario(BaseModel):
    """A scenario that does not apply to the manifest (nothing of its kind to interrupt), or that
    could not run (the uninterrupted run did not complete): never a check, never a failure."""

    scenario: str
    reason: str


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


class CompactPage(BaseModel):
    """One side of the briefing around a resume (`belay.local.drill.pages`)."""

    phase: str
    done: list[str]  # the steps done or verified
    in_flight: list[str]  # before: each open operation and what the resume will do to it; after: what it did
    waiting_on_you: list[str]  # "<kind> <id>: <the command that answers it in the drill's home>"
    redone: list[str] = Field(default_factory=list)  # after: whatever the record shows done twice
    kept: list[str] = Field(default_factory=list)  # after: the steps done before and still done


class BeforeAfter(BaseModel):
    scenario: str
    before: CompactPage
    after: CompactPage


class DrillReport(BaseModel):
    passed: bool
    checks: list[DrillCheck]
    skipped: list[SkippedScenario] = Field(default_factory=list)
    executor: str = "self-hosted"  # with a handover, both: "A ..., handed over to B ..."
    handover_to: str | None = None  # the executor the interrupted runs were resumed on
    points: list[KillPoint] = Field(default_factory=list)
    # The uninterrupted run: its wall time (`belay run` from start to exit) and its record's size.
    reference_run_s: float | None = None
    reference_events: int | None = None
    # The briefing just before a resume and just after, per scenario that captured it; the text
    # shows the one with a decision for the person (`shown`).
    pages: list[BeforeAfter] = Field(default_factory=list)
    # With `--answer-waits`: each wait the drill answered as a person would ("<home>: <command>").
    answered: list[str] = Field(default_factory=list)
    # Each deliverable that differs from the reference, "<scenario>: <session>: <deliverable> ...".
    differing: list[str] = Field(default_factory=list)

    def shown(self) -> BeforeAfter | None:
        deciding = [p for p in self.pages if p.after.waiting_on_you]
        shown = deciding or self.pages
        return shown[0] if shown else None

    def verdict(self) -> str:
        """The last line of the drill's text: the checks passed of all, what was skipped (each was
        printed as it was skipped, with why; never a check) and the executor."""
        failed = [check for check in self.checks if not check.passed]
        verdict = f"drill {'passed' if self.passed else 'failed'}: {len(self.checks) - len(failed)}"
        verdict += f" of {len(self.checks)} checks passed"
        if self.skipped:
            names = ", ".join(s.scenario for s in self.skipped)
            verdict += f"; {len(self.skipped)} skipped ({names})"
        if self.differing:
            verdict += f"; differing: {'; '.join(self.differing)}"
        if self.answered:
            verdict += f"; {len(self.answered)} waits answered as a person would"
        return f"{verdict}; executor {self.executor}"
