"""A sandbox that dies under a running harness (its server killed, as a lost pod would take it) is
replaced and restored in the same attempt: the harness waits for a clean sandbox, restores the last
verified checkpoint's declared files (re-running the verification), and goes on. No completed step
or answered request repeats, and the deliverables are those of an uninterrupted run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.harness.attempt import fault_key
from belay.journal.events import Event, LifecycleEvent, LifecycleKind, ToolRequestEvent
from belay.journal.tools import tool_spec
from belay.local.runtime import LocalHome, install_session, run_local
from belay.sandbox.local import ServerRecord, kill_instance
from tests.belay_cli import deliverables, read_events, steps_run_twice
from tests.harness.example import MANIFEST, SESSION, run_example

LOST = "implementer"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[Event]:
    result, events = run_example(tmp_path_factory.mktemp("reference"), "--quiet")
    assert result.returncode == 0, result.stderr
    return events


def kill_points(events: list[Event]) -> dict[str, str]:
    """Where to kill the implementer's sandbox: right after its first verified step, and between a
    sandbox request of a later step and its result."""
    checkpoint = next(
        e
        for e in events
        if e.type == "checkpoint"
        and e.payload.subagent == LOST  # type: ignore[union-attr]
        and e.payload.verified  # type: ignore[union-attr]
    )
    request = next(
        e
        for e in events
        if isinstance(e, ToolRequestEvent)
        and e.seq > checkpoint.seq
        and e.payload.subagent == LOST
        and tool_spec(e.payload.tool).where == "sandbox"
    )
    return {"after-checkpoint": fault_key(checkpoint), "request-in-flight": fault_key(request)}


def killer(home: LocalHome, point: str, killed: list[str]) -> Callable[[Event], None]:
    """Kills the implementer's sandbox server once, right after the harness records `point`."""
    record = home.sandboxes_dir(SESSION) / LOST / "server.json"

    def on_event(event: Event) -> None:
        if killed or fault_key(event) != point:
            return
        server = ServerRecord.model_validate_json(record.read_text())
        kill_instance(server.instance)
        killed.append(server.instance)

    return on_event


def lifecycle(events: list[Event], kind: LifecycleKind) -> list[LifecycleEvent]:
    return [e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == kind]


@pytest.mark.parametrize("where", ["after-checkpoint", "request-in-flight"])
def test_a_sandbox_lost_mid_run_is_restored_in_the_same_attempt(
    where: str, reference: list[Event], tmp_path: Path
) -> None:
    point = kill_points(reference)[where]
    home = LocalHome(tmp_path / "home")
    session = install_session(home, MANIFEST)
    killed: list[str] = []

    result = asyncio.run(run_local(home, session, on_event=killer(home, point, killed)))

    events = read_events(home.root, SESSION)
    assert killed, f"{point} was never reached"
    assert result.completed, result.detail
    # One attempt from start to end: nothing ended it, nothing started another.
    assert len(lifecycle(events, LifecycleKind.HARNESS_STARTED)) == 1
    assert lifecycle(events, LifecycleKind.HARNESS_LOST) == []
    assert {e.actor.attempt for e in events if e.actor.kind == "harness"} == {result.attempt}
    [replaced] = lifecycle(events, LifecycleKind.SANDBOX_REPLACED)
    assert replaced.payload.subagent == LOST
    assert f"replaces instance {killed[0]}" in replaced.payload.detail
    restored = [e for e in lifecycle(events, LifecycleKind.RESTORED) if e.seq > replaced.seq]
    assert [e.payload.subagent for e in restored] == [LOST]
    assert restored[0].payload.checkpoint_id != f"{LOST}/inputs"  # the verified step, not the start
    assert "verification" in restored[0].payload.detail
    assert steps_run_twice(events) == []
    assert deliverables(events) == deliverables(reference)


def test_a_superseded_attempt_never_starts_a_replacement_sandbox(
    reference: list[Event], tmp_path: Path
) -> None:
    """An attempt that finds its sandbox gone after a newer attempt took the lease (it was frozen,
    not dead) stops there: starting a replacement would stop the newer attempt's sandbox."""
    point = kill_points(reference)["request-in-flight"]
    home = LocalHome(tmp_path / "home")
    session = install_session(home, MANIFEST)
    record = home.sandboxes_dir(SESSION) / LOST / "server.json"
    killed: list[str] = []

    async def take_the_lease() -> None:
        store = home.open_event_store()
        try:
            await store.acquire_lease(SESSION, "a newer attempt")
        finally:
            await store.close()

    def kill_and_supersede(event: Event) -> None:
        if killed or fault_key(event) != point:
            return
        # Another process's store takes the lease, as a resumed attempt would.
        newer = threading.Thread(target=asyncio.run, args=(take_the_lease(),))
        newer.start()
        newer.join()
        server = ServerRecord.model_validate_json(record.read_text())
        kill_instance(server.instance)
        killed.append(server.instance)
        workspaces.update(workspaces_of_lost())

    def workspaces_of_lost() -> set[str]:
        return {path.name for path in record.parent.glob("workspace-*")}

    workspaces: set[str] = set()
    result = asyncio.run(run_local(home, session, on_event=kill_and_supersede))

    assert killed, f"{point} was never reached"
    assert not result.completed
    assert "superseded" in result.detail
    events = read_events(home.root, SESSION)
    assert lifecycle(events, LifecycleKind.SANDBOX_REPLACED) == []
    # No sandbox was started in the killed one's place: no new workspace.
    assert workspaces and workspaces_of_lost() == workspaces
