"""`belay drill examples/parser-review/session.yaml --executor E --json` passes every check on each
executor, and reports each kill point: the record's seq range, the deliverables' hashes, the model,
harness and executor versions, and the transition expected and observed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.belay_cli import failed_checks, run_belay
from tests.executors.example import MANIFEST, review_sha256

pytestmark = pytest.mark.slow

MANAGED_CHECKS = (
    "the provider saw each input and each tool result once (uninterrupted)",
    "SIGKILL between a tool's recorded result and its delivery to the provider",
    "the resumed session delivers the result and completes with the same deliverables",
    "the tool did not run again",
    "the provider saw each input and each tool result once",
    "the remote session id is the same before and after",
)
SCENARIOS = {
    "kill after a tool request",
    "kill after an unsafe request",
    "kill after a verified checkpoint, nothing declared",
}


@pytest.mark.parametrize("executor", ["self-hosted", "openai-agents", "anthropic-managed"])
def test_the_drill_passes_on_every_executor(executor: str, tmp_path: Path) -> None:
    result = run_belay(
        tmp_path / "home", "drill", str(MANIFEST), "--executor", executor, "--json", timeout=900
    )
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and result.returncode == 0
    assert report["executor"].startswith(executor)
    names = {c["name"] for c in report["checks"]}
    managed = executor != "self-hosted"
    assert all(name in names for name in MANAGED_CHECKS) == managed
    scenarios = {p["scenario"] for p in report["points"]}
    assert scenarios == SCENARIOS | ({"kill between a tool result and its delivery"} if managed else set())
    for point in report["points"]:
        assert point["passed"], point
        before, after = point["record_before"], point["record_after"]
        assert before["first"] == 1 and before["last"] == point["killed_at_seq"]
        assert after is not None and after["first"] == before["last"] + 1 <= after["last"]
        assert point["harness_versions"] and point["models"] and point["executor"] == report["executor"]
        assert point["expected"] and point["observed"]
        if point["scenario"] != "kill after a verified checkpoint, nothing declared":
            assert point["artifacts"]["review.md"] == review_sha256()
    # The briefing before the resume of the unsafe call and after it: not repeated, asked of you.
    [unsafe] = [p for p in report["pages"] if p["scenario"] == "kill after an unsafe request"]
    assert (unsafe["before"]["phase"], unsafe["after"]["phase"]) == ("Interrupted", "WaitingOnUser")
    assert any("not repeated; its outcome is unknown" in line for line in unsafe["after"]["in_flight"])
    [waiting] = unsafe["after"]["waiting_on_you"]
    assert " reconcile parser-review repository-reviewer.review.3 --succeeded" in waiting
    assert unsafe["after"]["redone"] == [] and set(unsafe["before"]["done"]) <= set(unsafe["after"]["kept"])
