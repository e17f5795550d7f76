"""The README's main command: `belay run examples/parser-fix/session.yaml`, end to end."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from belay.harness.redaction import Redactor
from belay.journal.events import CheckpointEvent, Event, ToolRequestEvent, ToolResultEvent
from belay.local.runtime import LocalHome
from tests.belay_cli import run_belay, steps_run_twice, tickets_in
from tests.harness.example import SESSION, repo_tests_pass, run_example


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[Event]]:
    home = tmp_path_factory.mktemp("home")
    result, events = run_example(home)
    assert result.returncode == 0, result.stderr + result.stdout
    return home, result.stdout, events


def test_run_prints_progress_then_the_briefing(finished: tuple[Path, str, list[Event]]) -> None:
    _, stdout, _ = finished
    assert "step reproduce verified" in stdout
    assert "Ready for review" in stdout
    assert "belay artifacts get parser-fix fix.patch -o fix.patch" in stdout


def test_patch_from_artifacts_get_applies_and_makes_the_tests_pass(
    finished: tuple[Path, str, list[Event]], tmp_path: Path
) -> None:
    home, _, _ = finished
    patch = tmp_path / "fix.patch"
    result = run_belay(home, "artifacts", "get", SESSION, "fix.patch", "-o", str(patch))
    assert result.returncode == 0, result.stderr
    assert '+        key, value = line.split("=", 1)' in patch.read_text()
    assert not repo_tests_pass(None, tmp_path / "before")
    assert repo_tests_pass(patch, tmp_path / "after")


def test_every_request_is_recorded_before_its_result(finished: tuple[Path, str, list[Event]]) -> None:
    _, _, events = finished
    requests = {e.payload.operation_id: e.seq for e in events if isinstance(e, ToolRequestEvent)}
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert len(results) == len(requests) == 30
    for result in results:
        assert result.parent_seq == requests[result.payload.operation_id] < result.seq
    assert not steps_run_twice(events)


def test_every_harness_event_carries_attempt_version_and_model(
    finished: tuple[Path, str, list[Event]],
) -> None:
    _, _, events = finished
    harness = [e for e in events if e.actor.kind == "harness"]
    assert harness and all(e.actor.attempt == 1 for e in harness)
    assert all(e.actor.harness_version.startswith("belay-harness/") for e in harness)
    assert all(e.actor.model_id == "scripted/v1" for e in harness)


def test_subagents_ran_in_parallel_and_the_session_completed(finished: tuple[Path, str, list[Event]]) -> None:
    _, _, events = finished
    owners = [e.actor.subagent for e in events if isinstance(e, ToolRequestEvent)]
    switches = sum(1 for a, b in itertools.pairwise(owners) if a != b)
    assert switches > 2  # interleaved, not one subagent after the other
    kinds = [getattr(e.payload, "kind", None) for e in events if e.type == "lifecycle"]
    assert kinds[-2:] == ["session_completed", "harness_finished"]


def test_checkpoints_are_verified_and_their_declared_files_are_stored(
    finished: tuple[Path, str, list[Event]],
) -> None:
    home, _, events = finished
    store = LocalHome(home).open_artifact_store()
    checkpoints = [e.payload for e in events if isinstance(e, CheckpointEvent)]
    steps = [c for c in checkpoints if not c.checkpoint_id.endswith("/inputs")]
    assert {c.checkpoint_id for c in steps} == {
        "researcher/reproduce",
        "researcher/diagnose",
        "researcher/report",
        "implementer/regression-test",
        "implementer/fix",
        "implementer/verify",
        "implementer/publish",
    }
    assert all(c.verified for c in steps)
    fix = next(c for c in steps if c.checkpoint_id == "implementer/fix")
    names = {a.name for a in fix.declared_artifacts}
    assert "repo/confparse/parser.py" in names and not any("__pycache__" in n for n in names)
    for artifact in fix.declared_artifacts:
        assert store.exists(artifact.sha256)


def test_one_ticket_and_the_notes(finished: tuple[Path, str, list[Event]]) -> None:
    home, _, events = finished
    assert tickets_in(home, SESSION) == 1
    notes = Counter((e.payload.note_id, e.payload.status) for e in events if e.type == "note")
    assert ("cause", "open") in notes and ("cause", "supported") in notes and ("fix", "accepted") in notes


def test_events_json_lines_and_sessions(finished: tuple[Path, str, list[Event]]) -> None:
    home, _, events = finished
    result = run_belay(home, "events", SESSION, "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(events) + 1))
    assert {"seq", "type", "created_at", "actor", "payload"} <= set(lines[0])
    assert lines[0]["type"] == "user_input" and "confparse" in lines[0]["payload"]["goal"]
    listing = run_belay(home, "sessions")
    assert "parser-fix" in listing.stdout and "Succeeded" in listing.stdout
    again = run_belay(
        home, "run", str(Path(__file__).resolve().parents[2] / "examples/parser-fix/session.yaml")
    )
    assert again.returncode == 0 and "already completed" in again.stderr
    assert len(run_belay(home, "events", SESSION, "--json").stdout.splitlines()) == len(events)


def test_every_checkpoint_is_what_the_design_describes(finished: tuple[Path, str, list[Event]]) -> None:
    """Repository revision, patch artifact, runtime image, environment and dependencies, next step
    and verification status on every checkpoint; the patch is the change since the inputs."""
    home, _, events = finished
    store = LocalHome(home).open_artifact_store()
    checkpoints = [e.payload for e in events if isinstance(e, CheckpointEvent)]
    assert len(checkpoints) == 9  # two inputs, seven steps
    for checkpoint in checkpoints:
        assert checkpoint.repository_revision and len(checkpoint.repository_revision) == 40
        assert checkpoint.patch is not None and store.exists(checkpoint.patch.sha256)
        assert checkpoint.runtime_image
        assert {"os", "machine", "network_profile"} <= set(checkpoint.environment)
        assert {"python", "git"} <= set(checkpoint.dependencies)
        assert checkpoint.next_step
        assert checkpoint.verification is not None and checkpoint.verification.status
        assert checkpoint.result_id == f"checkpoint:{checkpoint.checkpoint_id}"
    by_id = {c.checkpoint_id: c for c in checkpoints}
    assert by_id["implementer/inputs"].verification.status == "not_run"  # nothing ran yet
    assert by_id["implementer/inputs"].patch.size == 0
    assert by_id["implementer/fix"].next_step == "implementer/verify"
    assert by_id["implementer/publish"].next_step == "(end of plan)"
    fix = store.get(by_id["implementer/fix"].patch.sha256).decode()
    assert (
        '+        key, value = line.split("=", 1)' in fix and "b/repo/tests/test_regression_equals.py" in fix
    )
    # Each step's work records what it was derived from: the request version, the request parts
    # its step depends on, and the checkpoint it started from.
    assert by_id["implementer/verify"].derived_from is not None
    assert by_id["implementer/verify"].derived_from.results == ("checkpoint:implementer/fix",)
    assert by_id["implementer/fix"].derived_from.request_parts == ("goal", "repository")
    results = [e.payload for e in events if isinstance(e, ToolResultEvent) and e.payload.result_id]
    assert results and all(
        r.derived_from is not None and r.derived_from.request_version == 1 for r in results
    )


def test_the_example_record_holds_no_redaction(finished: tuple[Path, str, list[Event]]) -> None:
    """False positives stay low: the example's commands, sources, test output, patch and notes are
    scanned like any tool's, and none of it is taken for a secret (each scan again, here, finds
    nothing either, so a detector that starts taking code for secrets fails this test)."""
    home, _, events = finished
    record = run_belay(home, "events", SESSION, "--json").stdout
    assert "[REDACTED:" not in record
    redactor = Redactor()
    results = [e.payload for e in events if isinstance(e, ToolResultEvent)]
    requests = [e.payload for e in events if isinstance(e, ToolRequestEvent)]
    assert len(results) > 20 and any("confparse" in json.dumps(r.output) for r in results)
    assert all(r.redactions == 0 for r in [*results, *requests])
    assert sum(redactor.output([r.output, r.error]).count for r in results) == 0
    assert sum(redactor.arguments(r.arguments).count for r in requests) == 0
