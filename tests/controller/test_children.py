"""The coordinator pattern's pure functions: the child's AgentSession from its parent and the
recorded link, the parent link in the child's record (once), and the child's end recorded in the
parent's record (once, with its deliverables as the parent's artifacts and the parent's wait
ended, whether the parent opened the wait before or after the child ended)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from belay.controller import names
from belay.controller.children import (
    OPERATOR,
    child_ended_write,
    child_manifest,
    child_wait_write,
    parent_link_write,
    reopen_in_parent_write,
)
from belay.controller.desired import SessionRef
from belay.controller.kube import KubeClient
from belay.controller.reconciler import SessionMemory, SessionReconciler
from belay.controller.settings import OperatorSettings
from belay.journal.events import (
    Artifact,
    ArtifactRef,
    DerivedFrom,
    EffectClass,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.state import SessionState, fold
from belay.stores.sqlite import SqliteEventStore
from tests.journal.fixtures import LogBuilder, sha

PARENT: dict[str, Any] = {
    "metadata": {
        "name": "release",
        "namespace": "team-a",
        "uid": "uid-release",
        "labels": {"belay.dev/objective": "q4-release"},
    },
    "spec": {
        "request": {"goal": "Release."},
        "executor": {"type": "scripted", "plan": "/plans/coordinator.yaml"},
        "subagents": [{"name": "writer"}],
        "approvals": [{"approvalId": "a", "payloadSha256": "0" * 64}],
        "decisions": [{"id": "w", "verdict": "yes"}],
    },
}
NOTES = ArtifactRef(sha256=sha("notes"), size=5, media_type="text/markdown")


def state_of(payloads: list[Payload], session: str = "release") -> SessionState:
    log = LogBuilder(session)
    for payload in payloads:
        log.add(payload)
    return fold(log.events)


def parent_payloads(*, waiting: bool) -> list[Payload]:
    payloads: list[Payload] = [
        UserInput(goal="Release."),
        SessionLink(
            kind=SessionLinkKind.CHILD,
            session="notes",
            part="Parser & docs!",
            goal="Write the notes.",
            plan="part.yaml",
            operation_id="writer.start.1",
        ),
    ]
    if waiting:
        payloads.append(CHILD_WAIT)
    return payloads


CHILD_WAIT = Wait(
    wait_id="session-notes", kind=WaitKind.ON_EXTERNAL, reason="runs", condition="session:notes"
)


def child_state(*, ended: bool) -> SessionState:
    log = LogBuilder("notes")
    log.add(UserInput(goal="Write the notes."))
    log.add(Artifact(name="notes.md", ref=NOTES, deliverable=True, subagent="writer"))
    log.add(Artifact(name="scratch.txt", ref=ArtifactRef(sha256=sha("s"), size=1, media_type="text/plain")))
    if ended:
        log.add(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED))
    return fold(log.events)


def test_the_child_session_is_the_parents_spec_with_its_own_request_labelled_and_owned() -> None:
    link = state_of(parent_payloads(waiting=False)).children["notes"]
    child = child_manifest(PARENT, link)
    assert child["metadata"]["labels"] == {
        "belay.dev/objective": "q4-release",
        "belay.dev/parent": "release",
        "belay.dev/part": "Parser---docs",
    }
    assert child["metadata"]["annotations"] == {"belay.dev/part": "Parser & docs!"}
    assert child["metadata"]["ownerReferences"][0]["uid"] == "uid-release"
    assert child["spec"]["request"] == {"goal": "Write the notes."}
    assert child["spec"]["executor"]["plan"] == "/plans/part.yaml"
    assert "approvals" not in child["spec"] and "decisions" not in child["spec"]
    assert PARENT["spec"]["executor"]["plan"] == "/plans/coordinator.yaml"  # the parent is not changed


def test_the_child_records_its_parent_once() -> None:
    meta = child_manifest(PARENT, state_of(parent_payloads(waiting=False)).children["notes"])["metadata"]
    write = parent_link_write("uid-notes", meta, fold([]))
    assert write is not None and write.idempotency_key == "parent/uid-notes"
    linked = state_of([d.payload for d in write.drafts], "notes")
    assert linked.parent is not None
    assert (linked.parent.session, linked.parent.part, linked.parent.objective) == (
        "release",
        "Parser & docs!",
        "q4-release",
    )
    assert parent_link_write("uid-notes", meta, linked) is None
    assert parent_link_write("uid-x", {"name": "x"}, fold([])) is None  # not a child


def test_a_child_that_ended_comes_back_with_its_deliverables_and_ends_the_wait() -> None:
    before = parent_payloads(waiting=True)
    assert child_ended_write("uid-release", state_of(before), "notes", child_state(ended=False)) is None
    write = child_ended_write("uid-release", state_of(before), "notes", child_state(ended=True))
    assert write is not None and write.idempotency_key.startswith("child-ended/uid-release/notes/")
    after = state_of([*before, *(d.payload for d in write.drafts)])
    link = after.children["notes"]
    assert (link.phase, dict(link.deliverables)) == ("Succeeded", {"notes.md": NOTES.sha256})
    assert after.artifacts["notes/notes.md"].ref == NOTES and after.artifacts["notes/notes.md"].deliverable
    assert "notes/scratch.txt" not in after.artifacts
    assert not after.open_waits
    assert child_ended_write("uid-release", after, "notes", child_state(ended=True)) is None


def test_a_wait_opened_after_the_child_ended_is_ended_too() -> None:
    before = parent_payloads(waiting=False)
    ended = child_ended_write("uid-release", state_of(before), "notes", child_state(ended=True))
    assert ended is not None
    payloads = [*before, *(d.payload for d in ended.drafts)]
    assert child_wait_write("uid-release", state_of(payloads), "notes") is None  # nothing waits yet
    payloads.append(CHILD_WAIT)
    assert state_of(payloads).open_waits
    write = child_wait_write("uid-release", state_of(payloads), "notes")
    assert write is not None
    assert not state_of([*payloads, *(d.payload for d in write.drafts)]).open_waits


# ---- A child amended after its end: its coordinator reopened, and its next end collected


def child_run(log: LogBuilder, version: int, patch: bytes) -> None:
    """One round of the child's work as the harness records it: its step verified, the patch it
    owes published by it, the session completed."""
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=version, lease=version))
    log.add(Task(task_id="fix", status=TaskStatus.RUNNING, owner="writer", request_parts=("goal",)))
    operation = f"writer.fix.{version}"
    request = log.add(
        ToolRequest(
            operation_id=operation, tool="work", effect=EffectClass.IDEMPOTENT, step="fix", subagent="writer"
        )
    )
    derived = DerivedFrom(request_version=version, request_parts=("goal",))
    ref = ArtifactRef(sha256=sha(patch.decode()), size=len(patch))
    log.add(Artifact(name="fix.patch", ref=ref, deliverable=True, result_id=operation, derived_from=derived))
    log.add(
        ToolResult(operation_id=operation, ok=True, result_id=operation, derived_from=derived),
        parent_seq=request.seq,
    )
    log.add(Task(task_id="fix", status=TaskStatus.VERIFIED, owner="writer"))
    log.add(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="DeliverablesPublished"))


NAMESPACE = "team-a"
COORDINATOR = SessionRef("release", NAMESPACE, "uid-release")
CHILD = SessionRef("notes", NAMESPACE, "uid-notes")


async def write_log(store: SqliteEventStore, ref: SessionRef, events: list[Any], after: int = 0) -> None:
    """The events after the first `after` into the session's record; its first one, the request,
    as the operator writes it (binding the record to the session's uid)."""
    record = names.record_id(ref.namespace, ref.name)
    drafts = [EventDraft(payload=e.payload, parent_seq=e.parent_seq, actor=e.actor) for e in events[after:]]
    if after == 0:
        first = EventDraft(payload=events[0].payload, actor=OPERATOR)
        await store.append(record, [first], idempotency_key=f"request/{ref.uid}/1")
        drafts = drafts[1:]
    await store.append(record, drafts)


async def folded(store: SqliteEventStore, ref: SessionRef) -> SessionState:
    return fold(await store.read(names.record_id(ref.namespace, ref.name)))


async def coordinator_pass(
    reconciler: SessionReconciler, store: SqliteEventStore, memory: SessionMemory
) -> None:
    """The part of the coordinator's pass that follows its children (their AgentSessions exist)."""
    memory.children_created.add(CHILD.name)
    await reconciler._follow(store, COORDINATOR, memory)
    await reconciler._children(store, COORDINATOR, {}, memory)
    await reconciler._follow(store, COORDINATOR, memory)


@pytest.mark.parametrize("reopened_by_the_child", [True, False])
async def test_a_child_amended_after_its_end_reopens_its_coordinator_which_collects_its_next_end(
    tmp_path: Path, reopened_by_the_child: bool
) -> None:
    """`kubectl belay amend` of a child whose end the coordinator collected: the child's pass
    writes the child reopened in the coordinator's record (as `belay amend` does on one machine),
    so the coordinator no longer holds the old bytes, and its pass collects the redone child's new
    bytes. Without the child's pass in between (the child redone before it ran), the coordinator
    collects the new end all the same."""
    store = SqliteEventStore(tmp_path / "events.db", record_key=b"")
    reconciler = SessionReconciler(cast(KubeClient, None), OperatorSettings())
    try:
        parent_log = LogBuilder(names.record_id(NAMESPACE, "release"))
        for payload in parent_payloads(waiting=True):
            parent_log.add(payload)
        await write_log(store, COORDINATOR, parent_log.events)
        child_log = LogBuilder(names.record_id(NAMESPACE, "notes"))
        child_log.add(UserInput(goal="Write the notes."))
        child_log.add(SessionLink(kind=SessionLinkKind.PARENT, session="release", part="Parser & docs!"))
        child_run(child_log, 1, b"patch v1")
        await write_log(store, CHILD, child_log.events)

        coordinator = SessionMemory()
        await coordinator_pass(reconciler, store, coordinator)
        first = coordinator.state.children["notes"]
        assert (first.phase, dict(first.deliverables)) == ("Succeeded", {"fix.patch": sha("patch v1")})

        # The person amends the child's goal; the operator records it in the child's record.
        seen = len(child_log.events)
        child_log.add(ScopeChange(request_version=2, summary="goal", goal="Write the notes, with dates."))
        await write_log(store, CHILD, child_log.events, seen)
        child = SessionMemory(state=await folded(store, CHILD))
        assert child.state.lifecycle.reopened_seq is not None
        if reopened_by_the_child:
            await reconciler._reopen_in_parent(store, CHILD, child)
            await reconciler._reopen_in_parent(store, CHILD, child)  # once, however many passes
            await coordinator_pass(reconciler, store, coordinator)
            reopened = coordinator.state.children["notes"]
            assert (reopened.phase, reopened.deliverables, reopened.round) == ("", (), 2)
            links = [
                e for e in await store.read(names.record_id(NAMESPACE, "release")) if e.type == "session_link"
            ]
            assert [getattr(e.payload, "reopened", False) for e in links].count(True) == 1

        seen = len(child_log.events)
        child_run(child_log, 2, b"patch v2")
        await write_log(store, CHILD, child_log.events, seen)
        await coordinator_pass(reconciler, store, coordinator)
        again = coordinator.state.children["notes"]
        assert (again.phase, dict(again.deliverables)) == ("Succeeded", {"fix.patch": sha("patch v2")})
        assert coordinator.state.artifacts["notes/fix.patch"].ref.sha256 == sha("patch v2")
        # Ended again: the child's later passes reopen nothing.
        child.state = await folded(store, CHILD)
        await reconciler._reopen_in_parent(store, CHILD, child)
        assert (await folded(store, COORDINATOR)).children["notes"].phase == "Succeeded"
    finally:
        await store.close()


def test_a_child_amend_that_reopened_none_of_its_work_leaves_its_collected_end_standing() -> None:
    """An amend of a part the child's finished steps did not use reopens nothing in the child, so
    nothing in its coordinator either; nor does a child whose end the coordinator has not collected."""
    child_log = LogBuilder("notes")
    child_log.add(UserInput(goal="Write the notes."))
    child_run(child_log, 1, b"patch v1")
    parent = state_of(parent_payloads(waiting=False))
    ended = child_ended_write("uid-release", parent, "notes", fold(child_log.events))
    assert ended is not None
    collected = state_of([*parent_payloads(waiting=False), *(d.payload for d in ended.drafts)])
    child_log.add(ScopeChange(request_version=2, summary="deadline", changed_parts={"deadline": "friday"}))
    assert reopen_in_parent_write("uid-notes", collected, "notes", fold(child_log.events)) is None
    child_log.add(ScopeChange(request_version=3, summary="goal", goal="Write the notes, with dates."))
    assert reopen_in_parent_write("uid-notes", parent, "notes", fold(child_log.events)) is None
    write = reopen_in_parent_write("uid-notes", collected, "notes", fold(child_log.events))
    assert write is not None and write.idempotency_key.endswith("/uid-notes")
