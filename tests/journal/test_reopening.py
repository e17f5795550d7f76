"""A scope change or a rejection reopens exactly the steps whose work it made invalid: each goes
back to planned for its next round, its deliverables are withdrawn, a finished session is open
again, and the briefing says what happened, what is redone and what stays reusable, and why."""

from __future__ import annotations

from belay.journal.events import (
    Actor,
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    Rejection,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.phase import Liveness, Phase, interruption_of, phase_of
from belay.journal.state import SessionState, fold
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_text
from tests.journal.fixtures import LogBuilder, sha

DANA = Actor(kind="user", name="dana")
PATCH = ArtifactRef(sha256=sha("patch v1"), size=120)


class Session:
    """A finished two-step session as the harness records it: each result derived from its step's
    request parts and the checkpoint its step started from."""

    def __init__(self) -> None:
        self.log = LogBuilder()
        self.log.add(UserInput(goal="fix the parser", parts={"repository": "repo"}))
        self.log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
        self.log.add(Task(task_id="impl", status=TaskStatus.RUNNING, owner="impl"))
        self.base = self.checkpoint("impl/inputs", None, parts=None)
        self.step("impl/test", ("goal",), 1)
        self.step("impl/publish", ("repository",), 2, deliverable=True)
        self.log.add(Task(task_id="impl", status=TaskStatus.DONE, owner="impl"))
        self.log.add(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="DeliverablesPublished"))

    def checkpoint(
        self, checkpoint_id: str, step_parts: tuple[str, ...] | None, *, parts: object = ()
    ) -> str:
        result_id = f"checkpoint:{checkpoint_id}"
        derived = (
            None
            if parts is None
            else DerivedFrom(request_version=1, request_parts=step_parts or (), results=(self.base,))
        )
        self.log.add(
            Checkpoint(
                checkpoint_id=checkpoint_id,
                covers_seq=len(self.log.events),
                verification=Verification(command="make check", status="passed", exit_code=0),
                subagent="impl",
                result_id=result_id,
                derived_from=derived,
            )
        )
        return result_id

    def step(self, step: str, parts: tuple[str, ...], number: int, deliverable: bool = False) -> None:
        log = self.log
        log.add(Task(task_id=step, status=TaskStatus.RUNNING, owner="impl", request_parts=parts))
        operation = f"op-{number}"
        request = log.add(
            ToolRequest(
                operation_id=operation, tool="work", effect=EffectClass.IDEMPOTENT, step=step, subagent="impl"
            )
        )
        derived = DerivedFrom(request_version=1, request_parts=parts, results=(self.base,))
        if deliverable:
            log.add(
                Artifact(
                    name="fix.patch", ref=PATCH, deliverable=True, result_id=operation, derived_from=derived
                )
            )
            log.add(
                Wait(
                    wait_id="review-fix.patch",
                    kind=WaitKind.READY_FOR_REVIEW,
                    reason="ready",
                    artifact="fix.patch",
                )
            )
        log.add(
            ToolResult(operation_id=operation, ok=True, result_id=operation, derived_from=derived),
            parent_seq=request.seq,
        )
        log.add(Task(task_id=step, status=TaskStatus.VERIFIED, owner="impl"))
        self.base = self.checkpoint(step, parts)

    def state(self) -> SessionState:
        return fold(self.log.events)


def test_a_scope_change_reopens_the_steps_it_invalidated_and_the_finished_session() -> None:
    session = Session()
    assert session.state().lifecycle.completed
    session.log.add(
        ScopeChange(request_version=2, summary="new goal", goal="fix it all", by="dana"), actor=DANA
    )
    state = session.state()
    change = state.scope_changes[-1]
    # impl/test depends on the goal; impl/publish is built on impl/test's checkpoint.
    assert change.reopened_steps == ("impl/test", "impl/publish")
    assert [(c.part, c.before, c.after) for c in change.changes] == [("goal", "fix the parser", "fix it all")]
    assert (change.by, change.at) == ("dana", session.log.events[-1].created_at)
    for step in change.reopened_steps:
        task = state.tasks[step]
        assert (task.status, task.round) == (TaskStatus.PLANNED, 2)
        assert task.reopened_because.startswith("request v2 (dana)")
    assert state.tasks["impl"].status == TaskStatus.PLANNED
    assert not state.lifecycle.completed and state.lifecycle.reopened == 1
    assert "fix.patch" not in state.deliverables and "review-fix.patch" not in state.open_waits
    # The inputs stay a restore point; the reopened steps' checkpoints do not, for every view.
    assert state.last_valid_checkpoint("impl", verified=True).checkpoint.checkpoint_id == "impl/inputs"
    assert state.verified_checkpoints["impl"].checkpoint.checkpoint_id == "impl/inputs"
    assert state.latest_verified_checkpoint.checkpoint.checkpoint_id == "impl/inputs"


