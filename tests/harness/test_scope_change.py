"""`belay amend` after the fix is published: the scope change says what changed and what it made
invalid, the finished session reopens, only the invalid steps are done again (from the last
checkpoint still valid), and the session ends with a new patch whose tests pass."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from belay.journal.events import (
    CheckpointEvent,
    Event,
    LifecycleEvent,
    ScopeChangeEvent,
    TaskEvent,
    ToolRequestEvent,
)
from tests.belay_cli import completed, deliverables, kill_group, run_belay, start_belay, tickets_in
from tests.harness.example import SESSION, brief_json, repo_tests_pass, run_example, step_status, wait_for

pytestmark = pytest.mark.slow

OLD_GOAL_END = "deliver a patch plus a short report."
ADDED = " Also reject a key given twice in one section."
REDONE = [
    "implementer/regression-test",
    "implementer/fix",
    "researcher/report",
    "implementer/verify",
    "implementer/publish",
]
REUSED = ["researcher/reproduce", "researcher/diagnose"]


def verified_steps(events: list[Event]) -> Counter[str]:
    return Counter(
        e.payload.task_id
        for e in events
        if isinstance(e, TaskEvent) and "/" in e.payload.task_id and e.payload.status == "verified"
    )


def test_amending_the_goal_redoes_only_what_depended_on_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result, first = run_example(home, "--quiet")
    assert result.returncode == 0, result.stderr
    goal = next(e.payload.goal for e in first if e.type == "user_input")
    assert goal.endswith(OLD_GOAL_END)
    first_patch = deliverables(first)["fix.patch"]

    amend = run_belay(
        home, "amend", SESSION, "--goal", goal + ADDED, "--by", "dana", "-m", "refuse duplicate keys"
    )
    assert amend.returncode == 0, amend.stderr
    assert "recorded request v2" in amend.stdout and f"`belay resume {SESSION}`" in amend.stdout

    # The brief: the change (when, by whom, the difference), what it made invalid and why, what
    # stays reusable and why; nothing shown done or ready that is invalid now.
    brief = brief_json(home)
    assert brief["request_version"] == 2
    [change] = brief["scope_changes"]
    assert (change["by"], change["summary"]) == ("dana", "refuse duplicate keys")
    assert change["changes"] == [{"part": "goal", "before": goal, "after": goal + ADDED}]
    invalid = {v["step"]: v["why"] for v in change["invalid_steps"]}
    assert sorted(invalid) == sorted(REDONE)  # the subagents' steps interleave as they ran
    assert invalid["implementer/fix"] == "depends on goal, changed in v2"
    assert invalid["implementer/verify"] == "built on implementer/fix"
    assert {o["label"] for o in change["invalid_outputs"]} >= {"fix.patch", "report.md"}
    reusable = {v["step"]: v["why"] for v in change["reusable_steps"]}
    assert reusable == {step: "depends on repository only: unchanged" for step in REUSED}
    assert all(step_status(brief, step) == "planned" for step in REDONE)
    assert all(step_status(brief, step) == "verified" for step in REUSED)
    assert brief["ready_for_review"] == []
    # No attempt runs: nothing broke, request v2 waits for a resume, and the page says how.
    assert brief["phase"] == "Pending"
    assert "request v2 waits for a resume" in brief["interruption"]["why"]
    assert brief["interruption"]["command"] == f"belay resume {SESSION}"
    assert "reopened (request v2 (dana): refuse duplicate keys)" in brief["interruption"]["why"]
    text = run_belay(home, "brief", SESSION).stdout
    assert "by dana: refuse duplicate keys" in text and f"goal: {goal!r} -> {goal + ADDED!r}" in text
    assert "researcher/reproduce [now verified]: depends on repository only: unchanged" in text
    assert "implementer/publish [now planned, round 2]: built on implementer/verify" in text

    # The session reopens: only the invalid steps run again. The new patch needs an approval of its
    # own, and the person can read it before approving.
    process = start_belay(home, "resume", "--quiet", SESSION)
    try:
        approval = "approve-implementer.publish@2.3"
        wait_for(
            home, lambda es: any(getattr(e.payload, "approval_id", "") == approval for e in es), approval
        )
        [action] = [a for a in brief_json(home)["waiting_on_you"] if a["id"] == approval]
        content = action["fetch"][0]
        fetched = tmp_path / "fix.patch"
        command = content["command"].split()
        assert command[:3] == ["belay", "artifacts", "get"]
        got = run_belay(home, *command[1:-2], "-o", str(fetched))
        assert got.returncode == 0, got.stderr
        assert "given twice in one section" in fetched.read_text()
        assert repo_tests_pass(fetched, tmp_path / "read-before-approving")
        assert run_belay(home, "approve", SESSION, approval, "--by", "dana").returncode == 0
        assert process.wait(timeout=180) == 0
    finally:
        if process.poll() is None:
            kill_group(process)

    events = wait_for(home, completed, "session_completed")
    amended_at = next(e.seq for e in events if isinstance(e, ScopeChangeEvent))
    after = [e for e in events if e.seq > amended_at]
    # No reused step ran again: none of its calls was requested after the change.
    requested = {e.payload.operation_id for e in after if isinstance(e, ToolRequestEvent)}
    assert not [op for op in requested if op.startswith(("researcher.reproduce", "researcher.diagnose"))]
    assert verified_steps(events) == Counter({**dict.fromkeys(REDONE, 2), **dict.fromkeys(REUSED, 1)})
    assert tickets_in(home, SESSION) == 1  # the ticket (a reused step's effect) was not filed again
    # The redone subagent started again from its inputs; the other from its last valid checkpoint,
    # rebuilt from the inputs' revision and its patch.
    restored = {
        e.payload.subagent: e.payload
        for e in after
        if isinstance(e, LifecycleEvent) and e.payload.kind == "restored"
    }
    assert restored["implementer"].checkpoint_id == "implementer/inputs"
    assert restored["researcher"].checkpoint_id == "researcher/diagnose"
    diagnose = next(
        e.payload
        for e in events
        if isinstance(e, CheckpointEvent) and e.payload.checkpoint_id == "researcher/diagnose"
    )
    assert (
        diagnose.repository_revision
        and f"at revision {diagnose.repository_revision[:12]}" in restored["researcher"].detail
    )
    # A new patch, whose tests pass.
    new_patch = deliverables(events)["fix.patch"]
    assert new_patch != first_patch
    downloaded = tmp_path / "final.patch"
    assert run_belay(home, "artifacts", "get", SESSION, "fix.patch", "-o", str(downloaded)).returncode == 0
    assert repo_tests_pass(downloaded, tmp_path / "final")
    final = brief_json(home)
    assert final["phase"] == "Succeeded"
    assert {r["name"]: r["sha256"] for r in final["ready_for_review"]}["fix.patch"] == new_patch
