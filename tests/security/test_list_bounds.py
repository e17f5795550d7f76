"""A list argument of a harness tool is recorded in the request as it is, so its length is bounded
by the tool's schema: a note whose evidence lists 50,000 entries (650 KB, too large a request to
record) is that call's error, and the session goes on, instead of stopping the harness on every
attempt until the session is RecoveryFailed."""

from __future__ import annotations

from pathlib import Path

from tests.security.one_call import run_one_call

SESSION = "long-lists"


def test_a_note_with_tens_of_thousands_of_evidence_entries_is_the_calls_error(tmp_path: Path) -> None:
    note = {"note_id": "n", "text": "see the evidence", "evidence": ["tests/x.py"] * 50_000}
    _, _, noted = run_one_call(tmp_path, SESSION, "record a note with too much evidence", "record_note", note)
    assert not noted.ok
    assert noted.error is not None and "argument 'evidence' must have at most" in noted.error
