"""The one rule for Succeeded (belay.journal.proof): what a record must prove, each way it can fall
short, and how a rejection and a redo make it proven. Records built from the record's own event
models, folded as every view folds them."""

from __future__ import annotations

from belay.journal.events import (
    Actor,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    Payload,
    Rejection,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.phase import Phase, end_reason, phase_of
from belay.journal.proof import unproven
from belay.journal.state import SessionState, fold
from belay.journal.verdicts import completed
from belay.views.briefing.build import briefing
from belay.views.laws import broken
from tests.journal.fixtures import LogBuilder, sha

DANA = Actor(kind="user", name="dana")
COMPLETED = Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, attempt=1, reason="DeliverablesPublished")


class Record:
    def __init__(self) -> None:
        self.log = LogBuilder(session_id="proof")
        self.calls = 0
        self.add(UserInput(goal="publish a patch", parts={"bug": "quoted newlines"}), actor=DANA)
        self.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
        self.add(
            Task(
                task_id="worker",
                title="worker",
                status=TaskStatus.RUNNING,
                owner="worker",
                deliverable="fix.patch",
            )
        )

    def add(self, payload: Payload, actor: Actor | None = None) -> None:
        self.log.add(payload, actor=actor or Actor(kind="harness", attempt=1, subagent="worker"))

    def step(
        self,
        step: str,
        *,
        verification: str | None = "passed",
        publish: bytes | None = None,
        parts: tuple[str, ...] = (),
    ) -> None:
        """A step run, publishing `publish` as fix.patch when given, then checkpointed; what it made
        derived from the request `parts` when given."""
        derived = DerivedFrom(request_version=1, request_parts=parts) if parts else None
        task_id = f"worker/{step}"
        task = self.state().tasks.get(task_id)
        round_ = (
            task.round if task is not None and task.status == TaskStatus.PLANNED and task.round > 1 else 1
        )
        self.add(Task(task_id=task_id, title=step, status=TaskStatus.RUNNING, owner="worker"))
        if publish is not None:
            self.calls += 1
            op = f"worker.{step}.{self.calls}"
            self.add(
                ToolRequest(
                    operation_id=op,
                    tool="publish_deliverable",
                    arguments={"path": "out/fix.patch"},
                    effect=EffectClass.IDEMPOTENT,
                    subagent="worker",
                    step=task_id,
                )
            )
            ref = ArtifactRef(sha256=sha(publish.decode()), size=len(publish))
            self.add(
                Artifact(
                    name="fix.patch",
                    ref=ref,
                    deliverable=True,
                    subagent="worker",
                    result_id=op,
                    derived_from=derived,
                )
            )
            self.add(ToolResult(operation_id=op, ok=True, result_id=op))
        passed = verification == "passed"
        self.add(
            Task(task_id=task_id, status=TaskStatus.VERIFIED if passed else TaskStatus.DONE, owner="worker")
        )
        checked = (
            None
            if verification is None
            else Verification(
                command="test -s out/fix.patch", status=verification, exit_code=0 if passed else 1
            )  # type: ignore[arg-type]
        )
        checkpoint_id = task_id if round_ == 1 else f"{task_id}@{round_}"
        self.add(
            Checkpoint(
                checkpoint_id=checkpoint_id,
                covers_seq=len(self.log.events),
                subagent="worker",
                verification=checked,
            )
        )

    def finish(self) -> None:
        self.add(Task(task_id="worker", status=TaskStatus.DONE, owner="worker"))
        self.add(COMPLETED)

    def state(self) -> SessionState:
        return fold(self.log.events)


def test_a_session_whose_steps_are_verified_and_whose_deliverable_is_published_succeeded() -> None:
    record = Record()
    record.step("write")
    record.step("publish", publish=b"--- a\n+++ b\n")
    record.finish()
    state = record.state()
    assert unproven(state) == [] and phase_of(state) == Phase.SUCCEEDED
    assert completed(record.log.events)
    assert broken(briefing(state)) == []


