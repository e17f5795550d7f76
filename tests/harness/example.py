"""The parser-fix example, run through the real `belay` CLI in a fresh home, shared by the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from belay.journal.events import Event
from belay.local.drill import read_events, run_belay

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
            item["source"] = str(EXAMPLE / item["source"])
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
