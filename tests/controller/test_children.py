"""The coordinator pattern's pure functions: the child's AgentSession from its parent and the
recorded link, the parent link in the child's record (once), and the child's end recorded in the
parent's record (once, with its deliverables as the parent's artifacts and the parent's wait
ended, whether the parent opened the wait before or after the child ended)."""

from __future__ import annotations

from typing import Any

from belay.controller.children import child_ended_write, child_manifest, child_wait_write, parent_link_write
from belay.journal.events import (
    Artifact,
    ArtifactRef,
    Lifecycle,
    LifecycleKind,
    Payload,
    SessionLink,
    SessionLinkKind,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.state import SessionState, fold
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