def test_a_step_without_a_verification_is_done_but_a_failed_one_never_is() -> None:
    record = Record()
    record.step("write", verification=None)
    record.step("publish", verification="failed", publish=b"patch")
    record.finish()
    state = record.state()
    assert [(m.kind, m.id, m.what) for m in unproven(state)] == [
        (
            "deliverable",
            "fix.patch",
            "deliverable fix.patch was published by a step whose verification failed "
            "(step worker/publish: its verification `test -s out/fix.patch` (exit 1) failed)",
        ),
        (
            "step",
            "worker/publish",
            "step worker/publish: its verification `test -s out/fix.patch` (exit 1) failed",
        ),
    ]
    assert phase_of(state) == Phase.NEEDS_ATTENTION
    assert not completed(record.log.events)  # the drills' verdict reads the same rule
    assert end_reason(state).startswith(
        "the run ended, and the record does not prove it done: deliverable fix.patch"
    )
    page = briefing(state)
    assert page.ready_for_review == [] and broken(page) == []
    assert {a.id for a in page.needs_attention if a.kind == "unproven"} == {"fix.patch", "worker/publish"}


def test_an_empty_deliverable_is_missing_even_from_a_verified_step() -> None:
    record = Record()
    record.step("publish", publish=b"")
    record.finish()
    [missing] = unproven(record.state())
    assert (missing.kind, missing.id) == ("deliverable", "fix.patch")
    assert missing.what.startswith("deliverable fix.patch is empty (0 bytes")


def test_a_step_reopened_by_a_rejection_counts_only_its_next_round() -> None:
    record = Record()
    record.step("publish", verification="failed", publish=b"bad")
    record.finish()
    assert phase_of(record.state()) == Phase.NEEDS_ATTENTION
    record.add(
        Rejection(name="fix.patch", sha256=sha("bad"), reason="it fails its check", by="dana"), actor=DANA
    )
    state = record.state()
    assert not state.lifecycle.completed  # reopened: the next attempt redoes the step
    publish = state.tasks["worker/publish"]
    assert (publish.status, publish.round, publish.verification) == (TaskStatus.PLANNED, 2, None)
    record.step("publish", publish=b"good")
    record.finish()
    state = record.state()
    assert unproven(state) == [] and phase_of(state) == Phase.SUCCEEDED


def test_a_step_a_scope_change_reopened_and_nobody_redid_is_missing() -> None:
    record = Record()
    record.add(
        Task(
            task_id="worker/publish",
            title="publish",
            status=TaskStatus.RUNNING,
            owner="worker",
            request_parts=("bug",),
        )
    )
    record.step("publish", publish=b"patch", parts=("bug",))
    assert phase_of(record.state()) == Phase.RUNNING
    record.add(
        ScopeChange(request_version=2, summary="also CRLF", changed_parts={"bug": "CRLF too"}), actor=DANA
    )
    record.add(Task(task_id="worker", status=TaskStatus.DONE, owner="worker"))
    record.add(COMPLETED)  # a run that ended on the old request's work
    missing = {(m.kind, m.id) for m in unproven(record.state())}
    assert ("step", "worker/publish") in missing and ("deliverable", "fix.patch") in missing


