"""A file larger than an event payload may be goes through the record by hash, also on replay."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from belay.journal.events import ToolRequestEvent
from belay.local.runtime import LocalHome
from tests.belay_cli import completed, read_events, run_belay, run_until

CONTENT = "".join(f"line {i:06d} of a large generated file\n" for i in range(4000))  # ~150 KiB


def write_session(directory: Path) -> Path:
    plan = {
        "subagents": {
            "solo": {
                "steps": [
                    {
                        "id": "big",
                        "title": "Write a large file, then publish it",
                        "verify": {"command": "test -s out/big.txt", "exit_code": 0},
                        "actions": [
                            {"tool": "write_file", "arguments": {"path": "out/big.txt", "content": CONTENT}},
                            {"tool": "run_command", "arguments": {"command": "wc -l out/big.txt"}},
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": "out/big.txt", "name": "big.txt"},
                            },
                        ],
                    }
                ]
            }
        }
    }
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "large"},
        "spec": {
            "request": {"goal": "Publish a large file."},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [{"name": "solo", "deliverable": "big.txt", "declared": ["out/*"]}],
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    (directory / "session.yaml").write_text(yaml.safe_dump(manifest))
    return directory / "session.yaml"


def test_large_content_is_referenced_by_hash_and_replayed_after_a_kill(tmp_path: Path) -> None:
    manifest = write_session(tmp_path / "manifest")
    home = tmp_path / "home"
    # Killed between the command's request and its result: the write before it is replayed.
    reached, _ = run_until(home, ["run", "--quiet", str(manifest)], "tool_request:solo.big.2")
    assert reached
    result = run_belay(home, "resume", "--quiet", "large")
    assert result.returncode == 0, result.stderr
    events = read_events(home, "large")
    assert completed(events)
    [write] = [
        e.payload for e in events if isinstance(e, ToolRequestEvent) and e.payload.tool == "write_file"
    ]
    reference = write.arguments["content"]
    assert reference == {"$artifact": hashlib.sha256(CONTENT.encode()).hexdigest(), "size": len(CONTENT)}
    [artifact] = [e.payload for e in events if e.type == "artifact"]
    assert LocalHome(home).open_artifact_store().get(artifact.ref.sha256) == CONTENT.encode()
    restored = [e.payload for e in events if e.type == "lifecycle" and e.payload.kind == "restored"]
    assert "replayed 1 idempotent operations" in restored[-1].detail
