"""A declared file's name is the agent's choice, and any name a file system takes is one a
checkpoint takes: a name with a newline in it (or one that looks like an option) is stored under
that name, never a `404` that fails this step's checkpoint and every one after it."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import CheckpointEvent
from tests.belay_cli import completed, read_events, run_belay
from tests.scripted import write_scripted_session

SESSION = "odd-names"
NAMES = ["out/new\nline", "out/-rf", "out/plain"]


def test_declared_files_with_a_newline_or_a_dash_in_their_names_are_checkpointed(tmp_path: Path) -> None:
    make = "mkdir -p out && printf a > 'out/new\nline' && printf b > out/-rf && printf c > out/plain"
    manifest = write_scripted_session(
        tmp_path / "session",
        SESSION,
        "files whose names a shell would trip over",
        [{"name": "a", "declared": ["out/*"]}],
        {
            "a": [
                {
                    "id": "make",
                    "title": "make",
                    "actions": [{"tool": "run_command", "arguments": {"command": make}}],
                },
                {
                    "id": "after",
                    "title": "after",
                    "actions": [{"tool": "run_command", "arguments": {"command": "ls"}}],
                },
            ]
        },
    )
    home = tmp_path / "home"
    result = run_belay(home, "run", "--quiet", str(manifest))

    events = read_events(home, SESSION)
    assert result.returncode == 0, result.stderr
    assert completed(events)
    stored = {
        artifact.name
        for event in events
        if isinstance(event, CheckpointEvent) and event.payload.checkpoint_id == "a/make"
        for artifact in event.payload.declared_artifacts
    }
    assert stored == set(NAMES)
