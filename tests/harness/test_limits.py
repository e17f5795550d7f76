"""Budgets and the recovery policy stop a session visibly, in the record."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import LifecycleEvent
from tests.belay_cli import read_events, run_belay, run_until
from tests.harness.example import SESSION, manifest_copy


def failures(home: Path) -> list[str]:
    return [
        e.payload.reason
        for e in read_events(home, SESSION)
        if isinstance(e, LifecycleEvent) and e.payload.kind == "session_failed"
    ]


def test_the_model_call_budget_stops_the_session(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest", budgets={"maxModelCalls": 4})
    result = run_belay(tmp_path / "home", "run", "--quiet", str(manifest))
    assert result.returncode != 0 and "maxModelCalls" in result.stderr
    assert failures(tmp_path / "home") == ["BudgetExhausted"]
    calls = [e for e in read_events(tmp_path / "home", SESSION) if e.type == "model_output"]
    assert len(calls) <= 4


def test_an_attempt_beyond_max_attempts_fails_the_session(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest", recovery={"maxAttempts": 1})
    home = tmp_path / "home"
    reached, _ = run_until(home, ["run", "--quiet", str(manifest)], "tool_request:researcher.reproduce.1")
    assert reached
    result = run_belay(home, "resume", "--quiet", SESSION)
    assert result.returncode != 0 and "maxAttempts" in result.stderr
    assert failures(home) == ["MaxAttempts"]


def test_a_session_that_exhausted_its_attempts_says_why_and_a_resume_by_hand_goes_on(tmp_path: Path) -> None:
    """The bound stops attempts nobody decided on; the person who reads why and resumes by hand
    gives the session a fresh budget, and it goes on from its record to Succeeded."""
    manifest = manifest_copy(tmp_path / "manifest", recovery={"maxAttempts": 1})
    home = tmp_path / "home"
    reached, _ = run_until(home, ["run", "--quiet", str(manifest)], "tool_request:researcher.reproduce.1")
    assert reached
    assert run_belay(home, "resume", "--quiet", SESSION).returncode != 0
    page = run_belay(home, "brief", SESSION).stdout
    assert f"Session {SESSION}: Failed" in page
    # The page says why, and what goes on: before, it said Failed and nothing more.
    assert "session failed MaxAttempts: attempt 2 is beyond recovery.maxAttempts (1)" in page, page
    way_out = "(a resume by hand gives it recovery.maxAttempts more attempts)"
    assert f"run: belay resume {SESSION}  {way_out}" in page
    again = run_belay(home, "resume", "--quiet", SESSION)
    assert again.returncode == 0, again.stderr
    assert run_belay(home, "brief", SESSION).stdout.startswith(f"Session {SESSION}: Succeeded")
    assert failures(home) == ["MaxAttempts"]
