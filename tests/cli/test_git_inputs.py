"""An input fetched from a git server at one commit: `belay run` against a real `git daemon`
started here on loopback. The subagent's workspace holds the commit's tree (not the branch's
newer tip), the record names the URL and the commit, a run killed after its first step resumes on
a new sandbox with the same tree (from the record: the server is gone by then), and a commit the
repository lacks ends the attempt before anything runs, saying so."""

from __future__ import annotations

import hashlib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import load_manifest
from belay.controller.recovery import Action, decide_harness, input_corrected
from belay.journal.events import Lifecycle, LifecycleKind
from belay.journal.phase import Phase, phase_of
from belay.journal.state import fold
from tests.belay_cli import (
    kill_group,
    read_events,
    run_belay,
    start_belay,
    wait_until_stopped,
)
from tests.testenv.polling import wait_until

SESSION = "git-input"
# The files of the pinned commit; the branch moves on after it.
PINNED = {"README.md": b"pinned readme\n", "src/lib.py": b"def answer():\n    return 42\n"}
# Every file of the workspace's copy, with its sha256: what the subagent delivers.
TREE = "cd repo && find . -type f | sort | xargs sha256sum > ../out/tree.txt"


def git(repository: Path, *arguments: str) -> str:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    done = subprocess.run(
        ["git", *identity, "-C", str(repository), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose first commit holds PINNED and whose branch moved on after it."""
    served = tmp_path / "served" / "project.git"
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    for name, data in PINNED.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "pinned")
    pinned = git(work, "rev-parse", "HEAD")
    (work / "README.md").write_bytes(b"a newer readme the session must not see\n")
    (work / "later.txt").write_bytes(b"added after the pinned commit\n")
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "later")
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(served)], check=True)
    return served, pinned


@pytest.fixture
def daemon(repository: tuple[Path, str]) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`git daemon` serving the repository on a loopback port; its URL."""
    served, _ = repository
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            "--reuseaddr",
            "--informative-errors",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={served.parent}",
            str(served.parent),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def answers() -> bool:
        with socket.socket() as client:
            return client.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(answers, "git daemon to listen", timeout=30, while_running=process)
        yield process, f"git://127.0.0.1:{port}/{served.name}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def manifest(directory: Path, url: str, revision: str) -> Path:
    step = {
        "id": "first",
        "title": "Read the readme",
        "verify": {"command": "test -s out/readme.txt", "exit_code": 0},
        "actions": [
            {
                "tool": "run_command",
                "arguments": {"command": "mkdir -p out && cp repo/README.md out/readme.txt"},
            }
        ],
    }
    deliver = {
        "id": "deliver",
        "title": "List the tree",
        "verify": {"command": "test -s out/tree.txt", "exit_code": 0},
        "actions": [
            {"tool": "run_command", "arguments": {"command": TREE}},
            {"tool": "publish_deliverable", "arguments": {"path": "out/tree.txt"}},
        ],
    }
    (directory / "plan.yaml").write_text(
        yaml.safe_dump({"subagents": {"reader": {"steps": [step, deliver]}}})
    )
    subagent: dict[str, Any] = {
        "name": "reader",
        "deliverable": "tree.txt",
        "inputs": [{"git": {"url": url, "revision": revision}, "target": "repo"}],
        "declared": ["repo/*", "out/*"],
    }
    path = directory / "session.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "belay.dev/v1alpha1",
                "kind": "AgentSession",
                "metadata": {"name": SESSION},
                "spec": {
                    "request": {"goal": "list the pinned tree"},
                    "executor": {"type": "scripted", "plan": "plan.yaml"},
                    "subagents": [subagent],
                },
            }
        )
    )
    return path


def pinned_tree() -> str:
    return "".join(f"{hashlib.sha256(data).hexdigest()}  ./{name}\n" for name, data in sorted(PINNED.items()))


def delivered(home: Path, tmp_path: Path) -> str:
    out = tmp_path / "download"
    out.mkdir(exist_ok=True)
    got = run_belay(home, "artifacts", "get", SESSION, "tree.txt", "--output", str(out / "tree.txt"))
    assert got.returncode == 0, got.stdout + got.stderr
    return (out / "tree.txt").read_text()


def lifecycle(home: Path) -> list[Lifecycle]:
    return [e.payload for e in read_events(home, SESSION) if isinstance(e.payload, Lifecycle)]


def test_a_run_gets_the_pinned_commits_tree_and_records_where_it_came_from(
    tmp_path: Path, repository: tuple[Path, str], daemon: tuple[subprocess.Popen[bytes], str]
) -> None:
    _, pinned = repository
    _, url = daemon
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(manifest(tmp_path, url, pinned)))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert delivered(home, tmp_path) == pinned_tree()  # the pinned commit, not the branch's tip
    [seeded] = [p for p in lifecycle(home) if p.kind == LifecycleKind.RESTORED]
    assert f"repo from {url} at {pinned}" in seeded.detail


