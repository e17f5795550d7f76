from __future__ import annotations

from datetime import timedelta

import pytest

from belay.journal.events import (
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    OperationOutcome,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.phase import STATUS_LIST_LIMIT, Liveness, Phase, attempt_alive, interruption_of, phase_of
from belay.journal.state import fold
from belay.views.status.build import session_status, with_transition_times
from belay.views.status.model import Condition, ConditionType, Reason, SessionStatus
from tests.journal.fixtures import NOW, PATCH, PUBLISH_SHA, LogBuilder, realistic_log, sha

START = [
    Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
    UserInput(goal="do it"),
    Task(task_id="t1", title="step one", status=TaskStatus.RUNNING, owner="worker"),
]


def status_after(*payloads: Payload, start: bool = True) -> SessionStatus:
    log = LogBuilder()
    for payload in [*(START if start else []), *payloads]:
        log.add(payload)
    return session_status(fold(log.events))


def conditions(status: SessionStatus) -> dict[str, tuple[str, str]]:
    return {c.type.value: (c.status, str(c.reason)) for c in status.conditions}


def test_pending_before_any_request() -> None:
    status = status_after(start=False)
    assert status.phase == Phase.PENDING
    assert conditions(status)["Ready"] == ("False", Reason.INITIALIZING)
    assert conditions(status)["Reconciling"] == ("True", Reason.INITIALIZING)


def test_running_is_ready_and_reports_nothing_abnormal() -> None:
    status = status_after()
    assert status.phase == Phase.RUNNING
    assert status.current_step == "t1"
    c = conditions(status)
    assert c["Ready"] == ("True", Reason.RUNNING)
    assert "Reconciling" not in c and "Stalled" not in c  # abnormal-true: absent while normal
    assert c["WaitingOnUser"][0] == "False"
    assert c["WaitingOnExternal"][0] == "False"
    assert c["ReadyForReview"][0] == "False"
    assert c["Recovering"][0] == "False"
    assert [s.name for s in status.subagents] == ["worker"]
    assert status.subagents[0].running == 1


@pytest.mark.parametrize(
    ("payloads", "reason", "waiting_on"),
    [
        (
            [
                ApprovalRequest(
                    approval_id="apr-1",
                    operation_id="op-1",
                    tool="deploy",
                    payload_sha256=PUBLISH_SHA,
                    summary="s",
                )
            ],
            Reason.AWAITING_APPROVAL,
            "approval apr-1",
        ),
        (
            [
                ToolRequest(operation_id="op-2", tool="push", effect=EffectClass.UNSAFE),
                OperationOutcome(operation_id="op-2", outcome="unknown"),
            ],
            Reason.AWAITING_RECONCILIATION,
            "reconcile op-2",
        ),
        (
            [Wait(wait_id="pick", kind=WaitKind.ON_USER, reason="pick a name")],
            Reason.AWAITING_DECISION,
            "user: pick",
        ),
    ],
)
def test_waiting_on_the_user(payloads: list[Payload], reason: Reason, waiting_on: str) -> None:
    status = status_after(*payloads)
    assert status.phase == Phase.WAITING_ON_USER
    assert status.waiting_on == waiting_on
    assert conditions(status)["WaitingOnUser"] == ("True", reason)
    assert conditions(status)["Ready"][0] == "True"  # waiting on a person is healthy


def test_waiting_on_an_external_condition() -> None:
    status = status_after(Wait(wait_id="ci", kind=WaitKind.ON_EXTERNAL, reason="CI", condition="ci == green"))
    assert status.phase == Phase.WAITING_ON_EXTERNAL
    assert status.waiting_on == "external: ci == green"
    condition = status.condition(ConditionType.WAITING_ON_EXTERNAL)
    assert condition is not None and condition.status == "True" and condition.message == "ci == green"


def test_ready_for_review_once_nothing_runs() -> None:
    status = status_after(
        Artifact(name="report.md", ref=PATCH, deliverable=True),
        Wait(wait_id="review", kind=WaitKind.READY_FOR_REVIEW, reason="done", artifact="report.md"),
        Task(task_id="t1", status=TaskStatus.DONE),
    )
    assert status.phase == Phase.READY_FOR_REVIEW
    assert conditions(status)["ReadyForReview"] == ("True", Reason.DELIVERABLE_READY)
    [deliverable] = status.deliverables
    assert deliverable.ready_for_review and deliverable.sha256 == PATCH.sha256
    assert deliverable.command == "belay artifacts get parser-fix report.md -o report.md"
    assert deliverable.location == PATCH.uri


def test_recovering_after_a_harness_loss_until_restored() -> None:
    lost = status_after(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1, reason="PodDeleted"))
    assert lost.phase == Phase.RECOVERING
    c = conditions(lost)
    assert c["Ready"] == ("False", Reason.HARNESS_LOST)
    assert c["Reconciling"] == ("True", Reason.RESTORING)
    assert c["Recovering"] == ("True", Reason.RESTORING)
    restored = status_after(
        Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2),
        Lifecycle(kind=LifecycleKind.RESTORED, attempt=2, checkpoint_id="cp"),
    )
    assert restored.phase == Phase.RUNNING
    assert conditions(restored)["Recovering"][0] == "False"
    assert (restored.attempt, restored.lease, restored.restores, restored.harness_lost) == (2, 2, 1, 1)


