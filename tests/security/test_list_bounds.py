"""A list argument of a harness tool is recorded in the request as it is, so its length is bounded
by the tool's schema: a note whose evidence lists 50,000 entries (650 KB, too large a request to
record) is that call's error, and the session goes on, instead of stopping the harness on every
attempt until the session is RecoveryFailed."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import ToolResult
from tests.belay_cli import completed, read_events, run_belay
from tests.scripted import write_scripted_session

SESSION = "long-lists"


def test_a_note_with_tens_of_thousands_of_evidence_entries_is_the_calls_error(tmp_path: Path) -> None:
    note = {"note_id": "n", "text": "see the evidence", "evidence": ["tests/x.py"] * 50_000}
    manifest = write_scripted_session(
        tmp_path / "session",
        SESSION,
        "record a note with too much evidence",
        [{"name": "a"}],
        {
            "a": [
                {"id": "note", "title": "note", "actions": [{"tool": "record_note", "arguments": note}]},
                {
                    "id": "after",
                    "title": "after",
                    "actions": [{"tool": "run_command", "arguments": {"command": "true"}}],
                },
            ]
        },
    )
    home = tmp_path / "home"
    result = run_belay(home, "run", "--quiet", str(manifest))

    events = read_events(home, SESSION)
    assert result.returncode == 0, result.stderr
    assert completed(events)
    noted = [
        e.payload
        for e in events
        if isinstance(e.payload, ToolResult) and e.payload.operation_id == "a.note.1"
    ]
    assert len(noted) == 1 and not noted[0].ok
    assert noted[0].error is not None and "argument 'evidence' must have at most" in noted[0].error
