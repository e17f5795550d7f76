from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from belay.cli.core.decide import OnDeliverable, OpenItems, collected_by_parent, to_reject
from belay.cli.core.errors import CommandError
from belay.controller.kube import KubeClient
from belay.controller.reconciler import SessionReconciler
from belay.controller.record import (
    ForkSourceMissing,
    executor_change_write,
    fork_write,
    gave_up_write,
    harness_lost_write,
    rejections_not_applied,
    request_editor,
    request_write,
    scope_change_write,
    spec_approval_writes,
    spec_decision_writes,
    spec_rejection_writes,
)
from belay.controller.settings import OperatorSettings
from belay.journal.claims import approval_claim, wait_claim
from belay.journal.events import (
    Actor,
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    EventDraft,
    ExecutorChange,
    Lifecycle,
    Rejection,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
    UserInput,
    UserMessage,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.state import SessionState, fold
from belay.stores.base import ClaimTaken
from belay.stores.sqlite import SqliteEventStore
from belay.views.status.build import session_status
from tests.controller.sessions import EXAMPLE_MANIFEST, spec_with
from tests.journal.fixtures import LogBuilder, sha

UID = "uid-1"
GOAL = EXAMPLE_MANIFEST["spec"]["request"]["goal"]
PARTS = EXAMPLE_MANIFEST["spec"]["request"]["parts"]


def recorded(*payloads: object) -> SessionState:
    log = LogBuilder()
    log.add(UserInput(goal=GOAL, parts=PARTS))
    for payload in payloads:
        log.add(payload)  # type: ignore[arg-type]
    return fold(log.events)


def test_the_request_is_recorded_once_keyed_by_uid_and_generation() -> None:
    write = request_write(UID, 1, spec_with(), SessionState())
    assert write is not None
    assert write.idempotency_key == "request/uid-1/1"
    (draft,) = write.drafts
    # With the executor the session starts on, which a later edit of spec.executor moves it from.
    assert draft.payload == UserInput(goal=GOAL, parts=PARTS, executor=SCRIPTED)
    assert draft.actor.kind == "operator"
    # Once recorded (by this or an earlier pass, or by a fork's copy), a spec change is a scope change.
    assert request_write(UID, 2, spec_with(request={"goal": "other"}), recorded()) is None


SCRIPTED = dict(EXAMPLE_MANIFEST["spec"]["executor"])
MANAGED = {"type": "openai-agents", "model": "gpt-5", "plan": SCRIPTED["plan"], "credentialsSecret": "keys"}


def test_an_edit_of_spec_executor_is_one_move_keyed_by_uid_and_generation() -> None:
    log = LogBuilder()
    log.add(UserInput(goal=GOAL, parts=PARTS, executor=SCRIPTED))
    started = fold(log.events)
    assert executor_change_write(UID, 1, spec_with(), started) is None  # the executor it is on
    write = executor_change_write(UID, 3, spec_with(executor=MANAGED), started, by="kubectl-belay/ana")
    assert write is not None
    assert write.idempotency_key == "executor/uid-1/3"
    (draft,) = write.drafts
    move = draft.payload
    assert isinstance(move, ExecutorChange)
    assert (move.from_type, move.to_type, move.to_model) == ("scripted", "openai-agents", "gpt-5")
    assert move.executor == MANAGED
    assert move.by == "kubectl-belay/ana"
    assert move.at_seq == started.last_seq
    # Once recorded, the record has the session on the new executor: nothing more to write.
    log.add(move)
    assert executor_change_write(UID, 4, spec_with(executor=MANAGED), fold(log.events)) is None
    # A record that never said which executor it started on is not guessed at.
    assert executor_change_write(UID, 3, spec_with(executor=MANAGED), recorded()) is None


def test_no_scope_change_before_the_first_request_or_when_nothing_changed() -> None:
    assert scope_change_write(UID, 1, spec_with(), SessionState()) is None
    assert scope_change_write(UID, 2, spec_with(), recorded()) is None


def test_a_changed_request_is_one_scope_change_keyed_by_uid_and_generation() -> None:
    parts = {**PARTS, "deliverables": "a patch only"}
    parts.pop("repository")
    write = scope_change_write(UID, 4, spec_with(request={"goal": "new goal", "parts": parts}), recorded())
    assert write is not None
    assert write.idempotency_key == "scope/uid-1/4"
    (draft,) = write.drafts
    change = draft.payload
    assert isinstance(change, ScopeChange)
    assert change.request_version == 2
    assert change.goal == "new goal"
    assert change.changed_parts == {"deliverables": "a patch only"}
    assert change.removed_parts == ("repository",)
    assert draft.actor.kind == "operator"


REQUEST = ApprovalRequest(
    approval_id="approve-implementer.publish.3",
    operation_id="implementer.publish.3",
    tool="publish_deliverable",
    payload_sha256=sha("patch-v1"),
    summary="publish",
)


def test_a_spec_grant_approves_the_pending_request_it_names_bound_to_its_hash() -> None:
    for grant in (
        {"operationId": "implementer.publish.3", "payloadSha256": sha("patch-v1")},
        {"approvalId": "approve-implementer.publish.3", "payloadSha256": sha("patch-v1")},
    ):
        (write,) = spec_approval_writes(UID, spec_with(approvals=[grant]), recorded(REQUEST))
        assert write.idempotency_key == f"approval/uid-1/approve-implementer.publish.3/{sha('patch-v1')}"
        approval = write.drafts[0].payload
        assert isinstance(approval, Approval) and approval.granted and approval.by == "spec"
        assert (approval.operation_id, approval.payload_sha256) == ("implementer.publish.3", sha("patch-v1"))
        assert write.claim == approval_claim("approve-implementer.publish.3")


async def test_a_spec_grant_arriving_after_a_persons_decision_leaves_that_decision_standing(
    tmp_path: Path,
) -> None:
    """The pass read the request as pending, then a person rejected it: the grant's append is
    refused by the store under the approval's claim, and the pass goes on."""
    grant = {"operationId": "implementer.publish.3", "payloadSha256": sha("patch-v1")}
    (write,) = spec_approval_writes(UID, spec_with(approvals=[grant]), recorded(REQUEST))
    store = SqliteEventStore(tmp_path / "events.db", record_key=b"")
    try:
        await store.append("s", [EventDraft(payload=UserInput(goal=GOAL)), EventDraft(payload=REQUEST)])
        rejected = Approval(
            approval_id=REQUEST.approval_id,
            operation_id=REQUEST.operation_id,
            payload_sha256=REQUEST.payload_sha256,
            granted=False,
            by="bob",
        )
        await store.append("s", [EventDraft(payload=rejected)], claim=approval_claim(REQUEST.approval_id))
        with pytest.raises(ClaimTaken):
            await store.append(
                "s", list(write.drafts), idempotency_key=write.idempotency_key, claim=write.claim
            )
        reconciler = SessionReconciler(cast(KubeClient, None), OperatorSettings())
        await reconciler._write(store, "s", write)
        decisions = [e.payload for e in await store.read("s") if isinstance(e.payload, Approval)]
        assert [(d.granted, d.by) for d in decisions] == [(False, "bob")]
    finally:
        await store.close()


def test_a_grant_for_another_payload_or_operation_records_nothing() -> None:
    grants = [
        {"approvalId": "approve-implementer.publish.3", "payloadSha256": sha("patch-v2")},
        {"operationId": "never-requested", "payloadSha256": sha("x")},
    ]
    assert spec_approval_writes(UID, spec_with(approvals=grants), recorded(REQUEST)) == []


def test_a_decided_request_gets_no_further_spec_approval() -> None:
    decided = Approval(
        approval_id=REQUEST.approval_id,
        operation_id=REQUEST.operation_id,
        payload_sha256=REQUEST.payload_sha256,
        granted=False,
    )
    grants = [{"operationId": "implementer.publish.3", "payloadSha256": sha("patch-v1")}]
    assert spec_approval_writes(UID, spec_with(approvals=grants), recorded(REQUEST, decided)) == []


def test_lost_and_gave_up_are_keyed_once_per_attempt_and_per_session() -> None:
    lost = harness_lost_write(UID, 3, "s-harness-2", "no harness pod")
    assert lost.idempotency_key == "harness-lost/uid-1/3"
    payload = lost.drafts[0].payload
    assert isinstance(payload, Lifecycle) and payload.attempt == 3 and "s-harness-2" in payload.detail
    assert gave_up_write(UID, 5, 5).idempotency_key == "gave-up/uid-1"


def _source_log() -> LogBuilder:
    log = LogBuilder(session_id="source")
    log.add(UserInput(goal="g"))
    log.add(
        Checkpoint(
            checkpoint_id="cp-1", covers_seq=1, verification=Verification(command="t", status="passed")
        )
    )
    log.add(Checkpoint(checkpoint_id="cp-2", covers_seq=2))
    log.add(
        Checkpoint(
            checkpoint_id="cp-3", covers_seq=3, verification=Verification(command="t", status="passed")
        )
    )
    log.add(UserInput(goal="after"))
    return log


def test_fork_copies_history_through_the_chosen_checkpoint() -> None:
    events = _source_log().events
    write, status = fork_write(UID, events, "cp-2")
    assert [d.payload for d in write.drafts] == [e.payload for e in events[:3]]
    assert (status.session, status.checkpoint_id, status.covers_seq) == ("source", "cp-2", 3)
    write, status = fork_write(UID, events, None)
    assert len(write.drafts) == 4 and status.checkpoint_id == "cp-3"
    assert write.idempotency_key == "fork/uid-1"


def test_fork_from_a_missing_checkpoint_is_refused() -> None:
    with pytest.raises(ForkSourceMissing):
        fork_write(UID, _source_log().events, "cp-9")
    with pytest.raises(ForkSourceMissing):
        fork_write(UID, [], None)


def test_a_scope_change_names_who_edited_the_request_from_the_managed_fields() -> None:
    metadata = {
        "managedFields": [
            {
                "manager": "kubectl-client-side-apply",
                "time": "2026-01-01T09:00:00Z",
                "fieldsV1": {"f:spec": {"f:request": {}}},
            },
            {"manager": "belay-operator", "time": "2026-01-01T10:00:00Z", "fieldsV1": {"f:status": {}}},
            {
                "manager": "kubectl-belay/dana",
                "time": "2026-01-01T09:30:00Z",
                "fieldsV1": {"f:spec": {"f:request": {"f:goal": {}}}},
            },
        ]
    }
    assert request_editor(metadata) == "kubectl-belay/dana"  # the newest that owns spec.request
    assert request_editor({}) == ""
    write = scope_change_write(
        UID, 3, spec_with(request={"goal": "g2"}), recorded(), by=request_editor(metadata)
    )
    assert write is not None
    change = write.drafts[0].payload
    assert isinstance(change, ScopeChange) and change.by == "kubectl-belay/dana"


PUBLISHED = Artifact(
    name="fix.patch", ref=ArtifactRef(sha256=sha("patch-v1"), size=3), deliverable=True, result_id="op"
)


def test_a_spec_rejection_turns_down_exactly_the_pending_payload_or_published_bytes_it_names() -> None:
    entries = [
        {
            "item": "approve-implementer.publish.3",
            "sha256": sha("patch-v1"),
            "reason": "git format",
            "by": "dana",
        },
        {"item": "fix.patch", "sha256": sha("patch-v1"), "reason": "git format"},
        {"item": "fix.patch", "sha256": sha("patch-v2"), "reason": "other bytes"},
    ]
    pending, published = spec_rejection_writes(
        UID, spec_with(rejections=entries), recorded(REQUEST, PUBLISHED)
    )
    decision = pending.drafts[0].payload
    assert isinstance(decision, Approval) and not decision.granted
    assert (decision.by, decision.reason) == ("dana", "git format")
    assert pending.idempotency_key == f"rejection/uid-1/approve-implementer.publish.3/{sha('patch-v1')}"
    rejection = published.drafts[0].payload
    assert rejection == Rejection(name="fix.patch", sha256=sha("patch-v1"), reason="git format", by="spec")
    # Once recorded, the deliverable is withdrawn and the approval decided: nothing more to write.
    assert (
        spec_rejection_writes(
            UID, spec_with(rejections=entries), recorded(REQUEST, PUBLISHED, rejection, decision)
        )
        == []
    )


def test_a_deliverable_collected_from_a_child_is_not_turned_down_in_a_cluster() -> None:
    """The operator does not reopen child sessions yet: `kubectl belay reject` of collected bytes
    is refused, at the coordinator and in the child, recording nothing, and a spec entry written
    by hand for them records nothing either (the collected bytes stand)."""
    note = sha("parser note")
    start = SessionLink(
        kind=SessionLinkKind.CHILD, session="notes-parser", part="parser", deliverable="parser.md"
    )
    ended = SessionLink(
        kind=SessionLinkKind.CHILD,
        session="notes-parser",
        part="parser",
        phase="Succeeded",
        deliverables={"parser.md": note},
    )
    collected = Artifact(
        name="notes-parser/parser.md", ref=ArtifactRef(sha256=note, size=9), deliverable=True
    )
    coordinator = recorded(start, ended, collected)
    entry = {"item": "notes-parser/parser.md", "sha256": note, "reason": "name the versions"}
    assert spec_rejection_writes(UID, spec_with(rejections=[entry]), coordinator) == []
    # Not dropped silently: the operator reports the entry (a Warning event).
    (why,) = rejections_not_applied(spec_with(rejections=[entry]), coordinator).values()
    assert "notes-parser/parser.md" in why and "the operator does not do yet" in why
    other = {**entry, "sha256": sha("other bytes")}
    assert rejections_not_applied(spec_with(rejections=[other]), coordinator) == {}

    at_coordinator = OpenItems.of_status("release-notes", session_status(coordinator))
    with pytest.raises(CommandError, match="the operator does not do yet") as refused:
        to_reject(at_coordinator, "notes-parser/parser.md", "name the versions")
    assert (
        "kubectl belay artifacts get release-notes notes-parser/parser.md -o notes-parser/parser.md"
        in str(refused.value)
    )
    child = recorded(
        SessionLink(kind=SessionLinkKind.PARENT, session="release-notes", part="parser"),
        Artifact(name="parser.md", ref=ArtifactRef(sha256=note, size=9), deliverable=True),
    )
    target = to_reject(OpenItems.of_status("notes-parser", session_status(child)), "parser.md", "why")
    assert isinstance(target, OnDeliverable)
    with pytest.raises(CommandError, match="collected from child session notes-parser"):
        collected_by_parent(target, "notes-parser", at_coordinator)
    # On one machine the same decision goes through: the child is reopened with the reason.
    local = to_reject(OpenItems.of_state(coordinator), "notes-parser/parser.md", "name the versions")
    assert isinstance(local, OnDeliverable) and local.child == "notes-parser"


def test_a_yes_in_spec_decisions_to_a_turn_that_ended_short_is_the_subagents_next_message() -> None:
    """`kubectl belay message` writes a yes with the words: recorded as `belay message` records it."""
    log = LogBuilder()
    log.add(UserInput(goal=GOAL, parts=PARTS))
    wait_id = "turn-ended-researcher.report.2"
    ended = Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason="researcher ended its turn", owed="report.md")
    log.add(ended, actor=Actor(subagent="researcher"))
    decision = {"id": wait_id, "verdict": "yes", "text": "publish the report", "by": "alice"}
    (write,) = spec_decision_writes(UID, spec_with(decisions=[decision]), fold(log.events))
    message, answered = (draft.payload for draft in write.drafts)
    assert isinstance(message, UserMessage)
    assert (message.subagent, message.wait_id, message.text, message.by) == (
        "researcher",
        wait_id,
        "publish the report",
        "alice",
    )
    assert isinstance(answered, Wait) and answered.resolved and answered.owed == "report.md"
    assert write.claim == wait_claim(wait_id)
