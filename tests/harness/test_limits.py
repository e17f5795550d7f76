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
