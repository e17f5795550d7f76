"""`belay brief --follow` prints the briefing again as the record moves on, and when the attempt
stops proving it is alive, and stops when the session ends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from belay.journal.events import Lifecycle, LifecycleKind, Payload, Task, TaskStatus, UserInput
from belay.local.liveness import process_start, this_holder
from belay.local.runtime import LocalHome
from tests.belay_cli import belay_command
from tests.cli.test_decisions import SESSION, write


def take_lease(home: Path, holder: str) -> int:
    """Take the session's next lease as `holder` and renew it once, as a harness attempt does."""

    async def take() -> int:
        store = LocalHome(home).open_event_store()
        try:
            lease = await store.acquire_lease(SESSION, holder)
            await store.renew_lease(SESSION, lease.number)
            return lease.number
        finally:
            await store.close()

    return asyncio.run(take())


def dead_holder() -> str:
    """The holder name of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    holder = f"local:{child.pid}@{process_start(child.pid)}"
    child.communicate(b"")
    return holder


def next_briefing(follower: subprocess.Popen[str]) -> dict[str, object]:
    assert follower.stdout is not None
    line = follower.stdout.readline()
    assert line, f"the follower ended early: {follower.stderr.read() if follower.stderr else ''}"
    return dict(json.loads(line))


def test_follow_ends_when_the_run_ended_without_proving_its_work(tmp_path: Path) -> None:
    lease = take_lease(tmp_path, this_holder())
    write(
        tmp_path,
        UserInput(goal="fix the parser"),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=lease, lease=lease),
        Task(task_id="reproduce", title="Reproduce", status=TaskStatus.RUNNING),
    )
    follower = subprocess.Popen(
        belay_command(tmp_path, "brief", SESSION, "--follow", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert next_briefing(follower)["phase"] == "Running"
        # The run says it completed the session with its step still running: nothing will move.
        write(tmp_path, Lifecycle(kind=LifecycleKind.SESSION_COMPLETED))
        last = next_briefing(follower)
        assert last["phase"] == "NeedsAttention"
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_follow_prints_each_change_and_ends_with_the_session(tmp_path: Path) -> None:
    payloads: list[Payload] = [UserInput(goal="fix the parser")]
    write(tmp_path, *payloads)
    lease = take_lease(tmp_path, this_holder())  # this test plays the live harness attempt
    follower = subprocess.Popen(
        belay_command(tmp_path, "brief", SESSION, "--follow", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = next_briefing(follower)
        assert (first["last_seq"], first["goal"]) == (1, "fix the parser")

        write(
            tmp_path,
            Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=lease, lease=lease),
            Task(task_id="reproduce", title="Reproduce", status=TaskStatus.RUNNING),
        )
        moving = next_briefing(follower)
        assert moving["last_seq"] == 3
        assert moving["current_step"] == "reproduce"
        assert moving["phase"] == "Running" and moving["interruption"] is None

        # The attempt's process is gone: no event says so, the follower notices by itself.
        take_lease(tmp_path, dead_holder())
        gone = next_briefing(follower)
        assert (gone["last_seq"], gone["phase"]) == (3, "Interrupted")
        assert gone["interruption"]["command"] == f"belay resume {SESSION}"

        take_lease(tmp_path, this_holder())
        write(
            tmp_path,
            Task(task_id="reproduce", status=TaskStatus.VERIFIED),
            Lifecycle(kind=LifecycleKind.SESSION_COMPLETED),
        )
        last = next_briefing(follower)
        assert (last["last_seq"], last["phase"]) == (5, "Succeeded")
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
