"""Liveness on one machine: lease holders as processes, and the reaper that stops the sandbox
servers of a dead attempt, and only those."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.local.liveness import (
    holder_alive,
    holder_process,
    process_alive,
    process_start,
    reap_orphans,
    sandbox_lock,
    this_holder,
)
from belay.local.runtime import LocalHome
from belay.sandbox.local import ServerRecord
from belay.sandbox.protocol import INSTANCE_ENV

SESSION = "s"


def test_a_holder_names_this_process_and_is_alive_only_while_it_runs() -> None:
    holder = this_holder()
    process = holder_process(holder)
    assert process is not None and process[0] > 0 and process[1] == process_start(process[0])
    assert holder_alive(holder) is True
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = f"local:{child.pid}@{process_start(child.pid)}"
    child.wait()
    assert holder_alive(gone) is False
    # The same pid with another start time is another process.
    assert holder_alive(f"local:{process[0]}@{(process[1] or 0) + 1}") is False
    assert holder_alive("pod:s-harness-0") is None  # not a process this machine can see


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[tuple[LocalHome, subprocess.Popen[bytes]]]:
    """A process standing in for a sandbox server: recorded in server.json the way the local
    sandbox records one (its pid, its instance marker, its workspace on its command line)."""
    home = LocalHome(tmp_path / "home")
    sandbox_dir = home.sandboxes_dir(SESSION) / "worker"
    workspace = sandbox_dir / "workspace-1"
    workspace.mkdir(parents=True)
    instance = "f" * 32
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(600)", str(workspace)],
        env={INSTANCE_ENV: instance},
        start_new_session=True,
    )
    record = ServerRecord(instance=instance, workspace=str(workspace), pid=server.pid)
    (sandbox_dir / "server.json").write_text(record.model_dump_json())
    try:
        yield home, server
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def take_lease(home: LocalHome, holder: str) -> None:
    async def take() -> None:
        store = home.open_event_store()
        try:
            await store.acquire_lease(SESSION, holder)
        finally:
            await store.close()

    asyncio.run(take())


def reap(home: LocalHome) -> list[str]:
    found = asyncio.run(reap_orphans(home.root / "sessions", lambda _: home.open_event_store()))
    return [r.message() for r in found]


def test_the_servers_of_a_live_attempt_are_left_alone(
    fake_server: tuple[LocalHome, subprocess.Popen[bytes]],
) -> None:
    home, server = fake_server
    take_lease(home, this_holder())
    assert reap(home) == []
    assert process_alive(server.pid)


def test_the_servers_of_a_dead_attempt_are_stopped_and_named(
    fake_server: tuple[LocalHome, subprocess.Popen[bytes]],
) -> None:
    home, server = fake_server
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = f"local:{child.pid}@{process_start(child.pid)}"
    child.wait()
    take_lease(home, dead)
    [message] = reap(home)
    assert message == (
        f"belay: session {SESSION}: its harness process {child.pid} is gone; stopped the 1 sandbox "
        "process(es) it left running (worker)"
    )
    assert server.wait(timeout=30) != 0
    assert not (home.sandboxes_dir(SESSION) / "worker" / "server.json").exists()
    assert reap(home) == []  # nothing left to say


def test_a_server_that_is_starting_is_never_taken_for_an_orphan(
    fake_server: tuple[LocalHome, subprocess.Popen[bytes]],
) -> None:
    home, server = fake_server  # no lease at all: nothing proves an attempt alive
    with sandbox_lock(home.session_dir(SESSION), exclusive=False):
        assert reap(home) == []
        assert process_alive(server.pid)
    assert len(reap(home)) == 1
