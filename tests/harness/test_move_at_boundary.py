"""A move to another executor recorded after a subagent looked for one and before the step it
decided is written: the step is not begun. The look and the step's start are one decision, the
store's (`unless_newer` on the append), so no timing lets a step begin on the executor the session
has just moved away from and end on the other.

The move is recorded by another writer at exactly that moment: when the harness's append that
begins the step reaches the store, before the store takes it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import parse_manifest
from belay.journal.events import (
    Actor,
    EventDraft,
    ExecutorChange,
    Lifecycle,
    LifecycleKind,
    Task,
    TaskStatus,
    ToolRequest,
)
from belay.journal.operations import current_step_of
from belay.journal.state import fold
from belay.local.runtime import LocalHome, run_local
from belay.stores.sqlite import SqliteEventStore

SESSION = "moved"
SECOND = "second"


def write(path: str) -> dict[str, Any]:
    return {"tool": "write_file", "arguments": {"path": path, "content": "done\n"}}


PLAN = {
    "subagents": {
        "worker": {
            "steps": [
                {"id": "first", "title": "The step before the move", "actions": [write("out/first.txt")]},
                {"id": SECOND, "title": "The step after it", "actions": [write("out/second.txt")]},
            ]
        }
    }
}

MOVE = ExecutorChange(
    from_type="scripted",
    to_type="openai-agents",
    to_model="gpt-5",
    executor={"type": "openai-agents", "model": "gpt-5"},
    by="kubectl-edit",
)


def begins(drafts: Sequence[EventDraft], step: str) -> bool:
    return any(
        isinstance(d.payload, ToolRequest)
        and d.payload.tool == "update_plan"
        and d.payload.arguments.get("step") == step
        and d.payload.arguments.get("status") == "running"
        for d in drafts
    )


async def test_a_move_recorded_as_a_step_is_being_begun_leaves_the_step_unbegun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved_at: list[int] = []
    append = SqliteEventStore.append

    async def move_first(
        self: SqliteEventStore, session_id: str, drafts: Sequence[EventDraft], **options: Any
    ) -> Any:
        if not moved_at and begins(drafts, SECOND):
            # The operator, on an edit of spec.executor, records the move now: after the harness
            # looked for one, before the store takes the batch that begins the step.
            [event] = await append(self, session_id, [EventDraft(payload=MOVE, actor=Actor(kind="operator"))])
            moved_at.append(event.seq)
        return await append(self, session_id, drafts, **options)

    monkeypatch.setattr(SqliteEventStore, "append", move_first)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": SESSION},
            "spec": {
                "request": {"goal": "Two steps."},
                "executor": {"type": "scripted", "plan": str(tmp_path / "plan.yaml")},
                "subagents": [{"name": "worker", "declared": ["out/*"]}],
            },
        }
    )
    home = LocalHome(tmp_path / "home")
    result = await run_local(home, session, with_ticket_service=False)
    monkeypatch.undo()

    store = home.open_event_store()
    try:
        events = await store.read(SESSION)
    finally:
        await store.close()
    assert moved_at, "the harness never began the second step"
    assert not result.completed, result.detail
    stop = events[-1].payload
    assert isinstance(stop, Lifecycle)
    assert (stop.kind, stop.reason) == (LifecycleKind.HARNESS_STOPPED, "ExecutorChanged")
    # Nothing of the step was recorded after the move: it is left whole to the next executor.
    after = [e.payload for e in events if e.seq > moved_at[0]]
    assert not [p for p in after if isinstance(p, ToolRequest)], after
    assert not [p for p in after if isinstance(p, Task) and p.status == TaskStatus.RUNNING], after
    state = fold(events)
    assert current_step_of(state, "worker") is None
    assert not state.open_operations
    assert state.tasks["worker/first"].status == TaskStatus.DONE
