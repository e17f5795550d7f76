"""A run that ends is Succeeded only when the record proves it: a publishing step whose
verification failed leaves the session NeedsAttention, the empty deliverable is never offered for
review, and the page says what is missing with the command that reopens it; rejecting it has the
step redone, and the session then succeeds. Played through the real `belay`."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from belay.journal.phase import Phase, phase_of
from belay.journal.state import fold
from belay.local.cli_process import read_events, run_belay

SESSION = "empty-patch"


def publishing_session(directory: Path) -> Path:
    """One subagent owing fix.patch: its first step writes the patch empty, its second publishes it
    and verifies it is not empty (`test -s`). Redone after a rejection, the second step writes the
    patch first."""
    publish = {"tool": "publish_deliverable", "arguments": {"path": "out/fix.patch"}}
    patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    plan = {
        "subagents": {
            "worker": {
                "steps": [
                    {
                        "id": "write",
                        "title": "Write the patch",
                        "actions": [
                            {"tool": "write_file", "arguments": {"path": "out/fix.patch", "content": ""}}
                        ],
                    },
                    {
                        "id": "publish",
                        "title": "Publish the patch",
                        "verify": {"command": "test -s out/fix.patch", "exit_code": 0},
                        "actions": [publish],
                        "variants": [
                            {
                                "when": {"rejected": True},
                                "actions": [
                                    {
                                        "tool": "write_file",
                                        "arguments": {"path": "out/fix.patch", "content": patch},
                                    },
                                    publish,
                                ],
                            }
                        ],
                    },
                ]
            }
        }
    }
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "publish a patch that is not empty"},
            "executor": {"type": "scripted", "plan": str(directory / "plan.yaml")},
            "subagents": [
                {
                    "name": "worker",
                    "networkProfile": "none",
                    "deliverable": "fix.patch",
                    "declared": ["out/*"],
                }
            ],
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_a_failed_verification_of_the_publishing_step_needs_attention_until_it_is_redone(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(publishing_session(tmp_path)))
    # The harness recorded the end of its run; the record does not prove it, and `belay run` says so.
    assert ran.returncode != 0, ran.stdout + ran.stderr
    assert f"session {SESSION} did not complete: the run ended, and the record does not prove it done" in (
        ran.stderr
    )
    assert "step worker/publish: its verification `test -s out/fix.patch` (exit 1) failed" in ran.stderr
    state = fold(read_events(home, SESSION))
    assert state.lifecycle.completed and phase_of(state) == Phase.NEEDS_ATTENTION

    page = json.loads(run_belay(home, "brief", SESSION, "--json").stdout)
    assert page["phase"] == "NeedsAttention"
    assert page["ready_for_review"] == []  # the empty patch is offered to nobody
    [publish] = [s for s in page["steps"] if s["task_id"] == "worker/publish"]
    assert (publish["status"], publish["verification_failed"]) == (
        "failed",
        "`test -s out/fix.patch` (exit 1)",
    )
    attention = {a["id"]: a for a in page["needs_attention"]}
    assert attention["worker/publish"]["kind"] == "unproven"
    assert attention["fix.patch"]["summary"].startswith("deliverable fix.patch is empty (0 bytes")
    assert attention["fix.patch"]["command"] == f'belay reject {SESSION} fix.patch --reason "..."'
    text = run_belay(home, "brief", SESSION).stdout
    assert "NeedsAttention" in text and "Ready for review\n  nothing" in text, text
    assert "Needs attention\n  nothing" not in text and "(owes fix.patch: not proven" in text, text
    sessions = run_belay(home, "sessions").stdout
    assert "1 needing attention" in sessions and "0 succeeded" in sessions, sessions
    # Resuming does not make it succeed: nothing new was done.
    again = run_belay(home, "resume", "--quiet", SESSION)
    assert again.returncode != 0 and "does not prove it done" in again.stderr, again.stderr

    rejected = run_belay(home, "reject", SESSION, "fix.patch", "--reason", "it is empty", "--by", "dana")
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = fold(read_events(home, SESSION))
    assert phase_of(state) == Phase.SUCCEEDED
    page = json.loads(run_belay(home, "brief", SESSION, "--json").stdout)
    assert page["phase"] == "Succeeded" and page["needs_attention"] == []
    [review] = page["ready_for_review"]
    assert review["name"] == "fix.patch" and review["size"] > 0
