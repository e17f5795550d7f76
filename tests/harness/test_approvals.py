"""Approvals: bound to one operation and one payload hash; a kill while waiting loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from belay.api.agentsession import ApprovalGrant
from belay.harness.approval_terms import declared_grant
from belay.journal.events import EffectClass, Event, ToolRequest, ToolRequestEvent
from tests.belay_cli import kill_group, read_events, run_belay, start_belay
from tests.harness.example import SESSION, manifest_copy, wait_for

PUBLISH = "implementer.publish.3"
APPROVAL = f"approve-{PUBLISH}"


def approval_requested(events: list[Event]) -> bool:
    return any(
        e.type == "approval_request" and getattr(e.payload, "approval_id", "") == APPROVAL for e in events
    )


def test_after_a_kill_brief_shows_steps_and_the_pending_approval_and_approve_resumes(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest", approvals=[])
    home = tmp_path / "home"
    process = start_belay(home, "run", "--quiet", str(manifest))
    try:
        wait_for(home, approval_requested, f"the approval request {APPROVAL}", timeout=120)
    finally:
        kill_group(process)

    brief = run_belay(home, "brief", SESSION)
    assert brief.returncode == 0, brief.stderr
    text = brief.stdout
    assert f"belay approve {SESSION} {APPROVAL}" in text
    assert "verified  implementer/verify" in text and "verified  researcher/reproduce" in text
    assert "implementer/publish" in text.split("Waiting on you")[0]  # the current step, above the waits

    assert run_belay(home, "approve", SESSION, APPROVAL, "--by", "reviewer").returncode == 0
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stderr
    events = read_events(home, SESSION)
    approvals = [e for e in events if e.type == "approval"]
    assert [(a.payload.granted, a.payload.by) for a in approvals] == [(True, "reviewer")]
    assert (
        sum(1 for e in events if isinstance(e, ToolRequestEvent) and e.payload.operation_id == PUBLISH) == 1
    )
    assert any(e.type == "artifact" and e.payload.name == "fix.patch" for e in events)


def test_a_declared_approval_matches_only_its_operation_payload_and_lifetime() -> None:
    request = ToolRequest(
        operation_id=PUBLISH,
        tool="publish_deliverable",
        effect=EffectClass.IDEMPOTENT,
        payload_sha256="a" * 64,
    )
    now = datetime.now(UTC)
    grant = ApprovalGrant(operation_id=PUBLISH, payload_sha256="a" * 64)
    assert declared_grant([grant], request, APPROVAL, now) == grant
    assert declared_grant(
        [ApprovalGrant(approval_id=APPROVAL, payload_sha256="a" * 64)], request, APPROVAL, now
    )
    other_payload = ApprovalGrant(operation_id=PUBLISH, payload_sha256="b" * 64)
    other_operation = ApprovalGrant(operation_id="implementer.fix.1", payload_sha256="a" * 64)
    expired = ApprovalGrant(
        operation_id=PUBLISH, payload_sha256="a" * 64, expires_at=now - timedelta(seconds=1)
    )
    assert declared_grant([other_payload, other_operation, expired], request, APPROVAL, now) is None
