"""The walls around a local sandbox: what is in force, what a machine without them gets, and that
the tools a session runs still work inside them. (tests/security/ runs the attacks.)"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
from pathlib import Path

import pytest
import yaml

from belay.api.agentsession import ManifestError, parse_manifest
from belay.sandbox.local import LocalSandbox
from belay.sandbox.walls import BWRAP_ENV, SANDBOX_UID, WALLS_ENV, WallsUnavailable
from tests.belay_cli import read_events, run_belay
from tests.sandbox.helpers import is_running
from tests.testenv.processes import pid_cmdline

ROOT = os.geteuid() == 0


def missing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BWRAP_ENV, str(tmp_path / "no-bwrap-here"))


def refusing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bwrap the kernel refuses its namespaces, as on a machine without user namespaces."""
    script = tmp_path / "bwrap"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n'
        "echo 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv(BWRAP_ENV, str(script))


@pytest.mark.parametrize("machine", [missing_bwrap, refusing_bwrap])
async def test_a_required_sandbox_refuses_to_start_without_walls(
    machine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine(tmp_path, monkeypatch)  # type: ignore[operator]
    with pytest.raises(WallsUnavailable) as refused:
        await LocalSandbox.start(tmp_path, "worker", "none")
    message = str(refused.value)
    assert "apt-get install bubblewrap" in message and "isolation: best-effort" in message
    assert "not installed" in message or "No permissions to create new namespace" in message
    assert not (tmp_path / "worker").exists()  # refused before anything was made


@pytest.mark.parametrize("machine", [missing_bwrap, refusing_bwrap])
async def test_best_effort_runs_without_walls_and_says_so(
    machine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine(tmp_path, monkeypatch)  # type: ignore[operator]
    sandbox = await LocalSandbox.start(tmp_path, "worker", "none", isolation_level="best-effort")
    try:
        assert not sandbox.walls_in_force and sandbox.pid_namespace is None
        assert sandbox.walls.startswith("NONE: ") and "best-effort" in sandbox.walls
        health = await sandbox.client.health()
        assert "walls: NONE" in health.detail
        assert (await sandbox.client.call("run_command", {"command": "echo works"}))["output"][
            "stdout"
        ] == "works\n"
    finally:
        await sandbox.stop()


async def test_the_test_switch_is_refused_for_a_required_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WALLS_ENV, "off")
    with pytest.raises(WallsUnavailable, match="isolation: required"):
        await LocalSandbox.start(tmp_path, "worker", "none")


def manifest_with(isolation: str) -> dict[str, object]:
    """One subagent whose plan says hello."""
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "walls"},
        "spec": {
            "request": {"goal": "say hello"},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [{"name": "worker", "isolation": isolation}],
        },
    }


def test_isolation_is_a_known_level_in_the_manifest() -> None:
    assert parse_manifest(manifest_with("best-effort")).spec.subagents[0].isolation == "best-effort"
    with pytest.raises(ManifestError, match="isolation"):
        parse_manifest(manifest_with("none"))


async def test_the_server_reports_the_walls_it_observes(sandbox: LocalSandbox) -> None:
    health = await sandbox.client.health()
    walls = health.detail.split("walls: ", 1)[1]
    assert "own pid, mnt, net, ipc, uts namespaces" in walls
    assert f"uid {SANDBOX_UID}" in walls and "no /etc/shadow" in walls
    assert sandbox.walls.startswith("bubblewrap ")
    assert "own pid, mnt, ipc, uts, net namespaces" in sandbox.walls
    assert (f"uid {SANDBOX_UID} on the host" if ROOT else f"uid {SANDBOX_UID} inside") in sandbox.walls


