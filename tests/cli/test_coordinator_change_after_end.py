"""A change after an objective ended reaches whoever does the work, on every executor: the
release-notes example (a coordinator over two child sessions) on the scripted executor, and on both
managed executors against each session's own local stand-in (nothing configured), the children on
the coordinator's executor.

`belay run` ends with every session Succeeded. Then `belay reject release-notes
notes-parser/parser.md` reopens the child and the coordinator's step that collected it (or `belay
amend release-notes --part parser=...` reopens that child and the coordinator's steps);
`belay resume release-notes` starts the child again, which redoes its step (the way its plan does
after a rejection), and the coordinator collects the new bytes and ends Succeeded with them. On a
managed executor the change reached each remote agent that had work to redo as a user message,
under a key derived from the seq of the change in its own record.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import Event, RejectionEvent, RemoteEvent, ScopeChangeEvent, TaskEvent
from tests.belay_cli import completed, read_events, run_belay, stop_session_standins

pytestmark = pytest.mark.slow

HANG_S = 400.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release-notes"
SESSIONS = ("release-notes", "notes-parser", "notes-docs")
REASON = "say which versions the fix reaches"


def release_notes(directory: Path, executor: str) -> Path:
    """The example, its coordinator (and so its children) on `executor`."""
    shutil.copytree(EXAMPLE, directory)
    manifest = directory / "session.yaml"
    data = yaml.safe_load(manifest.read_text())
    if executor != "scripted":
        data["spec"]["executor"] = {"type": executor, "model": "gpt-5", "plan": "coordinator-plan.yaml"}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def brief(home: Path, session_id: str) -> dict[str, Any]:
    shown = run_belay(home, "brief", "--json", session_id)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def collected(home: Path) -> dict[str, str]:
    """What the coordinator's page offers for review, by name: its sha256."""
    return {r["name"]: r["sha256"] for r in brief(home, "release-notes")["ready_for_review"]}


def child_note(home: Path) -> str:
    [ready] = [r for r in brief(home, "notes-parser")["ready_for_review"] if r["name"] == "parser.md"]
    return str(ready["sha256"])


def told_after_change(events: list[Event]) -> list[RemoteEvent]:
    """The messages that told the remote agent of the record's last change, under its key."""
    change = max(e.seq for e in events if isinstance(e, RejectionEvent | ScopeChangeEvent))
    return [
        e
        for e in events
        if isinstance(e, RemoteEvent)
        and e.payload.kind == "message_delivered"
        and e.seq > change
        and e.payload.idempotency_key.endswith(f"-{change}")
    ]


def steps_done(events: list[Event], task_id: str) -> int:
    return sum(
        1
        for e in events
        if isinstance(e, TaskEvent) and e.payload.task_id == task_id and e.payload.status == "verified"
    )


@pytest.mark.parametrize("executor", ["scripted", "openai-agents", "anthropic-managed"])
def test_a_collected_deliverable_rejected_after_the_end_is_redone_and_collected(
    tmp_path: Path, executor: str
) -> None:
    manifest = release_notes(tmp_path / "example", executor)
    home = tmp_path / "home"
    try:
        ran = run_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER, timeout=HANG_S)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert all(brief(home, s)["phase"] == "Succeeded" for s in SESSIONS)
        first = child_note(home)
        assert collected(home)["notes-parser/parser.md"] == first

        rejected = run_belay(home, "reject", "release-notes", "notes-parser/parser.md", "--reason", REASON)
        assert rejected.returncode == 0, rejected.stderr
        assert brief(home, "release-notes")["phase"] != "Succeeded"
        assert "notes-parser/parser.md" not in collected(home)

        resumed = run_belay(
            home, "resume", "--quiet", "release-notes", environment=NO_PROVIDER, timeout=HANG_S
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        for session in SESSIONS:
            assert completed(read_events(home, session)), session
            assert brief(home, session)["phase"] == "Succeeded", session
        again = child_note(home)
        assert again != first
        assert collected(home)["notes-parser/parser.md"] == again
        if executor != "scripted":
            assert len(told_after_change(read_events(home, "notes-parser"))) == 1
            assert len(told_after_change(read_events(home, "release-notes"))) == 1
    finally:
        stop_session_standins(home)


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_an_amend_of_a_part_after_the_end_is_redone_by_its_child_and_collected(
    tmp_path: Path, executor: str
) -> None:
    manifest = release_notes(tmp_path / "example", executor)
    home = tmp_path / "home"
    try:
        ran = run_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER, timeout=HANG_S)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        docs_before = read_events(home, "notes-docs")

        amended = run_belay(home, "amend", "release-notes", "--part", "parser=the parser fix, with its test")
        assert amended.returncode == 0, amended.stderr
        assert brief(home, "release-notes")["phase"] != "Succeeded"

        resumed = run_belay(
            home, "resume", "--quiet", "release-notes", environment=NO_PROVIDER, timeout=HANG_S
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        for session in SESSIONS:
            assert completed(read_events(home, session)), session
            assert brief(home, session)["phase"] == "Succeeded", session
        assert read_events(home, "notes-docs") == docs_before  # its part did not change
        parser = read_events(home, "notes-parser")
        assert steps_done(parser, "writer/write") == 2
        assert collected(home)["notes-parser/parser.md"] == child_note(home)
        assert len(told_after_change(parser)) == 1
        assert len(told_after_change(read_events(home, "release-notes"))) == 1
    finally:
        stop_session_standins(home)
