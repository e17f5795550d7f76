"""An input taken from another session's deliverable (`inputs[].artifact`), through `belay run` of
two sessions in one home. The consumer's subagent reads the very bytes the producer's record
proves; `belay run` pins their sha256 in the stored manifest before anything runs; a consumer
killed mid-step resumes on a new sandbox with the same bytes, even after the producer was amended
and published other bytes; a source that is missing, another namespace's, or unproven (rejected)
is refused with one line naming the session and the deliverable, nothing of the consumer
written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from belay.journal.events import Lifecycle, LifecycleKind, ToolRequestEvent
from belay.local.runtime import LocalHome
from tests.belay_cli import kill_group, read_events, run_belay, start_belay, wait_until_stopped

PRODUCER = "producer"
CONSUMER = "consumer"
# Some random bytes in the report: the producer, amended and redone, publishes other bytes.
REPORT = "mkdir -p out && { echo 'the report'; head -c 16 /dev/urandom | od -An -tx1; } > out/report.md"


def write_session(directory: Path, name: str, subagent: dict[str, Any], steps: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    plan = directory / f"{name}-plan.yaml"
    plan.write_text(yaml.safe_dump({"subagents": {subagent["name"]: {"steps": steps}}}))
    path = directory / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "belay.dev/v1alpha1",
                "kind": "AgentSession",
                "metadata": {"name": name},
                "spec": {
                    "request": {"goal": f"the {name}'s work"},
                    "executor": {"type": "scripted", "plan": plan.name},
                    "subagents": [subagent],
                },
            }
        )
    )
    return path


def producer_manifest(directory: Path, verify: str = "test -s out/report.md") -> Path:
    step = {
        "id": "report",
        "title": "Write the report",
        "verify": {"command": verify, "exit_code": 0},
        "actions": [
            {"tool": "run_command", "arguments": {"command": REPORT}},
            {"tool": "publish_deliverable", "arguments": {"path": "out/report.md"}},
        ],
    }
    writer = {"name": "writer", "deliverable": "report.md", "declared": ["out/*"]}
    return write_session(directory, PRODUCER, writer, [step])


DECLARED = ("in/*", "out/*")


def consumer_manifest(directory: Path, declared: tuple[str, ...] = DECLARED, **artifact: str) -> Path:
    """A subagent that copies the input in its first step and publishes the copy in its second."""
    first = {
        "id": "first",
        "title": "Read the report",
        "verify": {"command": "test -s out/copy.md", "exit_code": 0},
        "actions": [
            {"tool": "run_command", "arguments": {"command": "mkdir -p out && cp in/report.md out/copy.md"}}
        ],
    }
    deliver = {
        "id": "deliver",
        "title": "Deliver what it read",
        "verify": {"command": "cmp in/report.md out/copy.md", "exit_code": 0},
        "actions": [
            {"tool": "run_command", "arguments": {"command": "cmp in/report.md out/copy.md"}},
            {"tool": "publish_deliverable", "arguments": {"path": "out/copy.md"}},
        ],
    }
    reader = {
        "name": "reader",
        "deliverable": "copy.md",
        "inputs": [
            {"artifact": {"session": PRODUCER, "deliverable": "report.md", **artifact}, "target": "in"}
        ],
        "declared": list(declared),
    }
    return write_session(directory, CONSUMER, reader, [first, deliver])


def fetched(home: Path, session: str, name: str, tmp_path: Path) -> bytes:
    target = tmp_path / "download" / session / name
    target.parent.mkdir(parents=True, exist_ok=True)
    got = run_belay(home, "artifacts", "get", session, name, "--output", str(target))
    assert got.returncode == 0, got.stdout + got.stderr
    return target.read_bytes()


def produced(home: Path, tmp_path: Path) -> bytes:
    ran = run_belay(home, "run", "--quiet", str(producer_manifest(tmp_path)))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return fetched(home, PRODUCER, "report.md", tmp_path)


def lifecycle(home: Path) -> list[Lifecycle]:
    return [e.payload for e in read_events(home, CONSUMER) if isinstance(e.payload, Lifecycle)]


def refused(home: Path, manifest: Path) -> str:
    """`belay run` of the consumer, refused: its one line, and nothing of the consumer written."""
    ran = run_belay(home, "run", "--quiet", str(manifest))
    assert ran.returncode != 0
    lines = [line for line in (ran.stdout + ran.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: bad manifest: "), lines
    assert not LocalHome(home).session_exists(CONSUMER)
    assert not read_events(home, CONSUMER)
    return lines[0]


def test_the_consumer_reads_the_producers_proven_bytes_pinned_when_it_started(tmp_path: Path) -> None:
    home = tmp_path / "home"
    report = produced(home, tmp_path)
    ran = run_belay(home, "run", "--quiet", str(consumer_manifest(tmp_path)))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert fetched(home, CONSUMER, "copy.md", tmp_path) == report
    sha256 = hashlib.sha256(report).hexdigest()
    stored = yaml.safe_load(LocalHome(home).manifest_file(CONSUMER).read_text())
    assert stored["spec"]["subagents"][0]["inputs"][0]["artifact"]["sha256"] == sha256
    [seeded] = [p for p in lifecycle(home) if p.kind == LifecycleKind.RESTORED]
    assert f"in from deliverable report.md of session {PRODUCER}, sha256 {sha256}" in seeded.detail


def test_a_consumer_killed_mid_step_resumes_with_the_pinned_bytes_after_the_producer_changed(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    report = produced(home, tmp_path)
    # Killed (SIGKILL, the whole process group) between the request of the second step's command
    # and its result.
    point = "tool_request:reader.deliver.1"
    run = start_belay(home, "run", "--quiet", str(consumer_manifest(tmp_path)), stop_after=point)
    wait_until_stopped(run, point)
    kill_group(run)
    last = read_events(home, CONSUMER)[-1]
    assert isinstance(last, ToolRequestEvent)
    assert last.payload.arguments["command"] == "cmp in/report.md out/copy.md"
    # The producer is amended and redone: its proven deliverable is other bytes now.
    amended = run_belay(home, "amend", PRODUCER, "--goal", "a newer report")
    assert amended.returncode == 0, amended.stdout + amended.stderr
    redone = run_belay(home, "resume", "--quiet", PRODUCER)
    assert redone.returncode == 0, redone.stdout + redone.stderr
    assert fetched(home, PRODUCER, "report.md", tmp_path) != report
    resumed = run_belay(home, "resume", "--quiet", CONSUMER)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = lifecycle(home)
    [replaced] = [p for p in events if p.kind == LifecycleKind.SANDBOX_REPLACED]
    assert replaced.attempt == 2 and replaced.subagent == "reader"
    [restored] = [p for p in events if p.kind == LifecycleKind.RESTORED and p.attempt == 2]
    assert restored.checkpoint_id == "reader/first"
    # The new sandbox holds the bytes pinned when the consumer started, not the producer's new ones.
    assert fetched(home, CONSUMER, "copy.md", tmp_path) == report


def test_a_consumer_killed_before_its_first_sandbox_was_seeded_still_gets_the_bytes_of_its_start(
    tmp_path: Path,
) -> None:
    """The pin is taken by `belay run`, not when the first sandbox happens to be seeded: a consumer
    killed before that, its producer then amended and redone, is seeded with the bytes proven when
    it started."""
    home = tmp_path / "home"
    report = produced(home, tmp_path)
    point = "lifecycle:sandbox_started"
    run = start_belay(home, "run", "--quiet", str(consumer_manifest(tmp_path)), stop_after=point)
    wait_until_stopped(run, point)
    kill_group(run)
    assert not [p for p in lifecycle(home) if p.kind == LifecycleKind.RESTORED]  # nothing seeded yet
    amended = run_belay(home, "amend", PRODUCER, "--goal", "a newer report")
    assert amended.returncode == 0, amended.stdout + amended.stderr
    redone = run_belay(home, "resume", "--quiet", PRODUCER)
    assert redone.returncode == 0, redone.stdout + redone.stderr
    assert fetched(home, PRODUCER, "report.md", tmp_path) != report
    resumed = run_belay(home, "resume", "--quiet", CONSUMER)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert fetched(home, CONSUMER, "copy.md", tmp_path) == report


def test_a_missing_source_is_refused_naming_the_session_and_the_deliverable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    line = refused(home, consumer_manifest(tmp_path))
    assert f"deliverable report.md of session {PRODUCER}: there is no session {PRODUCER}" in line
    # A session of another home is not one of this home's.
    produced(tmp_path / "elsewhere", tmp_path)
    assert "there is no session" in refused(home, consumer_manifest(tmp_path))


def test_a_deliverable_the_producers_record_does_not_prove_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    produced(home, tmp_path)
    # Pinned to other bytes than the proven ones: refused, naming both.
    other = hashlib.sha256(b"other bytes").hexdigest()
    line = refused(home, consumer_manifest(tmp_path, sha256=other))
    assert f"deliverable report.md of session {PRODUCER}: the proven deliverable is sha256 " in line
    assert other in line
    # No deliverable of that name.
    line = refused(home, consumer_manifest(tmp_path, deliverable="notes.md"))
    assert f"deliverable notes.md of session {PRODUCER}: it has no published deliverable of that name" in line
    # Rejected by a person: withdrawn, and its step reopened.
    rejected = run_belay(home, "reject", PRODUCER, "report.md", "--reason", "too short")
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr
    line = refused(home, consumer_manifest(tmp_path))
    assert f"deliverable report.md of session {PRODUCER}: it was rejected by " in line
    assert "too short" in line


def test_a_deliverable_published_by_a_step_whose_verification_failed_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    failing = producer_manifest(tmp_path, verify="test ! -s out/report.md")
    ran = run_belay(home, "run", "--quiet", str(failing))
    assert ran.returncode != 0
    published = run_belay(home, "artifacts", PRODUCER)
    assert "report.md" in published.stdout  # published, but nothing proves it
    line = refused(home, consumer_manifest(tmp_path))
    assert f"deliverable report.md of session {PRODUCER}: the record does not prove it: " in line
    assert "verification" in line and "failed" in line


def test_a_source_of_another_namespace_cannot_be_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    produced(home, tmp_path)
    line = refused(home, consumer_manifest(tmp_path, session=f"team-b/{PRODUCER}"))
    assert "inputs[].artifact.session must be the name of a session of the same namespace" in line


def test_an_artifact_input_outside_the_declared_state_is_refused(tmp_path: Path) -> None:
    """Only declared files survive a new sandbox: an input target not declared would be lost."""
    home = tmp_path / "home"
    produced(home, tmp_path)
    line = refused(home, consumer_manifest(tmp_path, declared=("out/*",)))
    assert "every inputs[].target T must be declared as 'T/*'" in line
    assert "input target 'in' is outside declared ('out/*')" in line
