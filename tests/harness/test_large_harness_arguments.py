"""A large value reaches a harness tool as it reaches a sandbox tool: the record keeps its hash,
the tool gets the text (`belay.harness.arguments`). A note or a ticket body past the size one
argument may have in the record (16 KiB) once failed on the placeholder, and the unsafe ticket
then waited on a retry that could never succeed. What cannot fit one event of the record (a note
of 100 KiB, a wait's reason of 100 KiB) is that call's error, and the session goes on."""

from __future__ import annotations

import json
from pathlib import Path

from belay.harness.arguments import LARGE_ARGUMENT_BYTES
from belay.journal.events import ApprovalRequest, Lifecycle, Note, ToolRequest, Wait
from belay.local.runtime import LocalHome
from tests.harness.content import PUBLISH, SESSION, brief, result_of, run_session

NOTE = "".join(f"finding {i:05d}: the parser drops the last field\n" for i in range(500))  # ~24 KiB
BODY = "".join(f"step {i:05d} to reproduce\n" for i in range(2000))  # ~46 KiB
HUGE = "x" * (100 * 1024)


def test_large_values_reach_harness_tools_and_what_cannot_be_recorded_is_the_calls_error(
    tmp_path: Path,
) -> None:
    assert len(NOTE) > LARGE_ARGUMENT_BYTES and len(BODY) > LARGE_ARGUMENT_BYTES
    step = {
        "id": "write-up",
        "title": "Record a long finding and file a ticket with a long body",
        "verify": {"command": "test -s out/result.txt", "exit_code": 0},
        "actions": [
            {"tool": "record_note", "arguments": {"note_id": "long", "text": NOTE}},
            {"tool": "create_ticket", "arguments": {"title": "The parser drops a field", "body": BODY}},
            {"tool": "record_note", "arguments": {"note_id": "huge", "text": HUGE}},
            {"tool": "wait_on_user", "arguments": {"reason": HUGE}},
            *PUBLISH,
        ],
    }
    events = run_session(tmp_path, [step])

    # The record holds the long values by hash; the tools were given the text.
    requests = {e.payload.operation_id: e.payload for e in events if isinstance(e.payload, ToolRequest)}
    assert set(requests["solo.write-up.1"].arguments["text"]) == {"$artifact", "size"}
    assert set(requests["solo.write-up.2"].arguments["body"]) == {"$artifact", "size"}
    [note] = [e.payload for e in events if isinstance(e.payload, Note)]
    assert (note.note_id, note.text) == ("long", NOTE)
    assert result_of(events, "solo.write-up.1").ok

    # The ticket was filed once, with the whole body, and its answer recorded (by hash: it echoes
    # the body); nothing waits on a retry.
    ticket = result_of(events, "solo.write-up.2")
    assert ticket.ok and ticket.output_ref is not None
    tickets = json.loads(LocalHome(tmp_path / "home").tickets_file(SESSION).read_text())
    tickets = tickets.get("tickets", tickets) if isinstance(tickets, dict) else tickets
    assert [t["body"] for t in tickets] == [BODY]
    assert not [e for e in events if isinstance(e.payload, ApprovalRequest)]

    # What no event can hold is the call's error, never the attempt's end.
    huge_note = result_of(events, "solo.write-up.3")
    assert not huge_note.ok and "a note may have" in (huge_note.error or "")
    huge_wait = result_of(events, "solo.write-up.4")
    assert not huge_wait.ok and "too large" in (huge_wait.error or "")
    assert not [e for e in events if isinstance(e.payload, Wait) and e.payload.kind == "on_user"]
    ends = [
        e.payload for e in events if isinstance(e.payload, Lifecycle) and e.payload.kind == "harness_finished"
    ]
    assert len(ends) == 1 and not ends[0].reason
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded" and page["needs_attention"] == []
