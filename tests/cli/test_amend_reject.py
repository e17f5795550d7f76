"""`belay amend`, `belay reject` of a deliverable and `belay artifacts get sha256:...` on a record
written directly to a home's event store: what they record, and one `error:` line for every
mistake a person can make."""

from __future__ import annotations

from pathlib import Path

import yaml

from belay.journal.events import (
    Actor,
    ApprovalRequest,
    Artifact,
    Rejection,
    ScopeChange,
    UserInput,
)
from belay.local.runtime import LocalHome
from tests.belay_cli import read_events
from tests.cli.test_decisions import SESSION, invoke, write
from tests.harness.example import MANIFEST


def test_amend_records_the_next_request_version_with_who_changed_what(tmp_path: Path) -> None:
    write(tmp_path, UserInput(goal="fix it", parts={"repository": "repo", "deadline": "friday"}))
    change = ["--goal", "fix it all", "--part", "style=pep8", "--remove-part", "deadline"]
    code, output = invoke(tmp_path, "amend", SESSION, *change, "--by", "dana", "-m", "wider scope")
    assert code == 0, output
    assert "recorded request v2 of decisions (goal, style, deadline changed, by dana)" in output
    assert "nothing recorded so far depended on it" in output
    event = read_events(tmp_path, SESSION)[-1]
    assert event.payload == ScopeChange(
        request_version=2,
        summary="wider scope",
        goal="fix it all",
        changed_parts={"style": "pep8"},
        removed_parts=("deadline",),
        by="dana",
    )
    assert event.actor == Actor(kind="user", name="dana")
    # The whole request from a manifest: its goal and parts replace the recorded ones.
    code, output = invoke(tmp_path, "amend", SESSION, "-f", str(MANIFEST))
    assert code == 0, output
    change = read_events(tmp_path, SESSION)[-1].payload
    request = yaml.safe_load(MANIFEST.read_text())["spec"]["request"]
    assert isinstance(change, ScopeChange) and change.request_version == 3
    assert (change.goal, change.changed_parts, change.removed_parts) == (
        request["goal"],
        request["parts"],
        ("style",),
    )


def test_amend_refuses_what_changes_nothing_or_cannot_be_read(tmp_path: Path) -> None:
    write(tmp_path, UserInput(goal="fix it", parts={"repository": "repo"}))
    for args, message in [
        (("--goal", "fix it"), "error: nothing changes: this is request v1 as it stands"),
        (("--part", "repository"), "error: --part 'repository': expected KEY=VALUE"),
        (("--remove-part", "deadline"), "error: --remove-part 'deadline': the request has no such part"),
        (("--goal", " "), "error: --goal cannot be empty"),
        (("-f", str(MANIFEST), "--goal", "x"), "error: give either -f MANIFEST or --goal"),
        (("-f", str(tmp_path / "missing.yaml")), "error: bad manifest:"),
    ]:
        code, output = invoke(tmp_path, "amend", SESSION, *args)
        assert code != 0 and output.startswith(message), (args, output)
        assert "Traceback" not in output
    code, output = invoke(tmp_path, "amend", "no-such-session", "--goal", "x")
    assert code != 0 and "error: unknown session 'no-such-session'" in output
    assert len(read_events(tmp_path, SESSION)) == 1


PATCH = b"--- a/x\n+++ b/x\n"


def test_reject_a_deliverable_needs_a_reason_and_records_the_exact_bytes(tmp_path: Path) -> None:
    ref = LocalHome(tmp_path).open_artifact_store().put(PATCH)
    write(tmp_path, UserInput(goal="g"), Artifact(name="fix.patch", ref=ref, deliverable=True))
    code, output = invoke(tmp_path, "reject", SESSION, "fix.patch")
    assert code != 0 and output.startswith('error: say why with --reason "..."')
    code, output = invoke(
        tmp_path, "reject", SESSION, "fix.patch", "--reason", "use git format", "--by", "dana"
    )
    assert code == 0, output
    assert f"rejected fix.patch (sha256 {ref.sha256})" in output
    event = read_events(tmp_path, SESSION)[-1]
    assert event.payload == Rejection(name="fix.patch", sha256=ref.sha256, reason="use git format", by="dana")
    # Withdrawn now: rejecting it again names nothing published.
    code, output = invoke(tmp_path, "reject", SESSION, "fix.patch", "--reason", "again")
    assert code != 0 and output.startswith(
        f"error: fix.patch (sha256 {ref.sha256}) is not a published deliverable"
    )


def test_artifacts_get_by_hash_fetches_only_what_the_record_names(tmp_path: Path) -> None:
    store = LocalHome(tmp_path).open_artifact_store()
    payload, content, stranger = store.put(b'{"tool":"publish"}'), store.put(PATCH), store.put(b"not named")
    write(
        tmp_path,
        UserInput(goal="g"),
        ApprovalRequest(
            approval_id="approve-op",
            operation_id="op",
            tool="publish_deliverable",
            payload_sha256=payload.sha256,
            summary="s",
            payload_ref=payload,
            content_ref=content,
            content_name="fix.patch",
        ),
    )
    target = tmp_path / "read.patch"
    code, output = invoke(
        tmp_path, "artifacts", "get", SESSION, f"sha256:{content.sha256}", "-o", str(target)
    )
    assert code == 0, output
    assert target.read_bytes() == PATCH
    code, output = invoke(
        tmp_path, "artifacts", "get", SESSION, f"sha256:{stranger.sha256}", "-o", str(target)
    )
    assert code != 0 and output.startswith(f"error: session {SESSION} names no blob sha256:{stranger.sha256}")