def test_a_failed_recovery_is_stalled_with_its_reason() -> None:
    status = status_after(
        Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1),
        Lifecycle(
            kind=LifecycleKind.RECOVERY_FAILED,
            attempt=2,
            reason="UndeclaredState",
            detail="verification differs after restore",
        ),
    )
    assert status.phase == Phase.RECOVERY_FAILED
    c = conditions(status)
    assert c["Stalled"] == ("True", "UndeclaredState")
    assert c["Ready"] == ("False", Reason.RECOVERY_FAILED)
    assert "Reconciling" not in c  # stalled, not progressing
    stalled = status.condition(ConditionType.STALLED)
    assert stalled is not None and stalled.message == "verification differs after restore"


def test_succeeded_and_failed() -> None:
    completed = Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="all steps verified")
    done = status_after(Task(task_id="t1", status=TaskStatus.VERIFIED, owner="worker"), completed)
    assert done.phase == Phase.SUCCEEDED
    assert conditions(done)["Ready"] == ("True", Reason.COMPLETED)
    # The run said it completed with its step still running: the record does not prove it done.
    claimed = status_after(completed)
    assert claimed.phase == Phase.NEEDS_ATTENTION
    assert conditions(claimed)["Ready"] == ("False", Reason.UNPROVEN)
    assert conditions(claimed)["Stalled"] == ("True", Reason.UNPROVEN)
    [ready] = [c for c in claimed.conditions if c.type == ConditionType.READY]
    assert ready.message == "the run ended, and the record does not prove it done: step t1 is running"
    assert claimed.waiting_on == "attention: step t1 is running"
    failed = status_after(Lifecycle(kind=LifecycleKind.SESSION_FAILED, reason="budget exhausted"))
    assert failed.phase == Phase.FAILED
    assert conditions(failed)["Ready"] == ("False", Reason.FAILED)
    assert conditions(failed)["Stalled"] == ("True", Reason.FAILED)


