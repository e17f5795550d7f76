"""A tool call that cannot do its job is a recorded failed result, never a crashed harness."""

from __future__ import annotations

from pathlib import Path

import yaml

from belay.api.agentsession import parse_manifest
from belay.journal.events import ToolResult
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
    result = await run_local(LocalHome(tmp_path / "home"), session, with_ticket_service=False)
    assert not result.completed and "missing.txt" in result.detail

    store = LocalHome(tmp_path / "home").open_event_store()
    events = await store.read("missing")
    await store.close()
    failed = {
        e.payload.operation_id: e.payload.error
        for e in events
        if isinstance(e.payload, ToolResult) and not e.payload.ok
    }
    assert set(failed) == {"solo.publish.1", "solo.publish.2"}
    assert all(failed.values())
    assert [e.payload.kind for e in events if e.type == "lifecycle"][-1] == "harness_finished"
