"""What a model sends is checked against the tool's schema before anything reads it: a call of the
wrong type, to a sandbox tool or a harness tool, is that call's error result with the schema's
complaint, never an error that stops the harness (a `timeout_s` of null once stopped every attempt
with a TypeError, until the session was RecoveryFailed). The session goes on to its end and the
briefing says so."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import ApprovalRequest, Lifecycle, Note, Wait
from tests.belay_cli import tickets_in
from tests.harness.content import PUBLISH, SESSION, brief, result_of, run_session

BAD = [
    (
        {"tool": "run_command", "arguments": {"command": "echo null", "timeout_s": None}},
        "run_command: argument 'timeout_s' must be of type integer, got null",
    ),
    (
        {"tool": "run_command", "arguments": {"command": "echo soon", "timeout_s": "soon"}},
        "run_command: argument 'timeout_s' must be of type integer, got \"soon\"",
    ),
    (
        {"tool": "run_command", "arguments": {"command": "echo never", "timeout_s": 10**400}},
        "run_command: argument 'timeout_s' must be between 1 and 86400",
    ),
    (
        {"tool": "run_command", "arguments": {"command": {"sh": "-c"}}},
        "run_command: argument 'command' must be of type string or array",
    ),
    (
        {"tool": "write_file", "arguments": {"path": "out/five.txt", "content": 5}},
        "write_file: argument 'content' must be of type string, got 5",
    ),
    ({"tool": "read_file", "arguments": {}}, "read_file: missing required argument path"),
    (
        {"tool": "record_note", "arguments": {"note_id": "n", "text": ["not", "text"]}},
        "record_note: argument 'text' must be of type string",
    ),
    (
        {"tool": "wait_on_user", "arguments": {"reason": {"why": "an object"}}},
        "wait_on_user: argument 'reason' must be of type string",
    ),
    (
        {"tool": "create_ticket", "arguments": {"title": 3}},
        "create_ticket: argument 'title' must be of type string",
    ),
]


def test_a_wrong_type_is_the_calls_error_and_the_session_goes_on(tmp_path: Path) -> None:
    step = {
        "id": "probe",
        "title": "Call tools with arguments that do not fit, then do the work",
        "verify": {"command": "test -s out/result.txt", "exit_code": 0},
        "actions": [action for action, _ in BAD] + PUBLISH,
    }
    events = run_session(tmp_path, [step])

    for position, (_, complaint) in enumerate(BAD, start=1):
        result = result_of(events, f"solo.probe.{position}")
        assert not result.ok and result.error is not None and complaint in result.error, result
    # One harness attempt, never stopped on an error; nothing of a refused call took effect.
    ends = [
        e.payload for e in events if isinstance(e.payload, Lifecycle) and e.payload.kind == "harness_finished"
    ]
    assert len(ends) == 1 and not ends[0].reason
    assert not [e for e in events if isinstance(e.payload, Wait) and e.payload.kind == "on_user"]
    assert not [e for e in events if isinstance(e.payload, Note)]
    assert not [e for e in events if isinstance(e.payload, ApprovalRequest)]  # no retry of the ticket
    assert tickets_in(tmp_path / "home", SESSION) == 0
    # The briefing is true: the work after the refused calls was done, and nothing is left open.
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded"
    assert [(s["task_id"], s["status"]) for s in page["steps"] if s["task_id"] == "solo/probe"] == [
        ("solo/probe", "verified")
    ]
    # The refused ticket is shown as what it is, a failed effect, with nothing to retry.
    [ticket] = page["needs_attention"]
    assert (ticket["kind"], ticket["id"], ticket["command"]) == ("failed_effect", "solo.probe.9", None)
    assert "argument 'title' must be of type string" in ticket["summary"]