def test_lists_are_bounded_with_a_count_of_the_rest() -> None:
    many = STATUS_LIST_LIMIT + 5
    payloads: list[Payload] = []
    for i in range(many):
        payloads.append(
            ApprovalRequest(
                approval_id=f"apr-{i:02}",
                operation_id=f"op-{i}",
                tool="t",
                payload_sha256=sha(str(i)),
                summary="",
            )
        )
        payloads.append(
            Artifact(name=f"out-{i:02}.txt", ref=ArtifactRef(sha256=sha(f"o{i}"), size=1), deliverable=True)
        )
        payloads.append(Wait(wait_id=f"w-{i:02}", kind=WaitKind.ON_EXTERNAL, reason="r"))
        payloads.append(Task(task_id=f"task-{i}", status=TaskStatus.PLANNED, owner=f"agent-{i:02}"))
    status = status_after(*payloads)
    assert len(status.pending_approvals) == STATUS_LIST_LIMIT and status.pending_approvals_omitted == 5
    assert status.pending_approvals[0].approval_id == "apr-00"
    assert status.pending_approvals[0].payload_sha256 == sha("0")
    assert status.pending_approvals[0].command == "belay approve parser-fix apr-00"
    assert len(status.deliverables) == STATUS_LIST_LIMIT and status.deliverables_omitted == 5
    assert len(status.waits) == STATUS_LIST_LIMIT and status.waits_omitted == 5
    assert (
        len(status.subagents) == STATUS_LIST_LIMIT
        and status.subagents_omitted == many + 1 - STATUS_LIST_LIMIT
    )
    assert status.counts.pending_approvals == many


def test_status_of_the_realistic_session_serializes_in_kubernetes_style() -> None:
    status = session_status(fold(realistic_log()))
    body = status.to_status()
    assert body["phase"] == "WaitingOnUser"
    assert body["currentStep"] == "publish"
    assert body["pendingApprovals"][0]["payloadSha256"] == PUBLISH_SHA
    assert body["unknownOutcomes"] == ["op-push-1"]
    assert body["lastVerifiedCheckpoint"]["checkpointId"] == "cp-1"
    assert body["counts"]["invalidResults"] == 1
    types = [c["type"] for c in body["conditions"]]
    assert types[0] == "Ready" and len(types) == len(set(types))


def test_transition_time_moves_only_when_the_status_changes() -> None:
    before = [
        Condition(type=ConditionType.READY, status="True", reason=Reason.RUNNING, last_transition_time=NOW),
        Condition(
            type=ConditionType.RECOVERING,
            status="False",
            reason=Reason.NOT_RECOVERING,
            last_transition_time=NOW,
        ),
    ]
    later = NOW + timedelta(minutes=5)
    now = [
        Condition(type=ConditionType.READY, status="True", reason=Reason.RUNNING, message="new message"),
        Condition(type=ConditionType.RECOVERING, status="True", reason=Reason.RESTORING),
    ]
    merged = {c.type: c for c in with_transition_times(before, now, later)}
    assert merged[ConditionType.READY].last_transition_time == NOW
    assert merged[ConditionType.RECOVERING].last_transition_time == later


# --------------------------------------------------------------------------------------------------
# Liveness: the phase of a session whose attempt stopped proving it is alive


