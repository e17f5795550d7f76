"""Each law the person-at-random test checks (tests/person_laws.py) is able to fail: a record a
harness could have written, folded and paged as every view does, holds each law; a page or a
record broken on purpose (the page saying more than the record proves, offering other bytes, a
ticket too many, an operation run without a decision) is flagged by the law it breaks and named.
The page's own laws are shown able to fail in tests/views/test_laws.py."""

from __future__ import annotations

from belay.journal.events import (
    Actor,
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    EffectClass,
    Event,
    Lifecycle,
    LifecycleKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.phase import Phase
from belay.journal.state import fold, operation_payload_sha256
from belay.local.drill.children import deliverables_differing
from belay.views.briefing.build import briefing
from belay.views.briefing.model import Briefing
from tests.journal.fixtures import LogBuilder, sha
from tests.person_laws import (
    no_approval_without_a_decision,
    one_ticket_per_unsafe_request,
    phase_is_the_records,
    reviews_are_the_records,
    session_laws,
)

DANA = Actor(kind="user", name="dana")
TICKET = {"title": "The alpha note"}
NOTE = b"## Alpha\n"


def record(
    *, decided: bool = True, by: str = "dana", verified: bool = True, granted_sha: str = ""
) -> list[Event]:
    """A session that files a ticket under an approval, then publishes its note in a verified step
    and completes."""
    log = LogBuilder(session_id="alpha")
    harness = Actor(kind="harness", attempt=1, subagent="writer")
    payload_sha = operation_payload_sha256("create_ticket", TICKET)
    log.add(UserInput(goal="write the alpha note"), actor=DANA)
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1), actor=harness)
    log.add(
        Task(
            task_id="writer",
            title="writer",
            status=TaskStatus.RUNNING,
            owner="writer",
            deliverable="alpha.md",
        ),
        actor=harness,
    )
    log.add(
        Task(task_id="writer/ticket", title="ticket", status=TaskStatus.RUNNING, owner="writer"),
        actor=harness,
    )
    ticket = ToolRequest(
        operation_id="writer.ticket.1",
        tool="create_ticket",
        arguments=TICKET,
        effect=EffectClass.UNSAFE,
        subagent="writer",
        step="writer/ticket",
    )
    log.add(ticket, actor=harness)
    approval = "approve-writer.ticket.1"
    log.add(
        ApprovalRequest(
            approval_id=approval,
            operation_id="writer.ticket.1",
            tool="create_ticket",
            payload_sha256=payload_sha,
            summary="file the ticket",
        ),
        actor=harness,
    )
    if decided:
        granted = Approval(
            approval_id=approval,
            operation_id="writer.ticket.1",
            payload_sha256=granted_sha or payload_sha,
            granted=True,
            by=by,
        )
        log.add(granted, actor=DANA)
    log.add(ToolResult(operation_id="writer.ticket.1", ok=True, output={"id": "T-1"}), actor=harness)
    log.add(Task(task_id="writer/ticket", status=TaskStatus.DONE, owner="writer"), actor=harness)
    log.add(
        Checkpoint(checkpoint_id="writer/ticket", covers_seq=len(log.events), subagent="writer"),
        actor=harness,
    )
    log.add(
        Task(task_id="writer/write", title="write", status=TaskStatus.RUNNING, owner="writer"), actor=harness
    )
    publish = ToolRequest(
        operation_id="writer.write.1",
        tool="publish_deliverable",
        arguments={"path": "out/alpha.md"},
        effect=EffectClass.IDEMPOTENT,
        subagent="writer",
        step="writer/write",
    )
    log.add(publish, actor=harness)
    ref = ArtifactRef(sha256=sha(NOTE.decode()), size=len(NOTE))
    log.add(
        Artifact(name="alpha.md", ref=ref, deliverable=True, subagent="writer", result_id="writer.write.1"),
        actor=harness,
    )
    log.add(ToolResult(operation_id="writer.write.1", ok=True, result_id="writer.write.1"), actor=harness)
    review = Wait(
        wait_id="review-alpha.md", kind=WaitKind.READY_FOR_REVIEW, reason="review", artifact="alpha.md"
    )
    log.add(review, actor=harness)
    log.add(
        Task(
            task_id="writer/write",
            status=TaskStatus.VERIFIED if verified else TaskStatus.DONE,
            owner="writer",
        ),
        actor=harness,
    )
    check = Verification(
        command="test -s out/alpha.md",
        status="passed" if verified else "failed",
        exit_code=0 if verified else 1,
    )
    log.add(
        Checkpoint(
            checkpoint_id="writer/write", covers_seq=len(log.events), subagent="writer", verification=check
        ),
        actor=harness,
    )
    log.add(Task(task_id="writer", status=TaskStatus.DONE, owner="writer"), actor=harness)
    log.add(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, attempt=1), actor=harness)
    return log.events


