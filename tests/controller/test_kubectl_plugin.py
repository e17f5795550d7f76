from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from belay.cli.kubectl_plugin import (
    PluginError,
    _request_patch,
    amended_request,
    approval_grant,
    briefing,
    rejection_entry,
    status_report,
)
from belay.journal.report import render_html

HASH = "c188ef05cebdb6363660643c540c6ecabe0e3da64ccb272b018fbc5e7c3a7771"
STATUS: dict[str, Any] = {
    "phase": "WaitingOnUser",
    "waitingOn": "approval approve-implementer.publish.3",
    "currentStep": "implementer/publish",
    "attempt": 3,
    "lease": 3,
    "harnessLost": 1,
    "restores": 2,
    "conditions": [{"type": "Ready", "status": "True", "reason": "Running"}],
    "pendingApprovals": [
        {
            "approvalId": "approve-implementer.publish.3",
            "operationId": "implementer.publish.3",
            "tool": "publish_deliverable",
            "payloadSha256": HASH,
            "summary": "publish fix.patch",
            "contentSha256": "cd" * 32,
            "contentLocation": "https://s3.example/blobs/cd?signature=x",
        }
    ],
    "deliverables": [
        {
            "name": "report.md",
            "sha256": "ab" * 32,
            "size": 812,
            "location": "file:///store/ab",
            "readyForReview": True,
        }
    ],
    "subagents": [{"name": "implementer", "tasks": 5, "done": 4}],
    "sandboxes": [
        {"subagent": "implementer", "pod": "s-sbx-implementer-3", "service": "x", "phase": "Running"}
    ],
}
SESSION = {
    "metadata": {"name": "parser-fix"},
    "spec": {"request": {"goal": "Fix the parser."}},
    "status": STATUS,
}
CHECKPOINT = {
    "metadata": {"name": "parser-fix-cp-40"},
    "spec": {"checkpointId": "implementer/fix", "seq": 40, "verified": True, "nextStep": "verify"},
}


def test_briefing_says_what_waits_on_the_reader_and_how_to_answer() -> None:
    text = briefing(SESSION, [CHECKPOINT])
    assert text.splitlines()[0] == "parser-fix: WaitingOnUser"
    assert "waiting on: approval approve-implementer.publish.3" in text
    assert f"payload sha256 {HASH}" in text
    assert "kubectl belay approve parser-fix approve-implementer.publish.3" in text
    assert f"read what it sends out (sha256 {'cd' * 32}): https://s3.example/blobs/cd?signature=x" in text
    assert 'kubectl belay reject parser-fix approve-implementer.publish.3 --reason "..."' in text
    assert 'to have it redone: kubectl belay reject parser-fix report.md --reason "..."' in text
    assert "report.md (ready for review): 812 bytes" in text
    assert "implementer: 4/5 tasks done, pod s-sbx-implementer-3 (Running)" in text
    assert "implementer/fix (seq 40, verified, next: verify)" in text


def test_a_grant_copies_the_pending_payload_hash_by_approval_or_operation_id() -> None:
    expected = {
        "approvalId": "approve-implementer.publish.3",
        "operationId": "implementer.publish.3",
        "payloadSha256": HASH,
    }
    assert approval_grant(STATUS, "approve-implementer.publish.3") == expected
    assert approval_grant(STATUS, "implementer.publish.3") == expected
    with pytest.raises(PluginError, match="no pending approval 'other'"):
        approval_grant(STATUS, "other")


def test_a_rejection_names_the_hash_the_status_shows_and_needs_a_reason() -> None:
    assert rejection_entry(STATUS, "implementer.publish.3", "git format", "dana") == {
        "item": "approve-implementer.publish.3",
        "sha256": HASH,
        "reason": "git format",
        "by": "dana",
    }
    assert rejection_entry(STATUS, "report.md", "too long", "dana")["sha256"] == "ab" * 32
    with pytest.raises(PluginError, match="--reason"):
        rejection_entry(STATUS, "report.md", " ", "dana")
    with pytest.raises(PluginError, match=r"no pending approval or deliverable 'fix\.patch'"):
        rejection_entry(STATUS, "fix.patch", "why", "dana")


def test_an_amendment_is_the_request_after_the_change_as_a_merge_patch() -> None:
    request = {"goal": "Fix the parser.", "parts": {"repository": "repo", "deadline": "friday"}}
    new = amended_request(request, "Fix the parser and the docs.", ["style=pep8"], ["deadline"], None)
    assert new == {"goal": "Fix the parser and the docs.", "parts": {"repository": "repo", "style": "pep8"}}
    # A removed part is a null in the merge patch.
    assert _request_patch(request, new)["parts"] == {"repository": "repo", "style": "pep8", "deadline": None}
    manifest = {"spec": {"request": {"goal": "Another goal."}}}
    assert amended_request(request, None, [], [], manifest) == {"goal": "Another goal.", "parts": {}}
    with pytest.raises(PluginError, match="nothing changes"):
        amended_request(request, "Fix the parser.", [], [], None)
    with pytest.raises(PluginError, match="expected KEY=VALUE"):
        amended_request(request, None, ["novalue"], [], None)
    with pytest.raises(PluginError, match="not both"):
        amended_request(request, "g", [], [], manifest)