def test_a_change_of_a_part_nothing_used_reopens_nothing() -> None:
    session = Session()
    session.log.add(ScopeChange(request_version=2, summary="s", changed_parts={"deadline": "friday"}))
    state = session.state()
    assert state.scope_changes[-1].reopened_steps == () and state.lifecycle.completed


def test_rejecting_a_deliverable_redoes_the_step_that_made_it_and_nothing_before() -> None:
    session = Session()
    session.log.add(
        Rejection(name="fix.patch", sha256=PATCH.sha256, reason="use git format", by="dana"), actor=DANA
    )
    state = session.state()
    [rejection] = state.rejections
    assert rejection.reopened_steps == ("impl/publish",)
    assert set(rejection.invalidated) == {"op-2", "checkpoint:impl/publish"}
    assert state.tasks["impl/test"].status == TaskStatus.VERIFIED
    publish = state.tasks["impl/publish"]
    assert (publish.status, publish.round, publish.reopened_by_rejection) == (TaskStatus.PLANNED, 2, True)
    assert "use git format" in publish.reopened_because
    assert "fix.patch" not in state.deliverables and not state.lifecycle.completed
    # Never shown as done or ready for review.
    text = render_text(briefing(state))
    assert "verified  impl/publish" not in text
    assert "fix.patch (deliverable, sha256" in text and "use git format" in text
    assert "nothing" in text.split("Ready for review")[1].splitlines()[1]
    # The same bytes rejected again change nothing more; other bytes are not this deliverable.
    session.log.add(Rejection(name="fix.patch", sha256=sha("other"), reason="?"))
    assert session.state().tasks["impl/publish"].round == 2


def test_redoing_a_step_makes_its_new_work_valid_and_its_checkpoint_a_restore_point_again() -> None:
    session = Session()
    session.log.add(Rejection(name="fix.patch", sha256=PATCH.sha256, reason="no"))
    session.base = "checkpoint:impl/test"
    session.step("impl/publish", ("repository",), 3, deliverable=True)
    state = session.state()
    assert state.tasks["impl/publish"].status == TaskStatus.VERIFIED and state.results["op-3"].valid
    assert "fix.patch" in state.deliverables and "review-fix.patch" in state.open_waits
    assert not state.results["op-2"].valid
    assert state.last_valid_checkpoint("impl", verified=True).seq == state.latest_checkpoint.seq


def test_rejecting_a_pending_operation_reopens_its_step_but_rejecting_a_retry_does_not() -> None:
    session = Session()
    log = session.log
    log.add(Task(task_id="impl/ticket", status=TaskStatus.RUNNING, owner="impl", request_parts=()))
    log.add(
        ToolRequest(operation_id="op-t", tool="create_ticket", effect=EffectClass.UNSAFE, step="impl/ticket")
    )
    log.add(
        ApprovalRequest(
            approval_id="approve-op-t",
            operation_id="op-t",
            tool="create_ticket",
            payload_sha256=sha("p"),
            summary="s",
        )
    )
    log.add(
        Approval(
            approval_id="approve-op-t",
            operation_id="op-t",
            payload_sha256=sha("p"),
            granted=False,
            by="dana",
            reason="not yet",
        )
    )
    state = session.state()
    assert state.tasks["impl/ticket"].round == 2 and state.rejections[-1].kind == "approval"
    log.add(
        ToolRequest(operation_id="op-u", tool="create_ticket", effect=EffectClass.UNSAFE, step="impl/ticket")
    )
    log.add(ToolResult(operation_id="op-u", ok=False, error="tracker down"))
    log.add(
        ApprovalRequest(
            approval_id="retry-op-u",
            operation_id="op-u",
            tool="create_ticket",
            payload_sha256=sha("p"),
            summary="s",
            kind="retry",
        )
    )
    text = render_text(briefing(session.state()))
    attention = text.split("Needs attention")[1]
    assert "failed effect op-u: create_ticket (op-u) failed and took no effect: tracker down" in attention
    assert "belay approve parser-fix retry-op-u  (try it once more)" in attention
    assert 'belay reject parser-fix retry-op-u --reason "..."  (go on without it)' in attention
    log.add(
        Approval(
            approval_id="retry-op-u",
            operation_id="op-u",
            payload_sha256=sha("p"),
            granted=False,
            by="dana",
            reason="no ticket needed",
        )
    )
    state = session.state()
    assert state.tasks["impl/ticket"].round == 2  # going on without the effect redoes nothing
    text = render_text(briefing(state))
    assert "failed effect" not in text
    assert "failed  create_ticket op-u" in text and "dana chose to go on without it: no ticket needed" in text


