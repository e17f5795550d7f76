"""What a managed provider keeps of its own turn (the stand-ins publish the remote agent's final
message as `<subagent>-remote-notes.md`) is copied into the record as the remote agent's notes: the
person is offered the deliverable a step published, never the provider's notes, in the briefing,
`belay artifacts` and `belay sessions`. The real command line, on both managed executors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from belay.executors.endpoints import PROVIDERS
from tests.belay_cli import run_belay, stop_session_standins
from tests.executors.example import SESSION, SUBAGENT, example_manifest

pytestmark = pytest.mark.slow

NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
NOTES = f"{SUBAGENT}-remote-notes.md"


@pytest.mark.parametrize("executor", ["openai-agents", "anthropic-managed"])
def test_the_remote_agents_notes_are_not_offered_as_a_deliverable(tmp_path: Path, executor: str) -> None:
    manifest = example_manifest(tmp_path / "manifest", executor)
    home = tmp_path / "home"
    try:
        ran = run_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
        assert ran.returncode == 0, ran.stderr[-2000:]

        listed = json.loads(run_belay(home, "artifacts", SESSION, "--json").stdout)
        [notes] = [row for row in listed if row["name"] == NOTES]  # kept, with its bytes
        assert not notes["deliverable"] and not notes["ready_for_review"]
        [review] = [row for row in listed if row["name"] == "review.md"]
        assert review["deliverable"]

        shown = json.loads(run_belay(home, "brief", "--json", SESSION).stdout)
        assert shown["phase"] == "Succeeded"
        assert NOTES not in json.dumps(shown["ready_for_review"])
        page = run_belay(home, "brief", SESSION).stdout
        assert f"get {SESSION} {NOTES}" not in page, page
    finally:
        stop_session_standins(home)
