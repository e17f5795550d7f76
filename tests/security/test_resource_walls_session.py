"""A whole `belay run` whose commands run into every resource wall of their sandbox: a fork bomb,
a memory bomb, a disk filler and a command that never exits. Each is a failed tool call in the
record naming the wall and its figure; the harness goes on to the step after them and the session
finishes with its deliverable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from belay.journal.events import Event, Lifecycle, LifecycleKind
from tests.belay_cli import completed, deliverables, read_events, run_belay, steps_run_twice

SESSION = "walls"
ATTACKS = {
    "fork": ("bomb() { bomb | bomb & }; bomb; sleep 30", "process limit 64 reached"),
    "memory": ("python3 -c 'x = b\"m\" * (512 << 20)'", "memory limit 128 MiB reached"),
    "disk": ("head -c 64M /dev/zero > filler; sleep 30", "workspace disk limit 16 MiB reached"),
    "forever": ("sleep 1000", "command time limit 3 s reached"),
}


def step(step_id: str, *actions: dict[str, Any]) -> dict[str, Any]:
    return {"id": step_id, "title": step_id, "actions": list(actions)}


def command(text: str) -> dict[str, Any]:
    return {"tool": "run_command", "arguments": {"command": text, "timeout_s": 600}}


def write_session(workdir: Path) -> Path:
    steps = [step(name, command(text)) for name, (text, _) in ATTACKS.items()]
    steps.append(
        step(
            "deliver",
            {"tool": "run_command", "arguments": {"command": "rm -f filler; echo done > out.txt"}},
            {"tool": "publish_deliverable", "arguments": {"path": "out.txt", "name": "out.txt"}},
        )
    )
    (workdir / "plan.yaml").write_text(yaml.safe_dump({"subagents": {"worker": {"steps": steps}}}))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "a session whose commands run into the sandbox's walls"},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [
                {
                    "name": "worker",
                    "deliverable": "out.txt",
                    "resources": {"processes": 64, "memoryMib": 128, "diskMib": 16, "commandSeconds": 3},
                }
            ],
        },
    }
    path = workdir / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def results(events: list[Event]) -> dict[str, Any]:
    return {e.payload.operation_id: e.payload for e in events if e.type == "tool_result"}


def test_every_wall_is_a_failed_step_and_the_session_finishes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(write_session(tmp_path)), timeout=120)
    events = read_events(home, SESSION)
    # The run goes to its end. The disk wall leaves the workspace full, so the steps after it cannot
    # make their checkpoints: the record does not prove those done, and the session ends needing
    # attention (belay.journal.proof), never Succeeded, naming the wall.
    ended = [
        e
        for e in events
        if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.SESSION_COMPLETED
    ]
    assert ended, ran.stdout + ran.stderr
    assert not completed(events) and ran.returncode != 0
    assert "the record does not prove it done" in ran.stderr and "workspace disk limit" in ran.stderr
    assert "out.txt" in deliverables(events)
    by_operation = results(events)
    for name, (_, figure) in ATTACKS.items():
        # The step's action (`worker.fork.1`), not its framing (`worker.fork.start`).
        tripped = [
            p for op, p in by_operation.items() if op.startswith(f"worker.{name}.") and op[-1].isdigit()
        ]
        assert tripped, f"no result for {name}: {sorted(by_operation)}"
        # Once: a wall is the step's failure, never a retry loop.
        assert len(tripped) == 1, tripped
        assert not tripped[0].ok and figure in (tripped[0].error or ""), tripped
    assert not steps_run_twice(events)