def test_a_run_killed_after_its_first_step_resumes_on_a_new_sandbox_with_the_same_tree(
    tmp_path: Path, repository: tuple[Path, str], daemon: tuple[subprocess.Popen[bytes], str]
) -> None:
    _, pinned = repository
    server, url = daemon
    home = tmp_path / "home"
    point = "checkpoint:reader/first"
    run = start_belay(home, "run", "--quiet", str(manifest(tmp_path, url, pinned)), stop_after=point)
    wait_until_stopped(run, point)
    kill_group(run)
    # The server is gone: what the resumed sandbox holds can only come from the record.
    server.terminate()
    server.wait(timeout=30)
    resumed = run_belay(home, "resume", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = lifecycle(home)
    [replaced] = [p for p in events if p.kind == LifecycleKind.SANDBOX_REPLACED]
    assert replaced.attempt == 2 and replaced.subagent == "reader"
    seeded, restored = [p for p in events if p.kind == LifecycleKind.RESTORED]
    assert seeded.attempt == 1 and seeded.checkpoint_id == "reader/inputs"
    assert restored.attempt == 2 and restored.checkpoint_id == "reader/first"
    # The inputs' commit rebuilt in the new sandbox is the one the first sandbox made.
    inputs_revision = seeded.detail.split("revision ")[1][:12]
    assert f"the inputs' revision {inputs_revision}" in restored.detail
    assert delivered(home, tmp_path) == pinned_tree()


def test_a_commit_the_repository_lacks_stops_the_session_until_the_input_can_be_had(
    tmp_path: Path, repository: tuple[Path, str], daemon: tuple[subprocess.Popen[bytes], str]
) -> None:
    """Not an attempt a next one gets past on its own: the session is RecoveryFailed with reason
    InputUnavailable naming the input, and the operator's decision on that record starts no attempt
    until the spec names another input; on one machine a resume once the server has the commit
    goes on."""
    served, _ = repository
    _, url = daemon
    work = tmp_path / "work"
    (work / "README.md").write_bytes(b"a commit not pushed yet\n")
    git(work, "commit", "--quiet", "-am", "not pushed yet")
    missing = git(work, "rev-parse", "HEAD")
    home = tmp_path / "home"
    path = manifest(tmp_path, url, missing)
    ran = run_belay(home, "run", "--quiet", str(path))
    assert ran.returncode != 0
    events = lifecycle(home)
    [failed] = [p for p in events if p.kind == LifecycleKind.RECOVERY_FAILED]
    [finished] = [p for p in events if p.kind == LifecycleKind.HARNESS_FINISHED]
    assert failed.reason == finished.reason == "InputUnavailable"
    assert failed.subagent == "reader"
    named = f"reader: input repo from {url} at {missing}: revision {missing} is not a commit of {url}"
    assert failed.detail.startswith(named)
    assert f"is not a commit of {url}" in ran.stdout + ran.stderr
    assert not [e for e in read_events(home, SESSION) if e.type == "tool_request"]
    brief = run_belay(home, "brief", SESSION)
    assert "RecoveryFailed" in brief.stdout and "InputUnavailable" in brief.stdout, brief.stdout

    # The operator's decision on this very record: no further attempt while the spec names the
    # input that failed; the next one once the spec corrects it.
    state = fold(read_events(home, SESSION))
    spec = load_manifest(path).spec
    assert phase_of(state) == Phase.RECOVERY_FAILED
    assert not input_corrected(state, spec)
    decided = decide_harness(state, [], lease=1, max_attempts=5, input_corrected=input_corrected(state, spec))
    assert decided.action == Action.STOP
    _, pinned = repository
    (tmp_path / "corrected").mkdir()
    corrected = load_manifest(manifest(tmp_path / "corrected", url, pinned)).spec
    assert input_corrected(state, corrected)
    decided = decide_harness(
        state, [], lease=1, max_attempts=5, input_corrected=input_corrected(state, corrected)
    )
    assert decided.action == Action.REPLACE

    # On one machine: once the server has the commit, a resume seeds the input and goes on.
    git(work, "push", "--quiet", str(served), "HEAD:refs/heads/later")
    resumed = run_belay(home, "resume", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert phase_of(fold(read_events(home, SESSION))) == Phase.SUCCEEDED
    readme = hashlib.sha256(b"a commit not pushed yet\n").hexdigest()
    assert f"{readme}  ./README.md" in delivered(home, tmp_path)
    [seeded] = [p for p in lifecycle(home) if p.kind == LifecycleKind.RESTORED]
    assert f"repo from {url} at {missing}" in seeded.detail
