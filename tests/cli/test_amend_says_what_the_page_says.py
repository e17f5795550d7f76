"""`belay amend` says what the page says: what the change made invalid and what stays reusable
are the page's own rows for that change, one computation; and an amend of a coordinator says which
of its children it reopened, or plainly that none depends on what changed. Through the real
command line, on the scripted examples run to their end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.belay_cli import run_belay

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HANG_S = 300.0  # a guard against a hang, never a timing


def run_example(tmp_path: Path, name: str) -> Path:
    shutil.copytree(EXAMPLES / name, tmp_path / name)
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(tmp_path / name / "session.yaml"), timeout=HANG_S)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return home


def verdict_block(lines: list[str], indent: int) -> list[str]:
    """From "made invalid" to the last line listed under "still reusable", without the indent
    the page gives them."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("made invalid"))
    reusable = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("still reusable"))
    end = reusable + 1
    while end < len(lines) and lines[end].startswith(" " * (indent + 2)):
        end += 1
    return [line[indent:] for line in lines[start:end]]


def test_the_amend_output_lists_what_the_page_lists(tmp_path: Path) -> None:
    home = run_example(tmp_path, "parser-fix")
    amended = run_belay(home, "amend", "parser-fix", "--part", "deliverables=a patch and a changelog entry")
    assert amended.returncode == 0, amended.stderr
    page = run_belay(home, "brief", "parser-fix").stdout.splitlines()
    changes = page[page.index("Scope changes") :]
    on_the_page = verdict_block(changes, indent=4)
    said = verdict_block(amended.stdout.splitlines(), indent=0)
    assert said == on_the_page, "\n".join(["amend said:", *said, "the page says:", *on_the_page])
    assert len([line for line in on_the_page if line.startswith("  ")]) > 1  # something is listed


def test_an_amend_of_a_coordinator_names_the_children_it_reopens_or_says_none_depends_on_it(
    tmp_path: Path,
) -> None:
    home = run_example(tmp_path, "release-notes")
    goal = run_belay(home, "amend", "release-notes", "--goal", "Write the release notes for 1.5.")
    assert goal.returncode == 0, goal.stderr
    assert "no child session depends on what changed (goal)" in goal.stdout, goal.stdout
    assert "notes-docs (part docs), notes-parser (part parser)" in goal.stdout

    part = run_belay(home, "amend", "release-notes", "--part", "parser=the parser fix, with its test")
    assert part.returncode == 0, part.stderr
    reopened = "child sessions reopened: notes-parser (part parser)"
    assert f"{reopened}; the other children stand: notes-docs (part docs)" in part.stdout, part.stdout
