"""The briefing just before a resume and just after, side by side, in a compact form: the person's
question answered at the moment they come back.

Each side is read as a person reads it, `belay brief --json` in the scenario's home, and kept
compact: the phase; what was done and recognised as done (the steps done or verified); what was
in flight, with what the resume will do to each operation (before) and what it did (after, from
the record: run again with its result, or its outcome unknown and asked of the person); and what
waits on the person, each with the command that answers it in the drill's home.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from belay.journal.events import Event, OperationOutcomeEvent, ToolResultEvent
from belay.journal.verdicts import steps_run_twice
from belay.local.cli_process import run_belay
from belay.local.drill.report import BeforeAfter, CompactPage, DrillReport
from belay.local.drill.waiting import in_home
from belay.views.briefing.model import Briefing

COLUMN = 52  # characters of one side in the text rendering


def read_page(home: Path, session_id: str) -> Briefing:
    """The briefing as `belay brief --json` prints it in `home`."""
    shown = run_belay(home, "brief", "--json", session_id)
    if shown.returncode != 0:
        raise RuntimeError(f"belay brief {session_id} in {home}: {shown.stderr.strip()}")
    return Briefing.model_validate_json(shown.stdout)


def _done(page: Briefing) -> list[str]:
    return [s.task_id for s in page.steps if s.task_id != s.owner and s.status.value in ("done", "verified")]


def _waiting(page: Briefing, home: Path) -> list[str]:
    spelled = in_home(home)
    return [
        f"{a.kind} {a.id}: {spelled(a.command)}"
        + (f"  (or: {spelled(a.alternative)})" if a.alternative else "")
        for a in page.waiting_on_you
    ]


def before_resume(page: Briefing, home: Path) -> CompactPage:
    gone = page.interruption
    return CompactPage(
        phase=page.phase.value,
        done=_done(page),
        in_flight=[f"{o.operation_id} {o.tool}: {o.settled}" for o in gone.operations] if gone else [],
        waiting_on_you=_waiting(page, home),
    )


def after_resume(
    page: Briefing, before: Briefing, home: Path, events: Sequence[Event], killed_at_seq: int
) -> CompactPage:
    """The page after the resume; what was in flight before, as the record shows it now."""
    gone = before.interruption
    flown = [o.operation_id for o in gone.operations] if gone else []
    later = [e for e in events if e.seq > killed_at_seq]
    in_flight = []
    for operation in flown:
        results = [e for e in later if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation]
        unknown = [
            e
            for e in later
            if isinstance(e, OperationOutcomeEvent)
            and e.payload.operation_id == operation
            and e.payload.outcome == "unknown"
        ]
        if results:
            ended = "ok" if results[0].payload.ok else f"failed: {results[0].payload.error}"
            in_flight.append(f"{operation}: ran again once, {ended} (seq {results[0].seq})")
        elif unknown:
            in_flight.append(f"{operation}: not repeated; its outcome is unknown and asked of you")
        else:
            in_flight.append(f"{operation}: still without a result")
    twice = steps_run_twice(events)
    kept = set(_done(before))
    done = _done(page)
    return CompactPage(
        phase=page.phase.value,
        done=done,
        in_flight=in_flight,
        waiting_on_you=_waiting(page, home),
        redone=twice,
        kept=sorted(kept & set(done)),
    )


def drill_ending(report: DrillReport) -> str:
    """What the drill's text ends with: each check was printed as it ran, so only the failures
    again, then the briefing around the resume that shows the most (`DrillReport.shown`), then the
    verdict."""
    lines = [f"FAIL {check.name}: {check.detail}" for check in report.checks if not check.passed]
    shown = report.shown()
    if shown is not None:
        lines.append(side_by_side(shown))
    return "\n".join([*lines, report.verdict()])


def side_by_side(pair: BeforeAfter) -> str:
    """Two columns, before and after; the commands that answer what waits follow in full, one per
    line, to copy."""
    before, after = pair.before, pair.after
    rows: list[tuple[str, str, str]] = [
        ("phase", before.phase, after.phase),
        ("done", _steps(before.done), _steps(after.done) + _kept(before, after)),
        ("in flight", "; ".join(before.in_flight) or "nothing", "; ".join(after.in_flight) or "nothing"),
        (
            "waits on you",
            "; ".join(w.split(": ", 1)[0] for w in before.waiting_on_you) or "nothing",
            "; ".join(w.split(": ", 1)[0] for w in after.waiting_on_you) or "nothing",
        ),
    ]
    lines = [f"{pair.scenario}: the briefing before the resume and after it", _row("", "before", "after")]
    for label, left, right in rows:
        lines.append(_row(label, left, right))
    for waiting in after.waiting_on_you:
        what, command = waiting.split(": ", 1)
        lines.append(f"  {what}, yours to decide: {command}")
    return "\n".join(lines)


def _steps(done: Sequence[str]) -> str:
    return f"{len(done)} steps: {', '.join(done)}" if done else "no step"


def _kept(before: CompactPage, after: CompactPage) -> str:
    redone = f"; done twice: {', '.join(after.redone)}" if after.redone else "; none done twice"
    return (
        f" (all {len(before.done)} from before kept{redone})"
        if set(before.done) <= set(after.kept)
        else redone
    )


def _row(label: str, left: str, right: str) -> str:
    lefts = textwrap.wrap(left, COLUMN) or [""]
    rights = textwrap.wrap(right, COLUMN) or [""]
    out = []
    for index in range(max(len(lefts), len(rights))):
        head = label if index == 0 else ""
        l_part = lefts[index] if index < len(lefts) else ""
        r_part = rights[index] if index < len(rights) else ""
        out.append(f"  {head:<13}{l_part:<{COLUMN}} | {r_part}".rstrip())
    return "\n".join(out)