def test_effects_made_in_the_world_are_listed_with_what_they_made_and_when() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    request = log.add(ToolRequest(operation_id="op-1", tool="create_ticket", effect=EffectClass.UNSAFE))
    result = log.add(
        ToolResult(operation_id="op-1", ok=True, output={"id": "TICKET-7"}), parent_seq=request.seq
    )
    state = fold(log.events)
    assert (state.operations["op-1"].effect_ref, state.operations["op-1"].result_at) == (
        "TICKET-7",
        result.created_at,
    )
    [effect] = briefing(state).effects
    assert (effect.outcome, effect.ref, effect.at) == ("made", "TICKET-7", result.created_at)
    assert "made    create_ticket op-1 -> TICKET-7 at 2026-11-29 09:03 UTC" in render_text(briefing(state))


def test_an_approval_says_how_to_fetch_what_it_binds() -> None:
    payload = ArtifactRef(sha256=sha("operation"), size=170, media_type="application/json")
    content = ArtifactRef(sha256=sha("patch bytes"), size=1596)
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(ToolRequest(operation_id="op-p", tool="publish_deliverable", effect=EffectClass.IDEMPOTENT))
    log.add(
        ApprovalRequest(
            approval_id="approve-op-p",
            operation_id="op-p",
            tool="publish_deliverable",
            payload_sha256=payload.sha256,
            summary="publish fix.patch",
            payload_ref=payload,
            content_ref=content,
            content_name="fix.patch",
        )
    )
    [action] = briefing(fold(log.events)).waiting_on_you
    assert [f.command for f in action.fetch] == [
        f"belay artifacts get parser-fix sha256:{content.sha256} -o approve-op-p/fix.patch",
        f"belay artifacts get parser-fix sha256:{payload.sha256} -o approve-op-p.json",
    ]
    waiting = render_text(briefing(fold(log.events))).split("Waiting on you")[1].split("Needs attention")[0]
    assert (
        f"read the bytes it sends out (fix.patch): belay artifacts get parser-fix sha256:{content.sha256}"
        in waiting
    )
    assert "run: belay approve parser-fix approve-op-p" in waiting


def test_a_reopened_session_no_attempt_took_up_waits_for_a_resume_with_the_reason() -> None:
    session = Session()
    session.log.add(Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=1))
    session.log.add(Rejection(name="fix.patch", sha256=PATCH.sha256, reason="no", by="dana"))
    state = session.state()
    liveness = Liveness(now=session.log.events[-1].created_at, lease=1)
    # Nothing broke: the request waits for an attempt to take it up.
    assert phase_of(state, liveness) == Phase.PENDING
    interruption = interruption_of(state, liveness)
    assert interruption is not None and interruption.command == "belay resume parser-fix"
    assert interruption.why == (
        "the session ended and was reopened (fix.patch rejected by dana: no); request v1 waits for a "
        "resume, no attempt has run since"
    )
    session.log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2))
    session.log.add(Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=2, detail="stopped"))
    later = interruption_of(session.state(), liveness.model_copy(update={"lease": 2}))
    assert later is not None and "reopened" not in later.why  # taken up since: not the reason now
