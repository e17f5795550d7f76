"""A ticket the tracker would refuse for its size is the call's error, found by the tool's schema
before the unsafe call is issued: the step goes on and the session ends, with no ticket filed and
no approval to "retry" a call that could never succeed (an empty title, one past the 512
characters the ticket service takes, a body past its 64 KiB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.journal.events import ToolResult
from belay.journal.state import fold
from tests.belay_cli import completed, read_events, run_belay, tickets_in
from tests.scripted import write_scripted_session

SESSION = "tickets"
DRAFTS = {
    "empty-title": {"title": ""},
    "long-title": {"title": "t" * 600, "body": "b"},
    "long-body": {"title": "t", "body": "b" * (64 * 1024 + 1)},
}


@pytest.mark.parametrize("draft", sorted(DRAFTS))
def test_a_ticket_past_the_trackers_bounds_is_the_calls_error_and_nothing_waits(
    tmp_path: Path, draft: str
) -> None:
    manifest = write_scripted_session(
        tmp_path / "session",
        SESSION,
        "file a ticket the tracker cannot take",
        [{"name": "a"}],
        {
            "a": [
                {
                    "id": "file",
                    "title": "file",
                    "actions": [{"tool": "create_ticket", "arguments": DRAFTS[draft]}],
                },
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
    filed = [
        e.payload
        for e in events
        if isinstance(e.payload, ToolResult) and e.payload.operation_id == "a.file.1"
    ]
    assert len(filed) == 1 and not filed[0].ok
    assert filed[0].error is not None and "create_ticket: argument" in filed[0].error
    assert tickets_in(home, SESSION) == 0
    assert not fold(events).approvals, "an approval was asked for a call that could never succeed"
