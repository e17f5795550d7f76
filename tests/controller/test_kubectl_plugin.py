"""`kubectl belay`'s own pieces without a cluster: the page it prints from a status the operator
projected from a real record, what an approval, a rejection and an amendment write into the spec,
and the timeline report from a status and its Checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from belay.api.agentsession import parse_manifest
from belay.cli.core import brief as brief_command
from belay.cli.core.amend import Request, amend
from belay.cli.core.decide import OnApproval, OnDeliverable, OpenItems, to_approve, to_reject
from belay.cli.core.errors import CommandError
from belay.cli.kubectl_plugin import approval_grant, rejection_entry, request_patch
from belay.controller.status import session_status_patch
from belay.journal import commands
from belay.journal.phase import Liveness
from belay.journal.state import fold
from belay.views.briefing.render import render_text
from belay.views.report.from_status import CheckpointObject, fetch_command, status_report
from belay.views.report.html import render_html
from belay.views.status.model import DeliverableStatus, SessionStatus
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.journal.fixtures import realistic_log

HASH = "c188ef05cebdb6363660643c540c6ecabe0e3da64ccb272b018fbc5e7c3a7771"
NOW = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


def projected(events: list[Any], *, alive: bool = True) -> dict[str, Any]:
    """The AgentSession of a record, with the status the operator projects from it."""
    state = fold(events)
    lease = state.lifecycle.lease or 1
    liveness = Liveness(
        now=NOW,
        lease=lease,
        renewed_lease=lease,
        renewed_at=NOW if alive else NOW - timedelta(minutes=10),
        recovered_by="operator",
    )
    status = session_status_patch(state, previous_status=None, generation=1, now=NOW, liveness=liveness)
    manifest = {**EXAMPLE_MANIFEST, "metadata": {"name": state.session_id}}
    manifest["spec"] = {
        **manifest["spec"],
        "request": {"goal": state.request.goal, "parts": state.request.parts},
    }
    return {**manifest, "status": status.to_status()}


@pytest.fixture(scope="module")
def record() -> list[Any]:
    return realistic_log()


def test_the_page_names_what_waits_on_the_reader_with_kubectl_commands(record: list[Any]) -> None:
    session = parse_manifest(projected(record))
    page = render_text(brief_command.of_cluster(session, now=NOW))
    assert page.splitlines()[0].startswith(f"Session {session.session_id}: ")
    # Every command the page names is spelled for kubectl: a cluster user has no local home.
    commands = [line.split("run: ", 1)[1] for line in page.splitlines() if "run: " in line]
    assert commands and all(c.startswith("kubectl belay ") for c in commands), commands
    assert "belay approve" not in page.replace("kubectl belay approve", "")


def test_a_grant_copies_the_pending_payload_hash_by_approval_or_operation_id() -> None:
    status = SessionStatus.model_validate(
        {
            "phase": "WaitingOnUser",
            "conditions": [],
            "counts": {},
            "pendingApprovals": [
                {
                    "approvalId": "approve-implementer.publish.3",
                    "operationId": "implementer.publish.3",
                    "tool": "publish_deliverable",
                    "payloadSha256": HASH,
                    "command": "kubectl belay approve parser-fix approve-implementer.publish.3",
                }
            ],
            "deliverables": [
                {
                    "name": "report.md",
                    "sha256": "ab" * 32,
                    "size": 812,
                    "mediaType": "text/markdown",
                    "location": "file:///store/ab",
                    "readyForReview": True,
                    "command": "kubectl belay artifacts get parser-fix report.md -o report.md",
                }
            ],
        }
    )
    items = OpenItems.of_status("parser-fix", status)
    expected = {
        "approvalId": "approve-implementer.publish.3",
        "operationId": "implementer.publish.3",
        "payloadSha256": HASH,
    }
    for named in ("approve-implementer.publish.3", "implementer.publish.3"):
        target = to_approve(items, named)
        assert isinstance(target, OnApproval) and approval_grant(target.approval) == expected
    with pytest.raises(CommandError, match="no approval or wait 'other' in session parser-fix"):
        to_approve(items, "other")

    rejected = to_reject(items, "implementer.publish.3", "git format")
    assert isinstance(rejected, OnApproval)
    assert rejection_entry(rejected, "git format", "dana") == {
        "item": "approve-implementer.publish.3",
        "sha256": HASH,
        "reason": "git format",
        "by": "dana",
    }
    deliverable = to_reject(items, "report.md", "too long")
    assert isinstance(deliverable, OnDeliverable)
    assert rejection_entry(deliverable, "too long", "dana")["sha256"] == "ab" * 32
    with pytest.raises(CommandError, match="--reason"):
        to_reject(items, "report.md", " ")
    with pytest.raises(CommandError, match=r"no approval, wait or deliverable 'fix\.patch'"):
        to_reject(items, "fix.patch", "why")


def test_an_amendment_is_the_request_after_the_change_as_a_merge_patch(tmp_path: Path) -> None:
    request = Request("Fix the parser.", {"repository": "repo", "deadline": "friday"})
    new = amend(request, 1, goal="Fix the parser and the docs.", parts=["style=pep8"], removed=["deadline"])
    assert new.request == Request("Fix the parser and the docs.", {"repository": "repo", "style": "pep8"})
    # A removed part is a null in the merge patch.
    patch = request_patch(request, new.request)
    assert patch["parts"] == {"repository": "repo", "style": "pep8", "deadline": None}
    with pytest.raises(CommandError, match="nothing changes: this is request v1 as it stands"):
        amend(request, 1, goal="Fix the parser.")
    with pytest.raises(CommandError, match="expected KEY=VALUE"):
        amend(request, 1, parts=["novalue"])
    with pytest.raises(CommandError, match="not both"):
        amend(request, 1, goal="g", manifest=tmp_path / "m.yaml")


def test_the_page_of_a_recovering_session_names_the_silent_attempt_and_the_resources(
    record: list[Any],
) -> None:
    state = fold(record)
    # Its attempt stops renewing its lease: the operator shows it recovering.
    raw = projected(record, alive=False)
    raw["spec"]["budgets"] = {"maxModelCalls": 200}
    raw["status"]["sandboxes"] = [
        {"subagent": "implementer", "pod": "s-sbx-implementer-3", "service": "x", "phase": "Running"}
    ]
    session = parse_manifest(raw)
    page = render_text(brief_command.of_cluster(session, now=NOW))
    lines = page.splitlines()
    assert lines[1].startswith("Recovering since ") and "stopped renewing its lease" in lines[1]
    assert any(line.strip().startswith("next: the operator records attempt") for line in lines)
    assert "sandbox implementer: alive (pod s-sbx-implementer-3 (Running), profile none)" in page
    assert f"budget maxModelCalls: {state.model_calls} used, {200 - state.model_calls} left of 200" in page
    assert state.verified_checkpoints
    for cp in state.verified_checkpoints.values():
        owner = f"{cp.checkpoint.subagent}: " if cp.checkpoint.subagent else ""
        assert f"last verified checkpoint {owner}{cp.checkpoint.checkpoint_id}" in page


def test_the_report_from_the_status_shows_the_interruption_waits_and_checkpoints() -> None:
    status = SessionStatus.model_validate(
        {
            "phase": "Recovering",
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
            "counts": {},
            "interruption": {
                "attempt": 3,
                "since": "2026-11-29T10:30:00Z",
                "why": "attempt 3 stopped renewing",
                "doing": "step implementer/publish",
                "next": "the operator starts attempt 4",
            },
            "pendingApprovals": [
                {
                    "approvalId": "approve-implementer.publish.3",
                    "operationId": "implementer.publish.3",
                    "tool": "publish_deliverable",
                    "payloadSha256": HASH,
                    "command": "kubectl belay approve parser-fix approve-implementer.publish.3",
                }
            ],
            "deliverables": [
                {
                    "name": "report.md",
                    "sha256": "ab" * 32,
                    "size": 812,
                    "mediaType": "text/markdown",
                    "location": "file:///store/ab",
                    "command": "x",
                }
            ],
            "subagents": [{"name": "implementer", "tasks": 5, "done": 4}],
        }
    )
    checkpoint = CheckpointObject(
        checkpoint_id="implementer/fix",
        subagent="implementer",
        seq=40,
        verified=True,
        created=datetime(2026, 11, 29, 9, 40, tzinfo=UTC),
    )
    report = status_report(
        "parser-fix", status, goal="Fix the parser.", checkpoints=[checkpoint], briefing=[], now=NOW
    )
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
    # The status carries no briefing here: its steps are not known, and no checkpoint counts as one.
    assert "Done: steps not known yet" in html and 'class="label label-session"' not in html


def test_the_report_from_the_status_fetches_a_deliverable_with_kubectl_belay_never_a_url() -> None:
    deliverable = DeliverableStatus(
        name="report.md",
        sha256="ab" * 32,
        size=3,
        media_type="text/plain",
        location="s3://belay-artifacts/blobs/ab/" + "ab" * 32,
        command=commands.download("parser-fix", "report.md"),
    )
    command = fetch_command(deliverable)
    assert command == "kubectl belay artifacts get parser-fix report.md -o report.md"
    assert "s3://" not in command and "http" not in command


def test_drill_refuses_the_change_drill_with_the_command_that_runs_it(tmp_path: Path) -> None:
    """`kubectl belay drill --change` is refused before any cluster is asked (the kubeconfig
    named here does not exist), in one line naming the local change drill; never accepted and run
    as an interruption drill."""
    from typer.testing import CliRunner

    from belay.cli.kubectl_plugin import app

    missing = str(tmp_path / "no-kubeconfig")
    result = CliRunner().invoke(
        app,
        ["drill", "parser-fix", "--change", "--at", "checkpoint:implementer/fix", "--kubeconfig", missing],
    )
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "belay drill MANIFEST --change" in errors[0]
    assert "drill" not in result.output.replace(errors[0], "")
