"""`belay drill --json`: every check passes on the example; a failing check makes the exit non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.belay_cli import run_belay
from tests.harness.example import MANIFEST, manifest_copy

pytestmark = pytest.mark.slow

EXPECTED_CHECKS = (
    "uninterrupted run completes",
    "SIGKILL right after a tool request; the request is in the record outside the sandbox",
    "every sandbox replaced with a clean one",
    "declared artifacts restored from the last verified checkpoint and verification re-run",
    "no completed step ran twice",
    "the resumed session completes with the same deliverables",
    "an unknown external outcome is shown for reconciliation, not repeated",
    "after the user reconciles it, the session completes with exactly one ticket",
    "a recovery that needs an undeclared file fails visibly (RecoveryFailed UndeclaredState)",
)


def test_drill_json_passes_every_check(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "drill", str(MANIFEST), "--json", timeout=600)
    report = json.loads(result.stdout)
    assert set(report) == {"passed", "checks", "executor", "points", "reference_run_s", "reference_events"}
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed
    assert report["passed"] is True and result.returncode == 0
    names = [c["name"] for c in report["checks"]]
    assert all(name in names for name in EXPECTED_CHECKS)
    assert all(set(c) == {"name", "passed", "detail"} for c in report["checks"])


def test_a_failing_check_fails_the_drill(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest")
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["subagents"][0]["deliverable"] = "never-published.md"  # the run cannot complete
    manifest.write_text(yaml.safe_dump(data))
    result = run_belay(tmp_path / "home", "drill", str(manifest), "--json", timeout=600)
    report = json.loads(result.stdout)
    assert result.returncode != 0 and report["passed"] is False
    assert report["checks"][0] == {
        "name": "uninterrupted run completes",
        "passed": False,
        "detail": report["checks"][0]["detail"],
    }
    assert "never-published.md" in report["checks"][0]["detail"]
