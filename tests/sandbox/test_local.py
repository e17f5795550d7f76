from __future__ import annotations

from pathlib import Path

import pytest

from belay.sandbox.client import SandboxUnavailable
from belay.sandbox.local import LocalSandbox, ServerRecord, processes_with_marker, stop_recorded_servers
from belay.sandbox.walls import WALLS_ENV
from tests.sandbox.helpers import host_pid, is_running, wait_gone


async def test_start_gives_an_empty_workspace_and_a_healthy_server(tmp_path: Path) -> None:
    sandbox = await LocalSandbox.start(tmp_path, "researcher", "none")
    try:
        assert sandbox.workspace == tmp_path / "researcher" / "workspace-1"
        assert list(sandbox.files.iterdir()) == []
        assert is_running(sandbox.pid)
        assert sandbox.endpoint.startswith("unix://")
        assert sandbox.walls_in_force
        assert (await sandbox.client.health()).workspace == "/workspace"
    finally:
        await sandbox.stop()


async def test_replace_gives_a_clean_workspace(tmp_path: Path) -> None:
    first = await LocalSandbox.start(tmp_path, "implementer", "none")
    await first.client.call("write_file", {"path": "undeclared.txt", "content": "left behind"})
    old_client = first.client
    second = await first.replace()
    try:
        assert second.workspace != first.workspace
        assert second.token != first.token
        assert (await second.client.call("list_files", {}))["output"]["files"] == []
        assert not is_running(first.pid)
        assert first.pid_namespace is not None and first.pid_namespace.processes() == []
        with pytest.raises(SandboxUnavailable):
            await old_client.health()
    finally:
        await second.stop()


async def test_stop_leaves_no_process_in_the_sandbox_pid_namespace(tmp_path: Path) -> None:
    sandbox = await LocalSandbox.start(tmp_path, "worker", "none")
    result = await sandbox.client.call(
        "run_command",
        # Its own session, no environment: neither the process group nor the marker finds it.
        {"command": "env -i setsid sleep 300 > /dev/null 2>&1 & echo $!", "timeout_s": 10},
    )
    escaped = host_pid(sandbox, int(result["output"]["stdout"]))
    assert escaped is not None and is_running(escaped)
    assert sandbox.pid_namespace is not None
    assert escaped in sandbox.pid_namespace.processes()
    await sandbox.stop()
    assert not is_running(escaped)
    assert sandbox.pid_namespace.processes() == []
    assert not is_running(sandbox.pid)
    assert not (sandbox.sandbox_dir / "server.json").exists()
    assert not Path(sandbox.endpoint.removeprefix("unix://")).exists()


async def test_a_server_left_by_a_frozen_harness_is_stopped_by_the_next_start(tmp_path: Path) -> None:
    abandoned = await LocalSandbox.start(tmp_path, "worker", "none")
    # The harness that started it never calls stop() (it was frozen, not killed: a killed one takes
    # its sandboxes along); a resumed harness starts again.
    replacement = await LocalSandbox.start(tmp_path, "worker", "none")
    try:
        await wait_gone(abandoned.pid)
        assert abandoned.pid_namespace is not None and abandoned.pid_namespace.processes() == []
        assert replacement.workspace.name == "workspace-2"
        assert (await replacement.client.health()).instance == replacement.instance
    finally:
        await replacement.stop()
        await abandoned.client.close()


async def test_a_server_whose_start_was_cut_short_is_stopped_by_the_next_start(tmp_path: Path) -> None:
    abandoned = await LocalSandbox.start(tmp_path, "worker", "none")
    # What a harness killed between spawning the server and its first answer leaves on disk: the
    # instance marker only, no pid or namespace yet.
    record = tmp_path / "worker" / "server.json"
    record.write_text(
        ServerRecord(instance=abandoned.instance, workspace=str(abandoned.workspace)).model_dump_json()
    )
    replacement = await LocalSandbox.start(tmp_path, "worker", "none")
    try:
        await wait_gone(abandoned.pid)
        assert processes_with_marker(abandoned.instance) == []
    finally:
        await replacement.stop()
        await abandoned.client.close()


async def test_unknown_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="network profile"):
        await LocalSandbox.start(tmp_path, "worker", "everything")


@pytest.mark.parametrize("walls", ["on", "off"])
async def test_sandbox_does_not_inherit_the_harness_credentials(
    walls: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WALLS_ENV, walls)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    sandbox = await LocalSandbox.start(tmp_path, "worker", "none", isolation_level="best-effort")
    try:
        result = await sandbox.client.call("run_command", {"command": ["env"], "timeout_s": 10})
    finally:
        await sandbox.stop()
    assert sandbox.walls_in_force is (walls == "on")
    environment = result["output"]["stdout"]
    assert "PATH=" in environment
    assert "sk-must-not-leak" not in environment
    assert "also-secret" not in environment


async def test_a_long_base_path_still_gets_a_working_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    sandbox = await LocalSandbox.start(deep, "worker", "none")
    socket_path = Path(sandbox.endpoint.removeprefix("unix://"))
    try:
        assert len(str(socket_path)) < 108
        assert (await sandbox.client.health()).ok
        # The token reaches the server through a pipe: no file holds it.
        assert not (sandbox.sandbox_dir / "token").exists()
    finally:
        await sandbox.stop()
    assert not socket_path.parent.exists()


async def test_a_new_attempt_stops_every_server_the_killed_one_left(tmp_path: Path) -> None:
    researcher = await LocalSandbox.start(tmp_path, "researcher", "none")
    implementer = await LocalSandbox.start(tmp_path, "implementer", "none")
    # The harness is gone; the next attempt clears the field before starting anything.
    assert stop_recorded_servers(tmp_path) == ["implementer", "researcher"]
    await wait_gone(researcher.pid)
    await wait_gone(implementer.pid)
    for sandbox in (researcher, implementer):
        assert sandbox.pid_namespace is not None and sandbox.pid_namespace.processes() == []
    assert stop_recorded_servers(tmp_path) == []
    await researcher.client.close()
    await implementer.client.close()


# Without walls (a subagent that accepted `isolation: best-effort`): the server is a plain process
# of the harness's user, found and stopped through its marker.


async def test_without_walls_stop_kills_what_carries_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WALLS_ENV, "off")
    sandbox = await LocalSandbox.start(tmp_path, "worker", "none", isolation_level="best-effort")
    assert sandbox.pid_namespace is None and not sandbox.walls_in_force
    assert sandbox.walls.startswith("NONE: switched off")
    result = await sandbox.client.call(
        "run_command",
        # setsid puts the sleeper in a session of its own, outside the command's process group.
        {"command": "setsid sleep 300 > /dev/null 2>&1 & echo $!", "timeout_s": 10},
    )
    escaped = int(result["output"]["stdout"])
    assert is_running(escaped)
    assert (await sandbox.client.health()).workspace == str(sandbox.workspace.resolve())
    assert (sandbox.sandbox_dir / "token").stat().st_mode & 0o777 == 0o600
    await sandbox.stop()
    await wait_gone(escaped)
    assert not is_running(sandbox.pid)
    assert processes_with_marker(sandbox.instance) == []
    assert not (sandbox.sandbox_dir / "server.json").exists()
