"""A ticket the tracker would refuse for its size is the call's error, found by the tool's schema
before the unsafe call is issued: the step goes on and the session ends, with no ticket filed and
no approval to "retry" a call that could never succeed (an empty title, one past the 512
characters the ticket service takes, a body past its 64 KiB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.journal.state import fold
from tests.belay_cli import tickets_in
from tests.security.one_call import run_one_call

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
    home, events, filed = run_one_call(
        tmp_path, SESSION, "file a ticket the tracker cannot take", "create_ticket", DRAFTS[draft]
    )
    assert not filed.ok
    assert filed.error is not None and "create_ticket: argument" in filed.error
    assert tickets_in(home, SESSION) == 0
    assert not fold(events).approvals, "an approval was asked for a call that could never succeed"
