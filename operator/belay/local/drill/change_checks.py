"""The checks of a change scenario, the same for an amend and a rejection, run over every session of
the objective (the session, and a coordinator's children) once the resumed run ended:

- redone: every step the change reopened (its round rose), and every step done before it that
  depends directly on what it touched (an amend: the goal or a part the step names; a rejection:
  the step that published the deliverable), was done again after the change and is done now;
- reused: every other step done before the change was neither done again nor asked for a call;
- delivered: every deliverable has the bytes of the reference run of the final request (for a
  rejection: the rejected one is published anew after the rejection, the others are the
  uninterrupted run's);
- no unsafe call answered twice, and the ticket service holds the tickets the record shows filed;
- the page's phase (`belay brief`) is Succeeded, and the record proves it (`belay.journal.proof`);
  after a rejection, a redo that made the very bytes rejected (an executor that decides the same
  way twice, as a plan does) must instead leave the page Needs attention for that alone.

Each failure names the session and the step or the deliverable; the deliverables that differ are
also kept for the drill's verdict (`DrillReport.differing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from belay.journal.events import ArtifactEvent, Event, RejectionEvent, ScopeChangeEvent
from belay.journal.phase import Phase, phase_of
from belay.journal.proof import Missing, publishing_step, rejected_bytes, unproven, unproven_text
from belay.journal.state import fold
from belay.journal.verdicts import (
    deliverables,
    done_after,
    requested_after,
    step_rounds,
    steps_depending_on,
    steps_done,
    tickets_recorded,
    unsafe_answered_twice,
)
from belay.local.cli_process import read_events, tickets_in
from belay.local.drill.pages import read_page
from belay.local.drill.run import Drill


@dataclass(frozen=True)
class Judged:
    passed: bool
    summary: str  # what was redone and reused, for the scenario's kill point


def records(home: Path, drill: Drill) -> dict[str, list[Event]]:
    """Every session of the objective's record in `home`: the session, then its children."""
    return {session: read_events(home, session) for session in [drill.session_id, *drill.children]}


def changed_steps(before: Sequence[Event], after: Sequence[Event]) -> set[str]:
    """The steps done before the change that depend directly on what it touched: for an amend, on
    the goal or a part it changed; for a rejection, the step that published the deliverable."""
    change = next((e for e in after[len(before) :] if isinstance(e, ScopeChangeEvent | RejectionEvent)), None)
    done = steps_done(before)
    if isinstance(change, RejectionEvent):
        step = publishing_step(fold(before), change.payload.name)
        return {step.task_id} & done if step is not None else set()
    if isinstance(change, ScopeChangeEvent):
        payload = change.payload
        touched = ({"goal"} if payload.goal is not None else set()) | set(payload.changed_parts)
        return steps_depending_on(before, touched | set(payload.removed_parts)) & done
    return set()


def redo_and_reuse(
    session: str, before: Sequence[Event], after: Sequence[Event]
) -> tuple[list[str], list[str], set[str], set[str]]:
    """What the change should have redone and did not, and what it should have reused and did not;
    then the steps redone and those reused."""
    rounds_before, rounds_now = step_rounds(before), step_rounds(after)
    reopened = {t for t, r in rounds_now.items() if t in rounds_before and r > rounds_before[t]}
    expected = changed_steps(before, after)
    to_redo = reopened | expected
    again = done_after(after, len(before))
    done_now = steps_done(after)
    not_redone = [
        f"{session}: step {t} "
        + (
            "was not reopened, though it depends on what changed"
            if t not in reopened
            else "was not done again"
        )
        for t in sorted(to_redo)
        if t not in reopened or not again[t] or t not in done_now
    ]
    asked = requested_after(after, len(before))
    reused = steps_done(before) - to_redo
    not_reused = [
        f"{session}: step {t} was done again though the change left it valid"
        + (f" ({', '.join(asked[t])})" if asked.get(t) else "")
        for t in sorted(reused)
        if again[t] or asked.get(t)
    ]
    return not_redone, not_reused, to_redo, reused


def deliverables_against(
    reference: Mapping[str, list[Event]],
    after: Mapping[str, list[Event]],
    lengths: Mapping[str, int],
    rejected: set[tuple[str, str]],
) -> list[str]:
    """Each deliverable of the reference missing or with other bytes, named with its session; a
    rejected one (session, name) must instead be published anew after the rejection."""
    found: list[str] = []
    for session, events in reference.items():
        now = deliverables(after.get(session, []))
        for name, sha256 in sorted(deliverables(events).items()):
            if (session, name) in rejected:
                again = [
                    e
                    for e in after[session][lengths[session] :]
                    if isinstance(e, ArtifactEvent) and e.payload.deliverable and e.payload.name == name
                ]
                if not again:
                    found.append(f"{session}: {name} was not published again after its rejection")
            elif name not in now:
                found.append(f"{session}: {name} missing")
            elif now[name] != sha256:
                found.append(f"{session}: {name} differs (sha256 {now[name][:12]}, reference {sha256[:12]})")
    return found


