"""A step whose checkpoint was refused (a symbolic link in a declared path) is never done, and the
page says so under "Needs attention" while the session still waits on the person, naming the step,
why, and what to do (`belay amend`, which has the step done again), not only once the run ended."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.belay_cli import start_belay
from tests.cli.test_children import brief, ready_names, run_belay
from tests.testenv.polling import wait_until

PLAN = {
    "subagents": {
        "writer": {
            "steps": [
                {
                    "id": "write",
                    "title": "Write the note",
                    "verify": {"command": "test -s out/note.md", "exit_code": 0},
                    "actions": [
                        {"tool": "write_file", "arguments": {"path": "out/note.md", "content": "a note\n"}},
                        # A link in a declared path: the step's checkpoint is refused.
                        {"tool": "run_command", "arguments": {"command": "ln -s /etc/hostname out/link"}},
                        {
                            "tool": "publish_deliverable",
                            "arguments": {"path": "out/note.md", "name": "note.md"},
                        },
                    ],
                },
                {
                    "id": "ask",
                    "title": "Ask about the wording",
                    "actions": [{"tool": "wait_on_user", "arguments": {"reason": "Is the wording right?"}}],
                },
            ]
        }
    }
}


def manifest(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    spec = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "linked"},
        "spec": {
            "request": {"goal": "Write a note."},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [
                {"name": "writer", "networkProfile": "none", "deliverable": "note.md", "declared": ["out/*"]}
            ],
        },
    }
    (directory / "session.yaml").write_text(yaml.safe_dump(spec))
    return directory / "session.yaml"


def test_a_refused_checkpoint_needs_attention_with_what_to_do_while_the_session_waits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = start_belay(home, "run", str(manifest(tmp_path / "linked")))
    try:
        wait_until(
            lambda: ready_names(home, "linked", section="waiting_on_you") != [],
            "the session waiting on the person",
            timeout=90,
            while_running=run,
        )
        page = brief(home, "linked")
        text = run_belay(home, "brief", "linked").stdout
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert page["phase"] == "WaitingOnUser", page["phase"]
    [step] = [s for s in page["steps"] if s["task_id"] == "writer/write"]
    assert step["status"] == "failed"
    [attention] = [a for a in page["needs_attention"] if a["id"] == "writer/write"]
    assert "the checkpoint of step 'write' was refused" in attention["summary"]
    assert "'out/link' refused (symlink)" in attention["summary"]
    assert attention["command"] == 'belay amend linked --goal "..."', attention
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("unproven writer/write: "))
    assert lines[at + 1].strip() == 'run: belay amend linked --goal "..."', text