def running_log(*payloads: Payload) -> LogBuilder:
    """Attempt 1 (lease 1) running step t1, then `payloads`; events one minute apart from START."""
    log = LogBuilder()
    log.add(UserInput(goal="do it"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    log.add(Task(task_id="t1", title="step one", status=TaskStatus.RUNNING, owner="worker"))
    for payload in payloads:
        log.add(payload)
    return log


def live(log: LogBuilder, **changes: object) -> Liveness:
    """Lease 1, renewed a second after the last event, looked at ten seconds later."""
    renewed = log.events[-1].created_at + timedelta(seconds=1)
    fields: dict[str, object] = {
        "now": renewed + timedelta(seconds=10),
        "lease": 1,
        "holder": "harness process 4242",
        "renewed_lease": 1,
        "renewed_at": renewed,
        "holder_alive": True,
    }
    return Liveness.model_validate({**fields, **changes})


OPEN_OPERATIONS = [
    ToolRequest(operation_id="op-read", tool="read_file", effect=EffectClass.READ_ONLY, subagent="worker"),
    ToolRequest(operation_id="op-write", tool="write_file", effect=EffectClass.IDEMPOTENT, step="t1"),
    ToolRequest(operation_id="op-push", tool="git_push", effect=EffectClass.KEYED, idempotency_key="k-1"),
    ToolRequest(operation_id="op-ticket", tool="create_ticket", effect=EffectClass.UNSAFE, subagent="worker"),
]


def test_a_live_attempt_keeps_the_phase_the_record_shows() -> None:
    log = running_log(*OPEN_OPERATIONS)
    state = fold(log.events)
    assert phase_of(state, live(log)) == Phase.RUNNING == phase_of(state)
    assert attempt_alive(state, live(log))
    assert interruption_of(state, live(log)) is None
    # An attempt that took the lease a moment ago and has not renewed yet, its process seen alive.
    assert phase_of(state, live(log, lease=2, renewed_lease=1)) == Phase.RUNNING


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"holder_alive": False}, "attempt 1 is gone: its harness process 4242 no longer exists"),
        ({"holder_alive": None, "now": NOW}, "attempt 1 stopped renewing its lease"),
        ({"holder_alive": True, "now": NOW}, "attempt 1 stopped renewing its lease"),
    ],
    ids=["process-gone", "renewal-overdue", "frozen-process"],
)
def test_an_attempt_that_stopped_proving_it_is_alive_is_interrupted(
    changes: dict[str, object], why: str
) -> None:
    log = running_log(*OPEN_OPERATIONS)
    state = fold(log.events)
    liveness = live(log, **changes)
    assert not attempt_alive(state, liveness)
    assert phase_of(state, liveness) == Phase.INTERRUPTED
    gone = interruption_of(state, liveness)
    assert gone is not None and gone.why.startswith(why)
    assert gone.command == "belay resume parser-fix"
    # Its last sign of life: the renewal a second after the last event.
    assert gone.since == log.events[-1].created_at + timedelta(seconds=1)
    assert "step t1" in gone.doing and "4 operation(s) without a result" in gone.doing


def test_each_interrupted_operation_says_what_resume_will_do_by_its_effect_class() -> None:
    log = running_log(*OPEN_OPERATIONS, OperationOutcome(operation_id="op-old", outcome="unknown"))
    state = fold(log.events)
    gone = interruption_of(state, live(log, holder_alive=False))
    assert gone is not None
    settled = {o.operation_id: o.settled for o in gone.operations}
    prefix = "interrupted, will be settled on resume: "
    assert settled == {
        "op-read": prefix + "read_only: runs again under the same operation id",
        "op-write": prefix + "idempotent: runs again under the same operation id",
        "op-push": prefix + "keyed: runs again with the same idempotency key (k-1)",
        "op-ticket": prefix + "unsafe: never repeated; its outcome is recorded unknown and probed, "
        "and if the probe cannot tell, you reconcile it",
    }
    # An outcome already unknown waits on a person (a reconciliation), not on resume.
    assert "op-old" not in settled


def test_an_interrupted_session_stalls_until_resumed_and_still_shows_its_approvals() -> None:
    log = running_log(
        *OPEN_OPERATIONS,
        ApprovalRequest(
            approval_id="apr-1",
            operation_id="op-ticket",
            tool="create_ticket",
            payload_sha256=PUBLISH_SHA,
            summary="file a ticket",
        ),
    )
    status = session_status(fold(log.events), liveness=live(log, holder_alive=False))
    assert status.phase == Phase.INTERRUPTED
    assert status.waiting_on == "belay resume parser-fix"
    c = conditions(status)
    assert c["Ready"] == ("False", Reason.INTERRUPTED)
    assert c["Stalled"] == ("True", Reason.INTERRUPTED)
    assert c["Recovering"] == ("False", Reason.NOT_RECOVERING)
    assert "Reconciling" not in c
    # The approval still waits on the person, and still says so.
    assert c["WaitingOnUser"] == ("True", Reason.AWAITING_APPROVAL)
    assert [a.approval_id for a in status.pending_approvals] == ["apr-1"]
    assert status.interruption is not None and status.interruption.command == "belay resume parser-fix"


