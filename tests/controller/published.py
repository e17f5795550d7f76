"""A producer session's record written the way its harness writes it: the operator's request
(bound to the session's uid), then one step of the plan that publishes a deliverable and is
verified, its bytes in a real artifact store. What `inputs[].artifact` of another session takes."""

from __future__ import annotations

from belay.api.agentsession import AgentSessionSpec
from belay.controller.record import request_write
from belay.journal.events import (
    Actor,
    Artifact,
    Checkpoint,
    EffectClass,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    Rejection,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    Verification,
)
from belay.journal.state import EMPTY
from belay.stores.base import ArtifactStore, EventStore

HARNESS = Actor(kind="harness", attempt=1, subagent="writer")
STEP = "writer/report"


async def publish(
    store: EventStore,
    artifacts: ArtifactStore,
    record: str,
    uid: str,
    spec: AgentSessionSpec,
    data: bytes,
    name: str = "report.md",
    round_: int = 1,
) -> str:
    """The request (in the first round only), then a verified step publishing `data` as `name`:
    the sha256 it was published with."""
    if round_ == 1:
        request = request_write(uid, 1, spec, EMPTY)
        assert request is not None
        await store.append(record, list(request.drafts), idempotency_key=request.idempotency_key)
    ref = artifacts.put(data, media_type="text/markdown")
    operation = f"writer.report.{round_}"
    payloads: list[Payload] = [
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=round_, lease=round_),
        Task(task_id=STEP, title="Write the report", status=TaskStatus.RUNNING, owner="writer"),
        ToolRequest(
            operation_id=operation,
            tool="publish_deliverable",
            arguments={"path": f"out/{name}"},
            effect=EffectClass.IDEMPOTENT,
            subagent="writer",
            step=STEP,
        ),
        Artifact(name=name, ref=ref, deliverable=True, subagent="writer", result_id=operation),
        ToolResult(operation_id=operation, ok=True, result_id=operation),
        Task(task_id=STEP, status=TaskStatus.VERIFIED, owner="writer"),
        Checkpoint(
            checkpoint_id=STEP if round_ == 1 else f"{STEP}@{round_}",
            covers_seq=await store.last_seq(record) + 6,
            subagent="writer",
            verification=Verification(command=f"test -s out/{name}", status="passed", exit_code=0),
        ),
    ]
    await store.append(record, [EventDraft(payload=p, actor=HARNESS) for p in payloads])
    return ref.sha256


async def reject(store: EventStore, record: str, sha256: str, name: str = "report.md") -> None:
    """A person turns down the published bytes."""
    rejection = Rejection(name=name, sha256=sha256, reason="wrong numbers", by="dana")
    await store.append(record, [EventDraft(payload=rejection, actor=Actor(kind="user", name="dana"))])
