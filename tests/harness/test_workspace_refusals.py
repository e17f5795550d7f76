"""What an agent leaves in its workspace is input, never a fault: a declared path the sandbox refuses
to take (a symlink, a hard link, a named pipe, a socket, a file its mode lets no one read, a file
over the size a declared file may have, a file still being written while the checkpoint hashes it)
fails that step, says which path broke which rule to the agent as the `update_plan` result, and the
other subagents go on. (An escape through a symlinked directory, a device and the disk quota are
refused by the sandbox in tests/sandbox/test_paths.py, test_workspace.py and test_resource_walls.py:
an agent cannot make a device, and the same refusal takes the same path through the harness.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from belay.api.agentsession import parse_manifest
from belay.journal.events import Checkpoint, Task, TaskStatus, ToolResult
from belay.local.runtime import LocalHome, run_local

PLANTS = {
    "symlink": "mkdir -p out && ln -s /etc/passwd out/probe.txt",
    "hard-link": "mkdir -p out && echo mine > kept.txt && ln kept.txt out/probe.txt",
    "fifo": "mkdir -p out && mkfifo out/probe.txt",
    "socket": (
        "mkdir -p out && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('out/probe.txt')\""
    ),
    # A mode that lets no one read it: the sandbox's user owns it, but the server runs as that user.
    "unreadable": "mkdir -p out && echo mine > out/probe.txt && chmod 000 out/probe.txt",
    # Sparse: past the size a declared file may have, without taking the disk.
    "size": "mkdir -p out && truncate -s 2G out/probe.txt",
    # Still being written, by a process the command left behind, while the checkpoint hashes it:
    # large enough that hashing it takes longer than the writer's pauses between writes.
    "changed": (
        "mkdir -p out && head -c 200M /dev/zero > out/probe.txt && "
        "(python3 -c \"import os, time\nfd = os.open('out/probe.txt', os.O_WRONLY)\n"
        "while True: os.pwrite(fd, b'y', 0); time.sleep(0.001)\" >/dev/null 2>&1 &) && sleep 0.2"
    ),
}


def plan_with(plant: str) -> dict[str, object]:
    write = {"tool": "write_file", "arguments": {"path": "out/result.txt", "content": "fine\n"}}
    return {
        "subagents": {
            "prober": {
                "steps": [
                    {
                        "id": "probe",
                        "title": "Leave something the checkpoint cannot take",
                        "actions": [{"tool": "run_command", "arguments": {"command": plant}}],
                    }
                ]
            },
            "worker": {"steps": [{"id": "work", "title": "Write a result", "actions": [write]}]},
        }
    }


async def run_plant(tmp_path: Path, plant: str) -> list[object]:
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan_with(plant)))
    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "planted"},
            "spec": {
                "request": {"goal": "Probe the walls; write a result."},
                "executor": {"type": "scripted", "plan": str(tmp_path / "plan.yaml")},
                "subagents": [
                    {"name": "prober", "declared": ["out/*"]},
                    {"name": "worker", "declared": ["out/*"]},
                ],
            },
        }
    )
    await run_local(LocalHome(tmp_path / "home"), session, with_ticket_service=False)
    store = LocalHome(tmp_path / "home").open_event_store()
    events = await store.read("planted")
    await store.close()
    return list(events)


@pytest.mark.parametrize("rule", sorted(PLANTS))
async def test_a_refused_declared_file_fails_its_step_and_the_others_go_on(tmp_path: Path, rule: str) -> None:
    events = await run_plant(tmp_path, PLANTS[rule])

    done = [
        e.payload
        for e in events
        if isinstance(e.payload, ToolResult) and e.payload.operation_id == "prober.probe.done"
    ]
    assert len(done) == 1 and not done[0].ok
    assert done[0].error is not None and "out/probe.txt" in done[0].error and f"({rule})" in done[0].error
    assert done[0].output == {"step": "probe", "status": "failed", "path": "out/probe.txt", "rule": rule}
    probe = [e.payload for e in events if isinstance(e.payload, Task) and e.payload.task_id == "prober/probe"]
    assert probe[-1].status == TaskStatus.FAILED and "out/probe.txt" in probe[-1].detail
    # No checkpoint took the refused file; the other subagent's step was checkpointed.
    checkpoints = [e.payload for e in events if isinstance(e.payload, Checkpoint)]
    assert all("out/probe.txt" not in {a.name for a in c.declared_artifacts} for c in checkpoints)
    assert any(c.checkpoint_id == "worker/work" for c in checkpoints)
    # The attempt ran to its end: no stop of the harness.
    assert [e.payload.kind for e in events if e.type == "lifecycle"][-1] == "harness_finished"
