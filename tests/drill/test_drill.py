"""`belay drill --json`: every check passes on the example; a failing check makes the exit non-zero."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.belay_cli import RUN_TIMEOUT_S, failed_checks, run_belay
from tests.harness.example import EXAMPLE, MANIFEST, manifest_copy

pytestmark = pytest.mark.slow

SCENARIOS = (
    "kill after a tool request",
    "kill between a tool result and its delivery",
    "kill after an unsafe request",
    "kill after a verified checkpoint, nothing declared",
)
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
    assert set(report) == {
        "passed",
        "checks",
        "skipped",
        "executor",
        "handover_to",
        "points",
        "reference_run_s",
        "reference_events",
        "pages",
        "answered",
        "differing",
    }
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and result.returncode == 0
    assert report["handover_to"] is None and report["executor"].startswith("self-hosted")
    assert report["answered"] == []  # the example waits on nobody the manifest does not answer
    assert report["differing"] == []
    names = [c["name"] for c in report["checks"]]
    assert all(name in names for name in EXPECTED_CHECKS)
    assert all(set(c) == {"name", "passed", "detail"} for c in report["checks"])
    check_pages(report["pages"], tmp_path / "home")
    # A self-hosted executor hands no result to a provider: that scenario is named, not run.
    assert report["skipped"] == [
        {
            "scenario": "kill between a tool result and its delivery",
            "reason": "not a boundary of the self-hosted executor",
        }
    ]


def check_pages(pages: list[dict[str, Any]], home: Path) -> None:
    """The briefing before each resume and after it, compact: the unsafe call in flight is not
    repeated and waits on the person, with the command that answers it; nothing done is redone."""
    by_scenario = {p["scenario"]: p for p in pages}
    assert set(by_scenario) == {"kill after a tool request", "kill after an unsafe request"}
    unsafe = by_scenario["kill after an unsafe request"]
    before, after = unsafe["before"], unsafe["after"]
    assert (before["phase"], after["phase"]) == ("Interrupted", "WaitingOnUser")
    [flying] = [f for f in before["in_flight"] if "create_ticket" in f]
    operation = flying.split(" ", 1)[0]
    assert "never repeated" in flying
    assert f"{operation}: not repeated; its outcome is unknown and asked of you" in after["in_flight"]
    [waiting] = after["waiting_on_you"]
    assert re.fullmatch(
        rf"reconciliation {re.escape(operation)}: belay --home {home}/drill/\S+/unknown-outcome reconcile "
        rf"parser-fix {re.escape(operation)} --succeeded  \(or: belay --home \S+ reconcile parser-fix "
        rf"{re.escape(operation)} --failed\)",
        waiting,
    ), waiting
    assert before["done"] and set(before["done"]) <= set(after["kept"]) and after["redone"] == []
    request = by_scenario["kill after a tool request"]
    assert (request["before"]["phase"], request["after"]["phase"]) == ("Interrupted", "Succeeded")
    assert request["before"]["in_flight"] and all(
        re.search(r": ran again once, ok \(seq \d+\)$", line) for line in request["after"]["in_flight"]
    ), request["after"]["in_flight"]
    assert request["after"]["waiting_on_you"] == [] and request["after"]["redone"] == []


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


def test_a_reference_run_that_waits_on_a_person_fails_its_check_with_the_command_that_answers_it(
    tmp_path: Path,
) -> None:
    """The manifest's approval names another payload: the uninterrupted run asks for an approval
    nobody gives. The drill stops it, says so, and ends with its report (no traceback)."""
    approval = {"operationId": "implementer.publish.3", "payloadSha256": "0" * 64}
    manifest = manifest_copy(tmp_path / "manifest", approvals=[approval])
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
    assert "waited on the person: approval approve-implementer.publish.3" in detail
    assert re.search(
        rf"`belay --home {home}/drill/\S+/reference approve parser-fix approve-implementer.publish.3`", detail
    )
    assert elapsed < RUN_TIMEOUT_S  # stopped once it waited, not at the run's limit
    assert [s["scenario"] for s in report["skipped"]] == list(SCENARIOS)
    assert all(s["reason"] for s in report["skipped"])


def test_a_scenario_that_does_not_apply_is_skipped_and_the_counts_match_the_checks(tmp_path: Path) -> None:
    """Without an unsafe operation there is nothing to interrupt there: that scenario is named as
    skipped, the drill passes, and the summary counts the checks it printed."""
    plan = yaml.safe_load((EXAMPLE / "plan.yaml").read_text())
    for step in plan["subagents"]["researcher"]["steps"]:
        step["actions"] = [a for a in step["actions"] if a["tool"] != "create_ticket"]
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    manifest = manifest_copy(tmp_path / "manifest")
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["executor"]["plan"] = str(plan_file)
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_belay(tmp_path / "home", "drill", str(manifest), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert (
        "SKIP kill after an unsafe request: the session makes no unsafe external operation to interrupt"
        in lines
    )
    assert not [line for line in lines if line.startswith("FAIL")]
    passed = [line for line in lines if line.startswith("PASS")]
    summary = " ".join(result.stdout.split())
    assert f"drill passed: {len(passed)} of {len(passed)} checks passed; 2 skipped (" in summary
    # It ends with the briefing before the resume and after it, side by side, then the verdict.
    pages = result.stdout.split("drill passed:", 1)[0]
    assert "kill after a tool request: the briefing before the resume and after it" in pages
    [phase] = [line for line in pages.splitlines() if line.strip().startswith("phase")]
    assert phase.split()[1:] == ["Interrupted", "|", "Succeeded"]
    assert "none done twice" in " ".join(pages.split())
    assert not any("unsafe external operation" in line for line in passed)
