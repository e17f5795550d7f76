"""`belay reject` with a reason, of the published patch or of the patch awaiting approval: the step
is done again (the plan's alternative for a rejected step), the session waits for the person to
approve the new patch, and no brief ever shows the rejected patch as done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from belay.journal.events import Event, LifecycleEvent, RejectionEvent, ToolRequestEvent, ToolResultEvent
from tests.belay_cli import completed, deliverables, kill_group, run_belay, start_belay
from tests.harness.example import (
    SESSION,
    brief_json,
    manifest_copy,
    repo_tests_pass,
    run_example,
    step_status,
    wait_for,
)

pytestmark = pytest.mark.slow

REASON = "Make it a git patch with a commit message, so it applies with git am."
PUBLISH = "implementer/publish"
REDONE_APPROVAL = "approve-implementer.publish@2.5"  # the alternative's fifth call publishes


def approval_requested(approval_id: str) -> Any:
    return lambda events: any(getattr(e.payload, "approval_id", "") == approval_id for e in events)


def assert_not_done(brief: dict[str, Any], rejected_sha: str) -> None:
    """The rejected patch is nowhere shown as done: not ready for review, its step not done."""
    assert rejected_sha not in {r["sha256"] for r in brief["ready_for_review"]}
    assert step_status(brief, PUBLISH) not in ("done", "verified") or brief["phase"] == "Succeeded"
    if brief["phase"] == "Succeeded":
        assert deliverable_sha(brief) != rejected_sha


def deliverable_sha(brief: dict[str, Any]) -> str | None:
    return next((r["sha256"] for r in brief["ready_for_review"] if r["name"] == "fix.patch"), None)


def approve_after_reading(home: Path, tmp_path: Path, approval: str) -> Path:
    """Fetch the bytes the approval binds with the command the brief gives, then approve."""
    [action] = [a for a in brief_json(home)["waiting_on_you"] if a["id"] == approval]
    content = action["fetch"][0]
    fetched = tmp_path / "to-approve.patch"
    got = run_belay(home, *content["command"].split()[1:-2], "-o", str(fetched))
    assert got.returncode == 0, got.stderr
    assert content["sha256"] in got.stderr
    assert run_belay(home, "approve", SESSION, approval, "--by", "dana").returncode == 0
    return fetched


def check_the_new_patch(
    home: Path, tmp_path: Path, events: list[Event], rejected_sha: str, read: Path
) -> None:
    final = brief_json(home)
    assert final["phase"] == "Succeeded"
    assert_not_done(final, rejected_sha)
    patch = tmp_path / "final.patch"
    assert run_belay(home, "artifacts", "get", SESSION, "fix.patch", "-o", str(patch)).returncode == 0
    assert patch.read_bytes() == read.read_bytes()  # exactly what the person read and approved
    assert patch.read_text().startswith("From 0000000000000000000000000000000000000000")  # the alternative
    assert "Subject: [PATCH] confparse" in patch.read_text()
    assert repo_tests_pass(patch, tmp_path / "final")
    assert deliverables(events)["fix.patch"] != rejected_sha


def test_rejecting_the_published_patch_redoes_its_step_until_the_user_approves_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result, first = run_example(home, "--quiet")
    assert result.returncode == 0, result.stderr
    rejected_sha = deliverables(first)["fix.patch"]

    assert run_belay(home, "reject", SESSION, "fix.patch").returncode != 0  # a reason is required
    rejected = run_belay(home, "reject", SESSION, "fix.patch", "--reason", REASON, "--by", "dana")
    assert rejected.returncode == 0, rejected.stderr
    assert f"to redo: {PUBLISH}" in rejected.stdout and f"`belay resume {SESSION}`" in rejected.stdout

    brief = brief_json(home)
    assert brief["phase"] != "Succeeded"
    assert_not_done(brief, rejected_sha)
    [rejection] = brief["rejections"]
    assert (rejection["item"], rejection["sha256"], rejection["reason"], rejection["by"]) == (
        "fix.patch",
        rejected_sha,
        REASON,
        "dana",
    )
    assert [s["step"] for s in rejection["steps"]] == [PUBLISH]
    # Only the publishing step is redone; the researcher's deliverable stays.
    assert [step["task_id"] for step in brief["steps"] if step["status"] == "planned"] == [
        "implementer",
        PUBLISH,
    ]
    assert "report.md" in {r["name"] for r in brief["ready_for_review"]}

    process = start_belay(home, "resume", "--quiet", SESSION)
    try:
        wait_for(home, approval_requested(REDONE_APPROVAL), REDONE_APPROVAL)
        waiting = brief_json(home)
        assert waiting["phase"] == "WaitingOnUser"
        assert_not_done(waiting, rejected_sha)
        read = approve_after_reading(home, tmp_path, REDONE_APPROVAL)
        assert process.wait(timeout=180) == 0
    finally:
        if process.poll() is None:
            kill_group(process)
    events = wait_for(home, completed, "session_completed")
    assert any(isinstance(e, RejectionEvent) and e.payload.reason == REASON for e in events)
    check_the_new_patch(home, tmp_path, events, rejected_sha, read)


def test_rejecting_the_patch_awaiting_approval_redoes_its_step_instead_of_ending(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest", approvals=[])
    home = tmp_path / "home"
    process = start_belay(home, "run", "--quiet", str(manifest))
    try:
        first = "approve-implementer.publish.3"
        wait_for(home, approval_requested(first), first)
        pending = next(a for a in brief_json(home)["waiting_on_you"] if a["id"] == first)
        rejected_sha = pending["fetch"][0]["sha256"]  # the patch it would have published
        rejected = run_belay(home, "reject", SESSION, first, "--reason", REASON, "--by", "dana")
        assert rejected.returncode == 0, rejected.stderr
        assert f"to redo: {PUBLISH}" in rejected.stdout
        wait_for(home, approval_requested(REDONE_APPROVAL), REDONE_APPROVAL)
        assert_not_done(brief_json(home), rejected_sha)
        read = approve_after_reading(home, tmp_path, REDONE_APPROVAL)
        assert process.wait(timeout=180) == 0
    finally:
        if process.poll() is None:
            kill_group(process)
    events = wait_for(home, completed, "session_completed")
    # The rejected operation never ran; its step was redone under new operation ids.
    [result] = [
        e
        for e in events
        if isinstance(e, ToolResultEvent) and e.payload.operation_id == "implementer.publish.3"
    ]
    assert not result.payload.ok and REASON in (result.payload.error or "")
    assert not any(
        isinstance(e, ToolRequestEvent) and e.payload.operation_id == "implementer.publish.done"
        for e in events
    )
    # The running attempt rewound the implementer's workspace to the last checkpoint still valid.
    [rewound] = [
        e.payload
        for e in events
        if isinstance(e, LifecycleEvent) and e.payload.kind == "restored" and "rewound" in e.payload.detail
    ]
    assert (rewound.subagent, rewound.checkpoint_id) == ("implementer", "implementer/verify")
    check_the_new_patch(home, tmp_path, events, rejected_sha, read)