async def test_files_belong_to_the_sandbox_user_and_the_harness_reads_them_back(
    sandbox: LocalSandbox,
) -> None:
    data = b"restored\n"
    await sandbox.client.put_file("state/restored.txt", data, hashlib.sha256(data).hexdigest())
    changed = await sandbox.client.call(
        "run_command", {"command": "echo changed by a command >> state/restored.txt && touch made.txt"}
    )
    assert changed["output"]["exit_code"] == 0, changed
    owner = SANDBOX_UID if ROOT else os.geteuid()
    for name in ("state/restored.txt", "made.txt", "state"):
        assert (sandbox.files / name).stat().st_uid == owner, name
    assert sandbox.workspace.stat().st_uid == owner
    read_back = await sandbox.client.get_file("state/restored.txt")
    assert read_back == b"restored\nchanged by a command\n"
    [entry] = await sandbox.client.manifest(["state/restored.txt"])
    assert entry.sha256 == hashlib.sha256(read_back).hexdigest()


async def test_git_patch_and_python_work_inside(sandbox: LocalSandbox) -> None:
    script = (
        "set -e; mkdir repo && cd repo; git init -q; echo 'a = 1' > m.py; git add m.py; "
        "git -c user.name=t -c user.email=t@example.com commit -qm one; "
        "echo 'b = 2' >> m.py; git diff > ../change.patch; git checkout -q m.py; "
        "patch -s -p1 < ../change.patch; python -c 'import m; print(m.a + m.b)'; whoami"
    )
    result = await sandbox.client.call("run_command", {"command": script, "timeout_s": 60})
    assert result["output"]["exit_code"] == 0, result
    assert result["output"]["stdout"] == "3\nsandbox\n"


def write_session(directory: Path, isolation: str) -> Path:
    hello = {"tool": "run_command", "arguments": {"command": "echo hello"}}
    plan = {"subagents": {"worker": {"steps": [{"id": "hello", "title": "hello", "actions": [hello]}]}}}
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    (directory / "session.yaml").write_text(yaml.safe_dump(manifest_with(isolation)))
    return directory / "session.yaml"


def test_belay_run_refuses_a_machine_without_walls_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing_bwrap(tmp_path, monkeypatch)
    result = run_belay(tmp_path / "home", "run", "--quiet", str(write_session(tmp_path, "required")))
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "apt-get install bubblewrap" in line, result.stderr


def test_belay_run_records_a_sandbox_without_walls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_bwrap(tmp_path, monkeypatch)
    result = run_belay(tmp_path / "home", "run", "--quiet", str(write_session(tmp_path, "best-effort")))
    assert result.returncode == 0, result.stderr
    [started] = [
        e
        for e in read_events(tmp_path / "home", "walls")
        if e.type == "lifecycle" and e.payload.kind == "sandbox_started"  # type: ignore[union-attr]
    ]
    assert "walls: NONE: bubblewrap (bwrap) is not installed" in started.payload.detail  # type: ignore[union-attr]


def processes_naming(path: Path) -> list[str]:
    """The live processes whose command line names `path` (bwrap and its first child, which holds
    the sandbox's PID namespace: while it lives, so may anything inside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not is_running(int(entry.name)):
            continue
        command = " ".join(pid_cmdline(int(entry.name)))
        if str(path) in command:
            found.append(f"{entry.name}: {command[:120]}")
    return found


# From right after bwrap is spawned to after the server answers: the stop of a start cut short
# lands before bwrap reported its PID namespace, while the server starts, and after.
CANCEL_AFTER_S = [step * 0.003 for step in range(40)]


async def test_a_start_cut_short_at_any_moment_leaves_no_process(tmp_path: Path) -> None:
    left = {}
    for number, delay in enumerate(CANCEL_AFTER_S):
        base = tmp_path / f"start-{number}"
        starting = asyncio.create_task(LocalSandbox.start(base, "worker", "none"))
        await asyncio.sleep(delay)
        starting.cancel()
        try:
            sandbox = await starting
        except asyncio.CancelledError:
            pass
        else:  # it had started already: a stop must leave nothing either
            await sandbox.stop()
        if found := processes_naming(base):
            left[delay] = found
            for line in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not left, left
