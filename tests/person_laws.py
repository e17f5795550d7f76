"""The laws a person's whole objective keeps, whatever they did to it: checked on every session of a
home after every move of the person-at-random test (tests/cli/test_person_at_random.py), each shown
able to fail in tests/cli/test_person_laws.py.

The page's own laws are `belay.views.laws` (read here on the page `belay brief --json` prints, and
on `belay sessions --json` and `belay objective --json`), and the end is judged with the drill's
own verdicts (`belay.journal.verdicts`, `belay.local.drill.children`). What is added here is
what only a page beside its record can show: the page says what the record proves, the bytes it
offers are the record's, a ticket exists for each unsafe request and no other, and no approval
was taken without a person's (or the manifest's) decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    ArtifactEvent,
    Event,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.phase import ENDED_PHASES, Phase, phase_of
from belay.journal.state import fold
from belay.journal.verdicts import completed
from belay.views.briefing.model import Briefing
from belay.views.laws import broken

TICKET_TOOL = "create_ticket"


def page_laws(page: Briefing) -> list[str]:
    """Every law of `belay.views.laws` the page breaks."""
    return [str(b) for b in broken(page)]


def phase_is_the_records(page: Briefing, events: Sequence[Event]) -> list[str]:
    """The page says Succeeded exactly when the record proves it (`belay.journal.proof`), and an
    ended phase of the record is the page's phase."""
    found = []
    proven = completed(events)
    if (page.phase == Phase.SUCCEEDED) != proven:
        found.append(
            f"the page says {page.phase.value}, the record {'proves' if proven else 'does not prove'} it done"
        )
    recorded = phase_of(fold(events))
    if recorded in ENDED_PHASES and page.phase != recorded:
        found.append(f"the record ended {recorded.value}, the page says {page.phase.value}")
    return found


def reviews_are_the_records(page: Briefing, events: Sequence[Event]) -> list[str]:
    """What the page offers for review is the bytes the record last published under that name."""
    latest = {e.payload.name: e.payload.ref.sha256 for e in events if isinstance(e, ArtifactEvent)}
    found = []
    for review in page.ready_for_review:
        recorded = latest.get(review.name)
        if recorded is None:
            found.append(f"{review.name} is offered for review and the record published nothing by that name")
        elif not recorded.startswith(review.sha256):
            found.append(f"{review.name} is offered as {review.sha256[:12]}, the record's is {recorded[:12]}")
    return found


def one_ticket_per_unsafe_request(events: Sequence[Event], tickets: int) -> list[str]:
    """The tracker holds at most one ticket per ticket request recorded (each an operation id of its
    own), each unsafe operation has at most one result, and once the session is proven done, one
    ticket per request that succeeded."""
    requested = {
        e.payload.operation_id
        for e in events
        if isinstance(e, ToolRequestEvent) and e.payload.tool == TICKET_TOOL
    }
    unsafe = {
        e.payload.operation_id
        for e in events
        if isinstance(e, ToolRequestEvent) and e.payload.effect == "unsafe"
    }
    results: dict[str, int] = {}
    succeeded: set[str] = set()
    for e in events:
        if isinstance(e, ToolResultEvent) and e.payload.operation_id in unsafe:
            results[e.payload.operation_id] = results.get(e.payload.operation_id, 0) + 1
            if e.payload.ok and e.payload.operation_id in requested:
                succeeded.add(e.payload.operation_id)
    found = [f"unsafe operation {op} has {n} results" for op, n in sorted(results.items()) if n > 1]
    if tickets > len(requested):
        found.append(f"{tickets} tickets filed for {len(requested)} ticket requests")
    if completed(events) and tickets != len(succeeded):
        found.append(f"done with {tickets} tickets filed for {len(succeeded)} ticket requests that succeeded")
    return found


def no_approval_without_a_decision(events: Sequence[Event]) -> list[str]:
    """An operation that asked for an approval ran only after a decision granting that approval for
    those exact bytes, signed by whoever took it."""
    asked: dict[str, ApprovalRequestEvent] = {}
    granted: dict[str, ApprovalEvent] = {}
    found = []
    for e in events:
        if isinstance(e, ApprovalRequestEvent):
            asked[e.payload.operation_id] = e
        elif isinstance(e, ApprovalEvent) and e.payload.granted:
            granted[e.payload.operation_id] = e
            if not e.payload.by:
                found.append(f"approval {e.payload.approval_id} (seq {e.seq}) says no one granted it")
        elif isinstance(e, ToolResultEvent) and e.payload.ok and e.payload.operation_id in asked:
            request = asked[e.payload.operation_id]
            decision = granted.get(e.payload.operation_id)
            if decision is None:
                approval = request.payload.approval_id
                found.append(f"{e.payload.operation_id} ran (seq {e.seq}) with no decision on {approval}")
            elif decision.payload.payload_sha256 != request.payload.payload_sha256:
                found.append(
                    f"{e.payload.operation_id} ran (seq {e.seq}) under an approval of other bytes "
                    f"({decision.payload.payload_sha256[:12]}, asked {request.payload.payload_sha256[:12]})"
                )
    return found


def session_laws(page: Briefing, events: Sequence[Event], tickets: int) -> list[str]:
    """Every law one session's page and record break, each named."""
    laws = {
        "the page's laws": page_laws(page),
        "the page says what the record proves": phase_is_the_records(page, events),
        "what is offered for review is the record's bytes": reviews_are_the_records(page, events),
        "one ticket per unsafe request": one_ticket_per_unsafe_request(events, tickets),
        "no approval taken without a decision": no_approval_without_a_decision(events),
    }
    return [f"{law}: {detail}" for law, details in laws.items() for detail in details]