def test_a_coordinator_succeeds_only_with_every_child_succeeded_and_its_latest_bytes_collected() -> None:
    children = Actor(kind="system", name="belay children")

    def coordinator(phase: str, collected: str, delivered: str) -> SessionState:
        record = Record()
        record.step("publish", publish=b"own")
        record.add(SessionLink(kind=SessionLinkKind.CHILD, session="child-a", part="docs"), actor=children)
        record.add(
            SessionLink(
                kind=SessionLinkKind.CHILD,
                session="child-a",
                part="docs",
                phase=phase,
                deliverables={"docs.md": sha(delivered)},
            ),
            actor=children,
        )
        ref = ArtifactRef(sha256=sha(collected), size=4)
        record.add(
            Artifact(name="child-a/docs.md", ref=ref, deliverable=True, subagent="worker"), actor=children
        )
        record.finish()
        return record.state()

    assert phase_of(coordinator("Succeeded", "docs", "docs")) == Phase.SUCCEEDED
    failed = coordinator("Failed", "docs", "docs")
    assert [m.what for m in unproven(failed)] == ["child session child-a ended Failed"]
    assert phase_of(failed) == Phase.NEEDS_ATTENTION
    stale = coordinator("Succeeded", "docs v1", "docs v2")
    assert [m.what for m in unproven(stale)] == [
        "docs.md of child session child-a: the bytes collected are not those it ended with"
    ]


def test_the_rejected_bytes_redone_unchanged_are_done_but_not_proven() -> None:
    record = Record()
    record.step("publish", publish=b"patch")
    record.finish()
    record.add(
        Rejection(name="fix.patch", sha256=sha("patch"), reason="cite the test", by="dana"), actor=DANA
    )
    record.step("publish", publish=b"patch")  # redone: the same bytes
    record.finish()
    state = record.state()
    assert state.tasks["worker/publish"].status == TaskStatus.VERIFIED  # its step is done
    [missing] = unproven(state)
    assert (missing.kind, missing.id) == ("deliverable", "fix.patch")
    assert "the same bytes as rejected" in missing.what and "dana: cite the test" in missing.what
    assert phase_of(state) == Phase.NEEDS_ATTENTION
    page = briefing(state)
    assert page.ready_for_review == [] and broken(page) == []
    # Rejecting it again would make the same bytes again: the way on is to change the request.
    [attention] = [a for a in page.needs_attention if a.id == "fix.patch"]
    assert attention.command is not None and attention.command.startswith("belay amend "), attention
    record.step("publish", publish=b"patch, citing its test")  # the person's next round: other bytes
    record.finish()
    assert unproven(record.state()) == [] and phase_of(record.state()) == Phase.SUCCEEDED


def test_a_scope_change_reopens_the_running_step_that_depends_on_it_and_ends_its_external_wait() -> None:
    record = Record()
    record.step("patch", parts=("bug",))
    record.add(Task(task_id="worker/ci", title="ci", status=TaskStatus.RUNNING, owner="worker"))
    record.add(
        ToolRequest(
            operation_id="worker.ci.1",
            tool="wait_on_external",
            arguments={"reason": "CI must pass", "condition": "ci-green"},
            effect=EffectClass.IDEMPOTENT,
            subagent="worker",
            step="worker/ci",
        )
    )
    record.add(
        Wait(
            wait_id="wait-worker.ci.1", kind=WaitKind.ON_EXTERNAL, reason="CI must pass", condition="ci-green"
        )
    )
    assert "wait-worker.ci.1" in record.state().open_waits
    record.add(
        ScopeChange(request_version=2, summary="also CRLF", changed_parts={"bug": "CRLF too"}), actor=DANA
    )
    state = record.state()
    ci = state.tasks["worker/ci"]
    assert (ci.status, ci.round) == (TaskStatus.PLANNED, 2)  # done again in its next round
    assert "wait-worker.ci.1" not in state.open_waits  # CI on the old work is awaited no more
    assert state.waits["wait-worker.ci.1"].reason.startswith("withdrawn: request v2")
    assert "worker/ci" in state.scope_changes[-1].reopened_steps
    # A change of a part the running step does not depend on leaves it, and its wait, alone.
    other = Record()
    other.add(
        Task(
            task_id="worker/ci", title="ci", status=TaskStatus.RUNNING, owner="worker", request_parts=("bug",)
        )
    )
    other.add(
        ScopeChange(request_version=2, summary="a deadline", changed_parts={"deadline": "friday"}), actor=DANA
    )
    assert other.state().tasks["worker/ci"].status == TaskStatus.RUNNING
