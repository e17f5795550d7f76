"""`belay drill --change`: the request changes (an amend while a step runs, an amend after the end,
a rejection after the end), and the resumed session must redo what the change made invalid, reuse
the rest, and deliver what an uninterrupted run of the final request delivers, on every executor;
a plan that delivers other bytes when a step is redone fails the drill, named in its verdict."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.belay_cli import failed_checks, run_belay
from tests.harness.example import MANIFEST, ROOT

pytestmark = pytest.mark.slow

REVIEW = ROOT / "examples" / "parser-review"
SCENARIOS = ("amend while a step runs", "amend after the end", "reject a deliverable after the end")
CHECKS = (
    "the steps the change made invalid were redone",
    "the steps the change left valid were reused, not repeated",
    "the deliverables are those of an uninterrupted run of the final request",
    "no unsafe call repeated",
    "the page says Succeeded and the record proves it",
    "the resumed session completes",
)


def drill(home: Path, manifest: Path, *options: str) -> tuple[dict[str, Any], int]:
    result = run_belay(home, "drill", str(manifest), "--change", "--json", *options, timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout), result.returncode


def detail(report: dict[str, Any], name: str) -> str:
    [check] = [c for c in report["checks"] if c["name"] == name]
    return str(check["detail"])


@pytest.mark.parametrize(
    ("executor", "manifest", "options"),
    [
        # The patch's publication needs an approval bound to its bytes: the redone call sends the
        # bytes the manifest approved, which the drill approves as the person would.
        ("self-hosted", MANIFEST, ("--answer-waits",)),
        ("openai-agents", REVIEW / "session.yaml", ()),
        ("anthropic-managed", REVIEW / "session.yaml", ()),
    ],
)
def test_the_change_drill_passes_on_the_examples_on_every_executor(
    tmp_path: Path, executor: str, manifest: Path, options: tuple[str, ...]
) -> None:
    report, returncode = drill(tmp_path / "home", manifest, "--executor", executor, *options)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and returncode == 0 and report["differing"] == []
    assert report["executor"].startswith(executor)
    assert [p["scenario"] for p in report["points"]] == list(SCENARIOS)
    names = [c["name"] for c in report["checks"]]
    for scenario in SCENARIOS:
        assert all(f"{scenario}: {check}" in names for check in CHECKS), names
    # While a step runs: killed at a call of a step the goal reaches, and some work reused.
    [killed] = [c for c in report["checks"] if c["name"].startswith(f"{SCENARIOS[0]}: SIGKILL while ")]
    assert killed["detail"].startswith("killed at tool_request:"), killed
    kept = detail(report, f"{SCENARIOS[0]}: the steps the change left valid were reused, not repeated")
    assert (kept.startswith("reused: ") and kept != "reused: none") or executor != "self-hosted", kept
    # A rejection redoes the step that published the deliverable and reuses every other one.
    redone = detail(report, f"{SCENARIOS[2]}: the steps the change made invalid were redone")
    reused = detail(report, f"{SCENARIOS[2]}: the steps the change left valid were reused, not repeated")
    assert re.fullmatch(r"redone: [\w-]+/report", redone), redone
    assert reused.startswith("reused: ") and len(reused.split(", ")) >= 2, reused
    if executor == "self-hosted":
        assert report["answered"] and all(
            re.search(r"approve parser-fix approve-implementer\.publish@\d+\.\d+ -m ", line)
            for line in report["answered"]
        ), report["answered"]


def review_not_reproducible(directory: Path) -> Path:
    """The parser-review example whose review is written with the time of its writing: a redone
    report step delivers other bytes than a run of the final request from the start."""
    shutil.copytree(REVIEW, directory)
    plan_file = directory / "plan.yaml"
    plan = yaml.safe_load(plan_file.read_text())
    [report] = [s for s in plan["subagents"]["repository-reviewer"]["steps"] if s["id"] == "report"]
    report["actions"] = [
        {"tool": "run_command", "arguments": {"command": "mkdir -p out && date +%s%N > out/review.md"}},
        {"tool": "publish_deliverable", "arguments": {"path": "out/review.md", "name": "review.md"}},
    ]
    plan_file.write_text(yaml.safe_dump(plan, sort_keys=False))
    manifest = directory / "session.yaml"
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["subagents"][0]["inputs"][0]["source"] = str(ROOT / "examples" / "parser-fix" / "repo")
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def test_a_change_that_delivers_other_bytes_fails_the_drill_naming_the_session_and_deliverable(
    tmp_path: Path,
) -> None:
    manifest = review_not_reproducible(tmp_path / "parser-review")
    home = tmp_path / "home"
    result = run_belay(home, "drill", str(manifest), "--change", "--executor", "self-hosted", timeout=900)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("drill failed: "), verdict
    differs = r"parser-review: review\.md differs \(sha256 [0-9a-f]{12}, reference [0-9a-f]{12}\)"
    # The amended session's review is not the one a run of the final request delivers.
    for scenario in SCENARIOS[:2]:
        assert re.search(rf"differing: .*{scenario}: {differs}", verdict), verdict
        assert re.search(
            rf"FAIL {scenario}: the deliverables are those of an uninterrupted run of the final request: "
            rf"{differs}",
            result.stdout,
        ), result.stdout
    # The rejected review must be new bytes, published after the rejection: it is.
    assert f"FAIL {SCENARIOS[2]}" not in result.stdout
    # Every other check of the amends holds: only the deliverable is named.
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(failed) == 2 and all("the deliverables are those of" in line for line in failed), failed


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (("--reject", "report.md"), "--change-goal, --change-part and --reject go with --change"),
        (("--change", "--compare"), "--change runs on one executor: drop --compare and --handover-to"),
        (("--change", "--change-part", "no-equals"), "--change-part must be KEY=VALUE, got 'no-equals'"),
    ],
)
def test_change_options_are_refused_in_one_line(tmp_path: Path, options: tuple[str, ...], error: str) -> None:
    result = run_belay(tmp_path / "home", "drill", str(MANIFEST), *options, timeout=120)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"error: {error}"], result.stderr


def test_the_change_drill_of_a_coordinator_checks_every_session_of_the_objective(tmp_path: Path) -> None:
    """On a coordinator the steps are its children's: the amend while a step runs comes while a
    child works, and a rejected collected deliverable is redone by its child and collected anew."""
    report, returncode = drill(tmp_path / "home", ROOT / "examples" / "release-notes" / "session.yaml")
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed_checks(failed)
    assert report["passed"] is True and returncode == 0 and report["skipped"] == []
    assert [p["scenario"] for p in report["points"]] == list(SCENARIOS)
    [killed] = [c for c in report["checks"] if c["name"].startswith(f"{SCENARIOS[0]}: SIGKILL while notes-")]
    assert "'s record held tool_request:writer.write." in killed["detail"], killed
    # The goal amended after the end: the coordinator's steps redone, its children's reused.
    kept = detail(report, f"{SCENARIOS[1]}: the steps the change left valid were reused, not repeated")
    assert kept == "reused: notes-parser: writer/write, notes-docs: writer/write", kept
    # The collected parser note rejected: its child redoes its step, the coordinator collects again.
    redone = detail(report, f"{SCENARIOS[2]}: the steps the change made invalid were redone")
    assert "release-notes: writer/collect" in redone and "notes-parser: writer/write" in redone, redone
    pages = detail(report, f"{SCENARIOS[2]}: the page says Succeeded and the record proves it")
    assert pages == "release-notes, notes-parser, notes-docs: Succeeded, proven by the record", pages


def test_answering_waits_never_approves_bytes_nobody_approved(tmp_path: Path) -> None:
    """Rejected, the patch is made another way: its new bytes wait on the person's approval, which
    the drill does not give, even with --answer-waits; it stops, naming the approval and its
    command. The amends send the approved bytes again, which it approves."""
    home = tmp_path / "home"
    report, returncode = drill(home, MANIFEST, "--answer-waits", "--reject", "fix.patch")
    assert returncode == 1 and report["passed"] is False
    failed = [c for c in report["checks"] if not c["passed"]]
    assert failed and all(c["name"].startswith(f"{SCENARIOS[2]}: ") for c in failed), failed
    stopped = detail(report, f"{SCENARIOS[2]}: the resumed session completes")
    assert re.search(
        r"waited on the person: approval (approve-implementer\.publish@2\.\d+): .*"
        rf"`belay --home {home}/drill/\S+/reject-after-the-end approve parser-fix \1`",
        stopped,
    ), stopped
    homes = {line.split(":", 1)[0] for line in report["answered"]}
    assert "amend-after-the-end" in homes and "reject-after-the-end" not in homes, report["answered"]