def page_of(events: list[Event]) -> Briefing:
    return briefing(fold(events))


def test_a_session_done_as_it_should_be_keeps_every_law() -> None:
    events = record()
    page = page_of(events)
    assert page.phase == Phase.SUCCEEDED
    assert session_laws(page, events, tickets=1) == []


def test_a_page_that_says_more_or_less_than_the_record_proves_is_flagged() -> None:
    unproven = record(verified=False)  # the run claimed its end; a verification failed
    page = page_of(unproven)
    assert page.phase == Phase.NEEDS_ATTENTION and phase_is_the_records(page, unproven) == []
    claimed = page.model_copy(update={"phase": Phase.SUCCEEDED})
    assert phase_is_the_records(claimed, unproven) == [
        "the page says Succeeded, the record does not prove it done",
        "the record ended NeedsAttention, the page says Succeeded",
    ]
    proven = record()
    failed = page_of(proven).model_copy(update={"phase": Phase.FAILED})
    assert phase_is_the_records(failed, proven) == [
        "the page says Failed, the record proves it done",
        "the record ended Succeeded, the page says Failed",
    ]
    assert any(
        law.startswith("the page says what the record proves") for law in session_laws(claimed, unproven, 1)
    )


def test_a_page_that_offers_other_bytes_than_the_records_is_flagged() -> None:
    events = record()
    page = page_of(events)
    [review] = page.ready_for_review
    assert reviews_are_the_records(page, events) == []
    other = page.model_copy(update={"ready_for_review": [review.model_copy(update={"sha256": sha("other")})]})
    [found] = reviews_are_the_records(other, events)
    assert found.startswith("alpha.md is offered as ") and found.endswith(
        f"the record's is {review.sha256[:12]}"
    )
    unknown = page.model_copy(update={"ready_for_review": [review.model_copy(update={"name": "beta.md"})]})
    assert reviews_are_the_records(unknown, events) == [
        "beta.md is offered for review and the record published nothing by that name"
    ]


def test_a_ticket_too_many_or_too_few_or_an_unsafe_call_answered_twice_is_flagged() -> None:
    events = record()
    assert one_ticket_per_unsafe_request(events, tickets=1) == []
    assert one_ticket_per_unsafe_request(events, tickets=2) == [
        "2 tickets filed for 1 ticket requests",
        "done with 2 tickets filed for 1 ticket requests that succeeded",
    ]
    assert one_ticket_per_unsafe_request(events, tickets=0) == [
        "done with 0 tickets filed for 1 ticket requests that succeeded"
    ]
    log = LogBuilder(session_id="alpha")
    log.events = list(events)
    log.add(ToolResult(operation_id="writer.ticket.1", ok=True, output={"id": "T-2"}))
    assert "unsafe operation writer.ticket.1 has 2 results" in one_ticket_per_unsafe_request(log.events, 1)


def test_an_operation_run_without_a_decision_granting_its_bytes_is_flagged() -> None:
    assert no_approval_without_a_decision(record()) == []
    [undecided] = no_approval_without_a_decision(record(decided=False))
    assert undecided.startswith("writer.ticket.1 ran (seq ") and undecided.endswith(
        "with no decision on approve-writer.ticket.1"
    )
    [other] = no_approval_without_a_decision(record(granted_sha=sha("other bytes")))
    assert "under an approval of other bytes" in other
    [unsigned] = no_approval_without_a_decision(record(by=""))
    assert unsigned.startswith("approval approve-writer.ticket.1 (seq ") and "no one granted it" in unsigned


def test_a_deliverable_unlike_the_uninterrupted_runs_is_flagged() -> None:
    reference = {"alpha": record()}
    assert deliverables_differing(reference, {"alpha": record()}) == []
    log = LogBuilder(session_id="alpha")
    log.events = list(record())
    log.add(Artifact(name="alpha.md", ref=ArtifactRef(sha256=sha("other"), size=5), deliverable=True))
    [differs] = deliverables_differing(reference, {"alpha": log.events})
    assert differs.startswith("alpha: alpha.md differs")
    assert deliverables_differing(reference, {"alpha": []}) == ["alpha: alpha.md missing"]