def test_an_attempt_that_finished_without_ending_the_session_is_interrupted_with_its_reason() -> None:
    log = running_log(
        Lifecycle(
            kind=LifecycleKind.HARNESS_FINISHED, attempt=1, detail="deliverables not published: fix.patch"
        )
    )
    state = fold(log.events)
    # The process still exists and renewed a moment ago: the record says the attempt is over.
    liveness = live(log)
    assert phase_of(state, liveness) == Phase.INTERRUPTED
    gone = interruption_of(state, liveness)
    assert gone is not None
    assert gone.why == "attempt 1 stopped without ending the session: deliverables not published: fix.patch"


def test_a_request_no_attempt_took_up_is_interrupted_locally_and_pending_in_a_cluster() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="do it"))
    state = fold(log.events)
    nobody = Liveness(now=NOW)
    assert phase_of(state, nobody) == Phase.INTERRUPTED
    gone = interruption_of(state, nobody)
    assert gone is not None and gone.why == "no harness attempt has started on the recorded request"
    assert phase_of(state, nobody.model_copy(update={"recovered_by": "operator"})) == Phase.PENDING
    assert phase_of(fold([]), nobody) == Phase.PENDING  # nothing asked yet


def test_in_a_cluster_a_silent_attempt_is_recovering_by_the_operator() -> None:
    log = running_log(*OPEN_OPERATIONS)
    state = fold(log.events)
    silent = live(log, holder="pod:s-harness-1", holder_alive=None, recovered_by="operator", now=NOW)
    status = session_status(state, liveness=silent)
    assert status.phase == Phase.RECOVERING
    c = conditions(status)
    assert c["Ready"] == ("False", Reason.HARNESS_SILENT)
    assert c["Recovering"] == ("True", Reason.HARNESS_SILENT)
    assert c["Reconciling"] == ("True", Reason.RESTORING)
    assert status.interruption is not None and status.interruption.command is None
    assert "the operator records attempt 1 lost" in status.interruption.next
    assert status.interruption.operations[0].settled.startswith(
        "interrupted, will be settled by the next attempt"
    )
    # Once recorded lost, the reason is the loss; the new attempt restoring is not interrupted.
    lost = running_log(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1))
    fenced = live(
        lost, lease=2, renewed_lease=1, holder="belay-operator", holder_alive=None, recovered_by="operator"
    )
    assert conditions(session_status(fold(lost.events), liveness=fenced))["Ready"] == (
        "False",
        Reason.HARNESS_LOST,
    )


def test_recovery_failed_is_its_own_phase_whatever_the_liveness() -> None:
    log = running_log(
        Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2),
        Lifecycle(
            kind=LifecycleKind.RECOVERY_FAILED, attempt=2, reason="UndeclaredState", detail="exit 1, not 0"
        ),
        Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=2, reason="UndeclaredState"),
    )
    state = fold(log.events)
    for liveness in (None, live(log, holder_alive=False), live(log, recovered_by="operator")):
        assert phase_of(state, liveness) == Phase.RECOVERY_FAILED
        assert interruption_of(state, liveness) is None
    status = session_status(state, liveness=live(log, holder_alive=False))
    assert status.waiting_on == "recovery failed: UndeclaredState"
    assert conditions(status)["Stalled"] == ("True", "UndeclaredState")


def test_ended_sessions_ignore_liveness() -> None:
    done = running_log(
        Task(task_id="t1", status=TaskStatus.VERIFIED, owner="worker"),
        Lifecycle(kind=LifecycleKind.SESSION_COMPLETED),
    )
    claimed = running_log(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED))
    failed = running_log(Lifecycle(kind=LifecycleKind.SESSION_FAILED, reason="MaxAttempts"))
    assert phase_of(fold(done.events), live(done, holder_alive=False)) == Phase.SUCCEEDED
    assert phase_of(fold(claimed.events), live(claimed, holder_alive=False)) == Phase.NEEDS_ATTENTION
    assert phase_of(fold(failed.events), live(failed, holder_alive=False)) == Phase.FAILED