def test_briefing_of_a_recovering_session_names_the_silent_attempt_and_the_resources() -> None:
    status = {
        **STATUS,
        "phase": "Recovering",
        "interruption": {
            "attempt": 3,
            "since": "2026-11-29T10:00:00Z",
            "why": "attempt 3 stopped renewing its lease (last renewal 2026-11-29 10:00:00 UTC)",
            "doing": "step implementer/publish; 1 operation(s) without a result",
            "next": "the operator records attempt 3 lost, fences it and starts attempt 4",
            "operations": [
                {
                    "operationId": "implementer.publish.3",
                    "tool": "publish_deliverable",
                    "effect": "idempotent",
                    "subagent": "implementer",
                    "action": "rerun",
                    "settled": "interrupted, will be settled by the next attempt: idempotent: runs again",
                }
            ],
        },
        "counts": {"modelCalls": 31, "tokens": 0},
    }
    session = {
        "metadata": {"name": "parser-fix"},
        "spec": {
            "request": {"goal": "Fix the parser."},
            "subagents": [{"name": "implementer", "networkProfile": "none"}],
            "budgets": {"maxModelCalls": 200},
        },
        "status": status,
    }
    checkpoints = [
        CHECKPOINT,
        {
            "metadata": {"name": "cp-30"},
            "spec": {
                "checkpointId": "researcher/report",
                "seq": 30,
                "verified": True,
                "subagent": "researcher",
            },
        },
        {
            "metadata": {"name": "cp-45"},
            "spec": {
                "checkpointId": "implementer/verify",
                "seq": 45,
                "verified": False,
                "subagent": "implementer",
            },
        },
        {
            "metadata": {"name": "cp-41"},
            "spec": {
                "checkpointId": "implementer/fix",
                "seq": 41,
                "verified": True,
                "subagent": "implementer",
            },
        },
    ]
    lines = briefing(session, checkpoints).splitlines()
    assert lines[0] == "parser-fix: Recovering"
    assert lines[1] == "Recovering since 2026-11-29T10:00:00Z: " + status["interruption"]["why"]
    text = "\n".join(lines)
    assert (
        "  operation implementer.publish.3 (publish_deliverable [implementer]): interrupted, will be settled "
        "by the next attempt" in text
    )
    assert "  next: the operator records attempt 3 lost" in text
    assert "implementer: 4/5 tasks done, pod s-sbx-implementer-3 (Running), profile none" in text
    assert "budget maxModelCalls: 31 used, 169 left of 200" in text
    assert "last verified checkpoint of implementer: implementer/fix (seq 41)" in text
    assert "last verified checkpoint of researcher: researcher/report (seq 30)" in text


def test_the_report_from_the_status_shows_the_interruption_waits_and_checkpoints() -> None:
    status = {
        **STATUS,
        "conditions": [
            {
                "type": "WaitingOnUser",
                "status": "True",
                "reason": "AwaitingApproval",
                "lastTransitionTime": "2026-11-29T10:00:00Z",
            },
            {
                "type": "WaitingOnExternal",
                "status": "False",
                "reason": "NothingPending",
                "lastTransitionTime": "2026-11-29T08:00:00Z",
            },
        ],
        "interruption": {
            "attempt": 3,
            "since": "2026-11-29T10:30:00Z",
            "why": "attempt 3 stopped renewing",
            "doing": "step implementer/publish",
            "next": "the operator starts attempt 4",
        },
    }
    session = {**SESSION, "status": status}
    checkpoint = {
        **CHECKPOINT,
        "metadata": {**CHECKPOINT["metadata"], "creationTimestamp": "2026-11-29T09:40:00Z"},
    }
    now = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
    report = status_report(session, [checkpoint], now=now)
    [approval] = report.waits
    assert approval.wait_id == "approve-implementer.publish.3" and approval.opened == datetime(
        2026, 11, 29, 10, 0, tzinfo=UTC
    )
    [gap] = report.gaps
    assert gap.attempt == 3 and gap.end is None
    html = render_html([report])
    assert (
        "Interrupted 30 min 0 s: attempt 3 stopped renewing. It was doing: step implementer/publish." in html
    )
    assert "not resumed yet. Next: the operator starts attempt 4." in html
    assert "Waited on you 1 h 0 min in 1 wait(s), 1 still open" in html
    assert "checkpoint implementer/fix (seq 40, verified)" in html
    assert '<a href="file:///store/ab">file:///store/ab</a>' in html
    assert "keep no history of steps, calls and waits" in html
    assert "Done: implementer 4 of 5 tasks" in html and 'class="label label-session"' not in html


def test_the_report_from_the_status_fetches_a_deliverable_by_its_presigned_url_quoted() -> None:
    url = "https://s3.example/b/ab?X-Amz-Signature=1&X-Amz-Expires=900"
    deliverable = {"name": "out/x; rm -rf ~", "sha256": "ab" * 32, "size": 3, "location": url}
    session = {**SESSION, "status": {**STATUS, "deliverables": [deliverable]}}
    [entry] = status_report(session, [], now=datetime(2026, 11, 29, tzinfo=UTC)).deliverables
    assert entry.command == f"curl -fsSL -o 'x; rm -rf ~' '{url}'"
