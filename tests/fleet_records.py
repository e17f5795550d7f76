"""Five session records, each standing somewhere else, for the fleet view's tests: one moving, one
waiting on the user, one on an external condition, one ready for review, one interrupted. They
are written into a real event store (and the review's deliverable into a real artifact store) the
way a harness writes them; who holds each session's lease decides whether its attempt is alive,
which is what the caller chooses (a local process, or a harness pod's name in a cluster)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from belay.journal.events import (
    Actor,
    ApprovalRequest,
    Artifact,
    EffectClass,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    UserInput,
    Wait,
    WaitKind,
)
from belay.stores.base import ArtifactStore, EventStore

HARNESS = Actor(kind="harness", attempt=1, harness_version="0.1.0", subagent="worker")
REPORT = b"# The report\nEverything checked.\n"


@dataclass(frozen=True)
class Expected:
    phase: str
    bucket: str
    user: tuple[str, ...] = ()
    external: tuple[str, ...] = ()
    review: tuple[str, ...] = ()
    command: str | None = None  # the local command; None when nothing a person runs moves it
    alive: bool = True  # whether its attempt holds the lease and proves it is alive


EXPECTED: dict[str, Expected] = {
    "fleet-moving": Expected("Running", "moving"),
    "fleet-approval": Expected(
        "WaitingOnUser",
        "waiting_on_you",
        user=("approval approve-worker.publish.1",),
        command="belay approve fleet-approval approve-worker.publish.1",
    ),
    "fleet-external": Expected(
        "WaitingOnExternal",
        "on_external",
        external=("ci-green",),
        command="belay approve fleet-external wait-worker.ci.1",
    ),
    "fleet-review": Expected(
        "ReadyForReview",
        "ready_for_review",
        review=("report.md",),
        command="belay artifacts get fleet-review report.md -o report.md",
    ),
    "fleet-interrupted": Expected(
        "Interrupted", "interrupted", command="belay resume fleet-interrupted", alive=False
    ),
}
SUMMARY = (
    "5 sessions: 1 moving, 1 waiting on you, 1 on external conditions, 1 ready for review, 1 interrupted, "
    "0 needing attention, 0 failed, 0 succeeded"
)


def _history(name: str, report_ref: Payload | None) -> list[Payload]:
    started = [
        UserInput(goal=f"the goal of {name}"),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
        Task(task_id="worker", status=TaskStatus.RUNNING, owner="worker"),
        Task(task_id="worker/work", title="Do the work", status=TaskStatus.RUNNING, owner="worker"),
    ]
    if name == "fleet-approval":
        request = ToolRequest(
            operation_id="worker.publish.1",
            tool="publish_deliverable",
            arguments={"path": "out/report.md"},
            effect=EffectClass.IDEMPOTENT,
            step="worker/work",
            subagent="worker",
            payload_sha256="ab" * 32,
        )
        approval = ApprovalRequest(
            approval_id="approve-worker.publish.1",
            operation_id="worker.publish.1",
            tool="publish_deliverable",
            payload_sha256="ab" * 32,
            summary="worker wants to run publish_deliverable path='out/report.md'",
        )
        return [*started, request, approval]
    if name == "fleet-external":
        wait = Wait(
            wait_id="wait-worker.ci.1", kind=WaitKind.ON_EXTERNAL, reason="CI runs", condition="ci-green"
        )
        return [*started, wait]
    if name == "fleet-review":
        assert report_ref is not None
        done = [
            Task(task_id="worker/work", status=TaskStatus.DONE, owner="worker"),
            Task(task_id="worker", status=TaskStatus.DONE, owner="worker"),
        ]
        review = Wait(
            wait_id="review-report.md", kind=WaitKind.READY_FOR_REVIEW, reason="ready", artifact="report.md"
        )
        return [*started, report_ref, *done, review]
    return started


async def write_five_sessions(
    store: EventStore, artifacts: ArtifactStore, holder: Callable[[str, bool], str]
) -> None:
    """Write the five records; `holder(session, alive)` names who holds each one's lease."""
    ref = artifacts.put(REPORT, media_type="text/markdown")
    report = Artifact(
        name="report.md", ref=ref, deliverable=True, subagent="worker", description="the report"
    )
    for name, expected in EXPECTED.items():
        lease = await store.acquire_lease(name, holder(name, expected.alive))
        assert lease.number == 1
        history = _history(name, report)
        await store.append(name, [EventDraft(payload=history[0], actor=Actor(kind="user", name="test"))])
        await store.append(name, [EventDraft(payload=p, actor=HARNESS) for p in history[1:]], lease=1)
