"""`belay brief --follow` prints the briefing again as the record moves on, and stops when the
session ends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from belay.journal.events import Lifecycle, LifecycleKind, Payload, Task, TaskStatus, UserInput
from belay.local.drill import belay_command
from tests.cli.test_decisions import SESSION, write


def next_briefing(follower: subprocess.Popen[str]) -> dict[str, object]:
    assert follower.stdout is not None
    line = follower.stdout.readline()
    assert line, f"the follower ended early: {follower.stderr.read() if follower.stderr else ''}"
    return dict(json.loads(line))


def test_follow_prints_each_change_and_ends_with_the_session(tmp_path: Path) -> None:
    payloads: list[Payload] = [UserInput(goal="fix the parser")]
    write(tmp_path, *payloads)
    follower = subprocess.Popen(
        belay_command(tmp_path, "brief", SESSION, "--follow", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = next_briefing(follower)
        assert (first["last_seq"], first["goal"]) == (1, "fix the parser")

        write(tmp_path, Task(task_id="reproduce", title="Reproduce", status=TaskStatus.RUNNING))
        moving = next_briefing(follower)
        assert moving["last_seq"] == 2
        assert moving["current_step"] == "reproduce"
        assert moving["phase"] == "Running"

        write(tmp_path, Lifecycle(kind=LifecycleKind.SESSION_COMPLETED))
        last = next_briefing(follower)
        assert (last["last_seq"], last["phase"]) == (3, "Succeeded")
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
