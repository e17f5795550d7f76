"""Every download a page prints writes a file of its own: two children that owe a deliverable of
the same name (`notes.md`) are collected by their coordinator as `<child>/notes.md`, and the two
commands its page prints, run as printed from one directory, leave both notes there, each with
its child's bytes; neither overwrites the other. The real command line."""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

from tests.belay_cli import run_belay
from tests.cli.test_children import REPO_ROOT, reviews, run_as_printed

COORDINATOR = "release-notes"


def same_named_deliverables(directory: Path) -> Path:
    """examples/release-notes with both children owing `notes.md`."""
    shutil.copytree(REPO_ROOT / "examples/release-notes", directory)
    for plan in directory.glob("*.yaml"):
        plan.write_text(plan.read_text().replace("parser.md", "notes.md").replace("docs.md", "notes.md"))
    return directory / "session.yaml"


def test_two_collected_deliverables_of_one_name_are_fetched_to_two_files(tmp_path: Path) -> None:
    manifest = same_named_deliverables(tmp_path / "example")
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(manifest))
    assert ran.returncode == 0, ran.stderr[-2000:]

    ready = reviews(home, COORDINATOR)
    assert sorted(ready) == ["notes-docs/notes.md", "notes-parser/notes.md"]
    written = tmp_path / "fetched"
    written.mkdir()
    targets = []
    for review in ready.values():
        fetched = run_as_printed(home, review["command"], cwd=written)
        assert fetched.returncode == 0, fetched.stderr
        words = shlex.split(review["command"])
        targets.append(written / words[words.index("-o") + 1])
    assert len(set(targets)) == 2, targets
    for review, target in zip(ready.values(), targets, strict=True):
        assert hashlib.sha256(target.read_bytes()).hexdigest() == review["sha256"], target