def rejected_pairs(drill: Drill, rejected: str | None) -> set[tuple[str, str]]:
    """The (session, deliverable) pairs a rejection turns down: the deliverable, and when it is one
    a coordinator collected from a child (`<child>/<name>`), the child's own."""
    if rejected is None:
        return set()
    child, _, own = rejected.partition("/")
    collected = {(child, own)} if own and child in drill.children else set()
    return {(drill.session_id, rejected)} | collected


def waits_on_unchanged_bytes(session: str, after: Mapping[str, list[Event]]) -> bool:
    """Whether all the record lacks to prove `session` done is deliverables redone with the very
    bytes a person rejected (in it, or in a child it depends on): the page then rightly waits on
    the person, and that is the outcome a rejection has on an executor that decides the same way
    twice."""
    missing = unproven(fold(after[session]))
    return bool(missing) and all(_unchanged(session, item, after) for item in missing)


def _unchanged(session: str, item: Missing, after: Mapping[str, list[Event]]) -> bool:
    if item.kind == "child":
        return item.id in after and waits_on_unchanged_bytes(item.id, after)
    state = fold(after[session])
    artifact = state.artifacts.get(item.id) if item.kind == "deliverable" else None
    return artifact is not None and rejected_bytes(state, item.id, artifact.ref.sha256) is not None


def phase_proven(
    home: Path, session: str, after: Mapping[str, list[Event]], rejected: str | None = None
) -> str | None:
    """Why the page's phase is not Succeeded proven by the record (or, after a rejection redone
    with the same bytes, Needs attention for that alone); None when it is."""
    page = read_page(home, session).phase.value
    state = fold(after[session])
    missing = unproven(state)
    recorded = phase_of(state)
    if page == Phase.SUCCEEDED.value and recorded == Phase.SUCCEEDED and not missing:
        return None
    if rejected and page == Phase.NEEDS_ATTENTION.value and waits_on_unchanged_bytes(session, after):
        return None
    record = unproven_text(missing) if missing else f"the record's phase is {recorded.value}"
    return f"{session}: the page says {page}; {record}"


def judge_change(
    drill: Drill,
    scenario: str,
    home: Path,
    lengths: Mapping[str, int],
    reference: Mapping[str, list[Event]],
    after: Mapping[str, list[Event]],
    rejected: str | None = None,
) -> Judged:
    not_redone: list[str] = []
    not_reused: list[str] = []
    redone: list[str] = []
    kept: list[str] = []
    for session, events in after.items():
        before = events[: lengths.get(session, 0)]
        missed, repeated, to_redo, reused = redo_and_reuse(session, before, events)
        not_redone += missed
        not_reused += repeated
        prefix = f"{session}: " if len(after) > 1 else ""
        redone += [prefix + t for t in sorted(to_redo)]
        kept += [prefix + t for t in sorted(reused)]
    passed = drill.check(
        f"{scenario}: the steps the change made invalid were redone",
        not not_redone,
        "; ".join(not_redone) or f"redone: {', '.join(redone) or 'none'}",
    )
    passed = (
        drill.check(
            f"{scenario}: the steps the change left valid were reused, not repeated",
            not not_reused,
            "; ".join(not_reused) or f"reused: {', '.join(kept) or 'none'}",
        )
        and passed
    )
    differ = deliverables_against(reference, after, lengths, rejected_pairs(drill, rejected))
    if rejected and waits_on_unchanged_bytes(drill.session_id, after):
        # Redone with the very bytes rejected: the child's record holds them, the coordinator
        # rightly collects nothing it cannot prove (the phase check below sees that outcome).
        differ = [d for d in differ if not d.endswith("was not published again after its rejection")]
    drill.differing += [f"{scenario}: {d}" for d in differ]
    passed = (
        drill.check(
            f"{scenario}: the deliverables are those of an uninterrupted run of the final request",
            not differ,
            "; ".join(differ) or ", ".join(f"{s}: {sorted(deliverables(e))}" for s, e in after.items()),
        )
        and passed
    )
    unsafe = [f"{s}: {twice}" for s, events in after.items() for twice in unsafe_answered_twice(events)]
    unsafe += [
        f"{s}: {tickets_in(home, s)} tickets, the record shows {tickets_recorded(events)} filed"
        for s, events in after.items()
        if tickets_in(home, s) != tickets_recorded(events)
    ]
    passed = (
        drill.check(
            f"{scenario}: no unsafe call repeated",
            not unsafe,
            "; ".join(unsafe) or "each unsafe call answered once; every ticket is one the record filed",
        )
        and passed
    )
    unproven_pages = [why for s in after if (why := phase_proven(home, s, after, rejected))]
    passed = (
        drill.check(
            f"{scenario}: the page says Succeeded and the record proves it",
            not unproven_pages,
            "; ".join(unproven_pages) or f"{', '.join(after)}: Succeeded, proven by the record",
        )
        and passed
    )
    return Judged(passed, f"redone: {', '.join(redone) or 'none'}; reused: {', '.join(kept) or 'none'}")
