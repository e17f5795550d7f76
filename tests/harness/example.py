"""The parser-fix example, run through the real `belay` CLI in a fresh home, shared by the tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml

from belay.journal.events import Event
from tests.belay_cli import read_events, run_belay
from tests.testenv.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "parser-fix"
MANIFEST = EXAMPLE / "session.yaml"
REPO = EXAMPLE / "repo"
SESSION = "parser-fix"


def run_example(home: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], list[Event]]:
    result = run_belay(home, "run", *extra, str(MANIFEST))
    return result, read_events(home, SESSION)


def manifest_copy(directory: Path, **spec_changes: object) -> Path:
    """The example manifest with some spec fields replaced, plan and inputs still resolving."""
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["spec"].update(spec_changes)
    manifest["spec"]["executor"]["plan"] = str(EXAMPLE / "plan.yaml")
    for sub in manifest["spec"]["subagents"]:
        for item in sub.get("inputs", []):
            item["source"], item["hostPath"] = str(EXAMPLE / item["source"]), True
    path = directory / "session.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def repo_tests_pass(patch: Path | None, workdir: Path) -> bool:
    """Copy the example repository, apply the patch (if any) and run its tests."""
    copy = workdir / "repo"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        subprocess.run(["patch", "-p1", "-i", str(patch)], cwd=copy, check=True, capture_output=True)
    tests = subprocess.run([sys.executable, "-B", "-m", "unittest"], cwd=copy, capture_output=True, text=True)
    return tests.returncode == 0


def wait_for(
    home: Path, found: Callable[[list[Event]], bool], what: str, timeout: float = 180
) -> list[Event]:
    """The record, once `found` holds for it (a harness runs meanwhile in another process)."""
    return wait_until(
        lambda: read_events(home, SESSION),
        f"{what} in the record",
        until=found,
        timeout=timeout,
        interval=0.1,
    )


def brief_json(home: Path) -> dict[str, Any]:
    result = run_belay(home, "brief", SESSION, "--json")
    assert result.returncode == 0, result.stderr
    return cast("dict[str, Any]", json.loads(result.stdout))


def step_status(brief: dict[str, Any], step: str) -> str:
    return next(str(s["status"]) for s in brief["steps"] if s["task_id"] == step)
