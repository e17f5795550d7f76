"""Hypothesis strategies for random but well-formed session logs.

Ids come from small pools so that events collide on the same operation, task, approval, note,
wait and result, which is where a fold can go wrong."""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import strategies as st

from belay.journal.events import (
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    Event,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Note,
    NoteKind,
    OperationOutcome,
    Payload,
    Rejection,
    Remote,
    RemoteKind,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
    Summary,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    UserMessage,
    Verification,
    Wait,
    WaitKind,
)
from tests.journal.fixtures import START, LogBuilder, sha

OPS = [f"op{i}" for i in range(5)]
TASKS = [f"task{i}" for i in range(4)]
NOTES = [f"note{i}" for i in range(3)]
WAITS = [f"wait{i}" for i in range(3)]
APPROVALS = [f"apr{i}" for i in range(3)]
RESULTS = [f"res{i}" for i in range(6)]
PARTS = ["goal", "a", "b", "c"]
SUBAGENTS = [None, "researcher", "implementer"]
HASHES = [sha(str(i)) for i in range(3)]
EXPIRIES = [None, START + timedelta(hours=1), START + timedelta(days=1)]

ids = st.sampled_from
derived = st.builds(
    DerivedFrom,
    request_version=st.integers(1, 4),
    request_parts=st.lists(ids(PARTS), max_size=2, unique=True).map(tuple),
    artifacts=st.lists(ids(HASHES), max_size=1).map(tuple),
    results=st.lists(ids(RESULTS), max_size=2, unique=True).map(tuple),
)
artifact_ref = st.builds(ArtifactRef, sha256=ids(HASHES), size=st.integers(0, 100))

payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(
        UserInput, goal=st.text(max_size=5), parts=st.dictionaries(ids(PARTS[1:]), st.text(max_size=3))
    ),
    st.builds(
        ScopeChange,
        request_version=st.integers(2, 4),
        summary=st.just("change"),
        goal=st.one_of(st.none(), st.text(max_size=3)),
        changed_parts=st.dictionaries(ids(PARTS[1:]), st.text(max_size=3), max_size=2),
        removed_parts=st.lists(ids(PARTS[1:]), max_size=1).map(tuple),
    ),
    st.builds(ModelOutput, text=st.text(max_size=5), input_tokens=st.integers(0, 9)),
    st.builds(
        ToolRequest,
        operation_id=ids(OPS),
        tool=ids(["read", "write", "deploy"]),
        arguments=st.dictionaries(st.just("x"), st.integers(0, 2)),
        effect=st.sampled_from(list(EffectClass)),
        step=st.one_of(st.none(), ids(TASKS)),
        subagent=ids(SUBAGENTS),
        idempotency_key=st.one_of(st.none(), st.just("k1")),
    ),
    st.builds(
        ToolResult,
        operation_id=ids(OPS),
        ok=st.booleans(),
        result_id=st.one_of(st.none(), ids(RESULTS)),
        output_ref=st.one_of(st.none(), artifact_ref),
        derived_from=st.one_of(st.none(), derived),
        output=st.one_of(st.none(), st.just({"id": "TICKET-1"})),
    ),
    st.builds(
        ApprovalRequest,
        approval_id=ids(APPROVALS),
        operation_id=ids(OPS),
        tool=st.just("deploy"),
        payload_sha256=ids(HASHES),
        summary=st.just("s"),
        expires_at=ids(EXPIRIES),
        kind=ids(["dispatch", "retry"]),
    ),
    st.builds(
        Approval,
        approval_id=ids(APPROVALS),
        operation_id=ids(OPS),
        payload_sha256=ids(HASHES),
        granted=st.booleans(),
        expires_at=ids(EXPIRIES),
    ),
    st.builds(
        Artifact,
        name=ids(["a.txt", "b.patch"]),
        ref=artifact_ref,
        deliverable=st.booleans(),
        subagent=ids(SUBAGENTS),
        result_id=st.one_of(st.none(), ids(RESULTS)),
        derived_from=st.one_of(st.none(), derived),
    ),
    st.builds(
        Checkpoint,
        checkpoint_id=ids(["cp1", "cp2", *TASKS]),
        covers_seq=st.integers(0, 5),
        subagent=ids(SUBAGENTS),
        result_id=st.one_of(st.none(), ids(RESULTS)),
        derived_from=st.one_of(st.none(), derived),
        verification=st.one_of(
            st.none(),
            st.builds(
                Verification, command=st.just("make check"), status=ids(["passed", "failed", "not_run"])
            ),
        ),
    ),
    st.builds(
        Note,
        note_id=ids(NOTES),
        kind=st.sampled_from(list(NoteKind)),
        text=st.text(max_size=5),
        status=ids(["open", "supported", "rejected", "accepted", "superseded"]),
        result_id=st.one_of(st.none(), ids(RESULTS)),
        derived_from=st.one_of(st.none(), derived),
    ),
    st.builds(
        Task,
        task_id=ids(TASKS),
        title=st.text(max_size=4),
        status=st.sampled_from(list(TaskStatus)),
        owner=ids(SUBAGENTS),
        request_parts=st.one_of(st.none(), st.lists(ids(PARTS), max_size=2, unique=True).map(tuple)),
    ),
    # A subagent's own task, which owes the subagent's deliverable.
    ids(["researcher", "implementer"]).flatmap(
        lambda sub: st.builds(
            Task,
            task_id=st.just(sub),
            owner=st.just(sub),
            status=st.sampled_from(list(TaskStatus)),
            deliverable=ids(["a.txt", "b.patch"]),
        )
    ),
    st.builds(
        Wait,
        wait_id=ids(WAITS),
        kind=st.sampled_from(list(WaitKind)),
        reason=st.just("r"),
        resolved=st.booleans(),
        artifact=st.one_of(st.none(), ids(["a.txt", "b.patch"])),
        owed=st.one_of(st.none(), ids(["a.txt", "b.patch"])),
    ),
    st.builds(
        UserMessage,
        subagent=ids(["researcher", "implementer"]),
        wait_id=ids(WAITS),
        text=st.text(max_size=5),
        by=st.just("dana"),
    ),
    st.builds(
        OperationOutcome,
        operation_id=ids(OPS),
        outcome=ids(["unknown", "reconciled"]),
        succeeded=st.one_of(st.none(), st.booleans()),
    ),
    st.builds(
        Lifecycle,
        kind=st.sampled_from(list(LifecycleKind)),
        attempt=st.one_of(st.none(), st.integers(1, 4)),
        lease=st.one_of(st.none(), st.integers(1, 4)),
        subagent=ids(SUBAGENTS),
    ),
    st.builds(Summary, covers_from_seq=st.just(1), covers_to_seq=st.just(1), text=st.text(max_size=5)),
    st.builds(Rejection, name=ids(["a.txt", "b.patch"]), sha256=ids(HASHES), reason=st.just("no")),
    st.builds(
        Remote,
        kind=st.sampled_from(list(RemoteKind)),
        executor=st.just("openai-agents"),
        subagent=ids(["researcher", "implementer"]),
        remote_session_id=ids(["sess_1", "sess_2"]),
        resource=st.one_of(st.none(), ids(["agent", "environment"])),
        resource_id=st.one_of(st.none(), ids(["agent_1", "env_1"])),
        call_id=st.one_of(st.none(), ids(["call_1", "call_2"])),
        operation_id=st.one_of(st.none(), ids(OPS)),
        detail=st.text(max_size=3),
    ),
    st.builds(
        SessionLink,
        kind=st.sampled_from(list(SessionLinkKind)),
        session=ids(["child-a", "child-b"]),
        part=st.text(max_size=3),
        objective=st.sampled_from(["", "release"]),
        phase=st.sampled_from(["", "Succeeded", "Failed"]),
        deliverables=st.dictionaries(ids(["a.txt", "b.patch"]), ids(HASHES), max_size=2),
    ),
)


@st.composite
def logs(draw: st.DrawFn, max_size: int = 60) -> list[Event]:
    builder = LogBuilder(session_id="s-prop")
    for payload in draw(st.lists(payloads, max_size=max_size)):
        builder.add(payload)
    return builder.events


@st.composite
def splits(draw: st.DrawFn, events: list[Event]) -> list[list[Event]]:
    """The same events cut into consecutive batches at arbitrary points."""
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=6)))
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds)]
