"""A tool call that cannot do its job is a recorded failed result, never a crashed harness; a turn
that ends without the deliverable then waits on the person, who may end the session there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from belay.api.agentsession import parse_manifest
from belay.journal.decisions import decision_write
from belay.journal.events import Lifecycle, ToolResult, Wait
from belay.journal.state import fold
from belay.local.runtime import LocalHome, run_local


async def test_publishing_a_missing_file_fails_that_call_and_the_session_says_why(tmp_path: Path) -> None:
    plan = {
        "subagents": {
            "solo": {
                "steps": [
                    {
                        "id": "publish",
                        "title": "Publish a file that was never written",
                        "actions": [
                            {"tool": "read_file", "arguments": {"path": "../outside.txt"}},
                            {"tool": "publish_deliverable", "arguments": {"path": "out/missing.txt"}},
                        ],
                    }
                ]
            }
        }
    }
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "missing"},
            "spec": {
                "request": {"goal": "Publish out/missing.txt."},
                "executor": {"type": "scripted", "plan": str(tmp_path / "plan.yaml")},
                "subagents": [{"name": "solo", "deliverable": "missing.txt"}],
            },
        }
    )
    home = LocalHome(tmp_path / "home")
    ended = asyncio.Event()
    running = asyncio.create_task(
        run_local(
            home,
            session,
            with_ticket_service=False,
            on_event=lambda e: ended.set() if isinstance(e.payload, Wait) and e.payload.owed else None,
        )
    )
    # Its turn ended without missing.txt: the session waits on the person, who ends it there.
    await asyncio.wait_for(ended.wait(), 120)
    store = home.open_event_store()
    try:
        state = fold(await store.read("missing"))
        [wait_id] = state.open_waits
        assert state.waits[wait_id].owed == "missing.txt"
        write = decision_write(state, wait_id, False, "nothing to publish", "dana")
        await store.append("missing", list(write.drafts), claim=write.claim)
        result = await asyncio.wait_for(running, 120)
        events = await store.read("missing")
    finally:
        await store.close()
    assert not result.completed and "missing.txt" in result.detail
    failed = {
        e.payload.operation_id: e.payload.error
        for e in events
        if isinstance(e.payload, ToolResult) and not e.payload.ok
    }
    assert set(failed) == {"solo.publish.1", "solo.publish.2"}
    assert all(failed.values())
    ends = [e.payload for e in events if isinstance(e.payload, Lifecycle)]
    assert [(e.kind, e.reason) for e in ends[-2:]] == [
        ("session_failed", "EndedWithoutDeliverable"),
        ("harness_finished", "EndedWithoutDeliverable"),
    ]
