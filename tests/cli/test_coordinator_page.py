"""What a coordinator's page and its objective say of the children, read as a person reads them
after `belay run examples/release-notes/session.yaml`: the objective's summary counts what its rows
show, and an amend of a child's part says that the deliverable collected from that child is to be
made again, never that it is still reusable (the amend's output and the page alike)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.belay_cli import run_belay

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASE_NOTES = REPO_ROOT / "examples/release-notes/session.yaml"


def run_release_notes(home: Path) -> None:
    ran = run_belay(home, "run", str(RELEASE_NOTES), "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr


def verdict_lines(text: str) -> tuple[list[str], list[str]]:
    """The lines under "made invalid" and under "still reusable" of the (last) change's verdict,
    stripped of their indent."""
    lines = [line.strip() for line in text.splitlines()]
    start = max(i for i, line in enumerate(lines) if line.startswith("made invalid"))
    middle = next(i for i in range(start, len(lines)) if lines[i].startswith("still reusable"))
    indent = len(text.splitlines()[middle]) - len(lines[middle])
    end = middle + 1
    raw = text.splitlines()
    while end < len(raw) and len(raw[end]) - len(raw[end].lstrip()) > indent:
        end += 1
    return lines[start + 1 : middle], lines[middle + 1 : end]


def test_the_objectives_summary_counts_the_reviews_its_rows_show(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_release_notes(home)
    shown = run_belay(home, "objective", "release-notes")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = lines[1].split()
    assert header[5:7] == ["WAITS", "ON"], lines[1]
    on_review = [line.split()[0] for line in lines[2:5] if "review " in line[lines[1].index("WAITS ON") :]]
    # Only the coordinator offers something for review: each child's deliverable is reviewed there.
    assert on_review == ["release-notes"], shown.stdout
    summary = re.search(r"(\d+) ready for review", lines[0])
    assert summary is not None and int(summary.group(1)) == len(on_review), lines[0]

    view = json.loads(run_belay(home, "objective", "release-notes", "--json").stdout)
    reviewing = {w["session"] for w in view["waits_on"] if w["kind"] == "review"}
    assert view["summary"]["ready_for_review"] == len(reviewing) == 1, view["summary"]


def test_an_amend_of_a_part_says_the_childs_collected_deliverable_is_made_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_release_notes(home)
    amended = run_belay(
        home, "amend", "release-notes", "--part", "parser=the parser fix, with the versions it reaches"
    )
    assert amended.returncode == 0, amended.stdout + amended.stderr
    assert "child sessions reopened: notes-parser (part parser)" in amended.stdout
    page = run_belay(home, "brief", "release-notes")
    assert page.returncode == 0, page.stderr
    for text in (amended.stdout, page.stdout):
        invalid, reusable = verdict_lines(text)
        assert not any(line.startswith("notes-parser/parser.md") for line in reusable), text
        assert reusable == ["notes-docs/docs.md (deliverable)"], text
        [redone] = [line for line in invalid if line.startswith("notes-parser/parser.md")]
        assert "child session notes-parser depends on parser, changed in v2" in redone
        assert "makes this deliverable again" in redone
        # The heading counts the lines under it.
        counted = re.search(r"made invalid \((\d+) steps and outputs", text)
        assert counted is not None and int(counted.group(1)) == len(invalid), text
    # The amend prints the page's own rows for the change.
    assert verdict_lines(amended.stdout) == verdict_lines(page.stdout)
