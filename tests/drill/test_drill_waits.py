"""`belay drill` on a session whose plan waits on an external condition (and asks a question):
without `--answer-waits` the drill stops at once, naming the wait and the command that answers
it; with it, the drill answers as a person would and goes on to every scenario."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from shlex import quote

import pytest
import yaml

from belay.journal.events import WaitKind
from belay.journal.state import fold
from belay.local.drill.waiting import NEUTRAL_ANSWER
from tests.belay_cli import RUN_TIMEOUT_S, failed_checks, read_events, run_belay
from tests.harness.example import EXAMPLE, SESSION, manifest_copy

pytestmark = pytest.mark.slow

EXTERNAL_WAIT: dict[str, object] = {
    "tool": "wait_on_external",
    "text": "Wait until CI is green on the base branch.",
    "arguments": {"reason": "CI must be green on main", "condition": "ci-green"},
}
QUESTION: dict[str, object] = {
    "tool": "wait_on_user",
    "text": "Ask which changelog style to use.",
    "arguments": {"reason": "Which changelog style do you want?"},
}


def manifest_with_waits(directory: Path, *actions: dict[str, object]) -> Path:
    """The example with `actions` first in the researcher's first step, written by the test."""
    plan = yaml.safe_load((EXAMPLE / "plan.yaml").read_text())
    first = plan["subagents"]["researcher"]["steps"][0]
    first["actions"] = [*actions, *first["actions"]]
    directory.mkdir(parents=True, exist_ok=True)
    plan_file = directory / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    manifest = manifest_copy(directory / "manifest")
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["executor"]["plan"] = str(plan_file)
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def test_an_external_wait_stops_the_drill_at_once_naming_the_wait_and_its_command(tmp_path: Path) -> None:
    manifest = manifest_with_waits(tmp_path, EXTERNAL_WAIT)
    home = tmp_path / "home"
    started = time.monotonic()
    result = run_belay(home, "drill", str(manifest), "--json", timeout=600)
    elapsed = time.monotonic() - started
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["passed"] is False
    [check] = report["checks"]
    assert check["name"] == "uninterrupted run completes" and not check["passed"]
    detail = check["detail"]
    wait = re.search(
        r"waited on an external condition: external wait (wait-researcher\.reproduce\.\d+): ", detail
    )
    assert wait is not None, detail
    assert "CI must be green on main (condition ci-green)" in detail
    assert re.search(
        rf"`belay --home {home}/drill/\S+/reference approve parser-fix {re.escape(wait.group(1))}`", detail
    ), detail
    assert "--answer-waits" in detail
    assert elapsed < RUN_TIMEOUT_S  # stopped once it waited, not at the run's limit
    assert report["answered"] == []


def test_with_answer_waits_the_drill_answers_as_a_person_would_and_goes_on(tmp_path: Path) -> None:
    manifest = manifest_with_waits(tmp_path, EXTERNAL_WAIT, QUESTION)
    home = tmp_path / "home"
    result = run_belay(home, "drill", str(manifest), "--answer-waits", "--json", timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and result.returncode == 0
    assert [p["scenario"] for p in report["points"]] == [
        "kill after a tool request",
        "kill after an unsafe request",
        "kill after a verified checkpoint, nothing declared",
    ]
    # The uninterrupted run met the external condition and answered the question with a neutral
    # text, as a person would; the record holds both waits, resolved.
    reference = next((home / "drill").glob("*/reference"))
    state = fold(read_events(reference, SESSION))
    external = [w for w in state.waits.values() if w.kind == WaitKind.ON_EXTERNAL]
    question = [w for w in state.waits.values() if w.kind == WaitKind.ON_USER]
    assert len(external) == 1 and len(question) == 1 and external[0].resolved and question[0].resolved
    answered = [line for line in report["answered"] if line.startswith("reference: ")]
    belay = f"reference: `belay --home {reference}"
    assert answered == [
        f"{belay} approve {SESSION} {external[0].wait_id}`",
        f"{belay} answer {SESSION} {question[0].wait_id} {quote(NEUTRAL_ANSWER)}`",
    ]
