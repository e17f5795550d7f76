"""A session whose attempts end the same way at the same point is stopped after the third: `belay
resume` refuses a fourth and says what a person can do instead."""

from __future__ import annotations

from pathlib import Path

import yaml

from belay.journal.state import fold
from belay.local.cli_process import read_events, run_belay

# A provider that does not answer: every attempt ends on the same connection error, at the start.
UNREACHABLE = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}


def test_a_repeating_failure_ends_in_repeated_failure_and_resume_refuses_a_fourth(tmp_path: Path) -> None:
    manifest = tmp_path / "session.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "belay.dev/v1alpha1",
                "kind": "AgentSession",
                "metadata": {"name": "loops"},
                "spec": {
                    "request": {"goal": "Anything."},
                    "executor": {"type": "openai", "model": "gpt-5"},
                    "subagents": [{"name": "solo"}],
                },
            }
        )
    )
    home = tmp_path / "home"
    first = run_belay(home, "run", "--quiet", str(manifest), environment=UNREACHABLE)
    assert first.returncode != 0, first.stdout + first.stderr
    for _ in range(2):
        again = run_belay(home, "resume", "--quiet", "loops", environment=UNREACHABLE)
        assert again.returncode != 0 and "RepeatedFailure" not in again.stderr, again.stderr
    before = read_events(home, "loops")
    refused = run_belay(home, "resume", "--quiet", "loops", environment=UNREACHABLE)
    assert refused.returncode == 1
    said = "RepeatedFailure: 3 attempts in a row ended the same way at step solo (attempts 1 to 3)"
    assert said in refused.stderr, refused.stderr
    assert "APIConnectionError" in refused.stderr and "belay amend loops" in refused.stderr
    assert read_events(home, "loops") == before  # nothing recorded, no fourth attempt
    repeated = fold(before).lifecycle.repeated_failure
    assert repeated is not None and repeated.count == 3
    brief = run_belay(home, "brief", "loops")
    assert "RepeatedFailure" in brief.stdout, brief.stdout
