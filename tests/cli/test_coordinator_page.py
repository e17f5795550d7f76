"""What a coordinator's page and its objective say of the children, read as a person reads them:
after `belay run examples/release-notes/session.yaml`, the objective's summary counts what its rows
show, and an amend of a child's part says that the deliverable collected from that child is to be
made again, never that it is still reusable (the amend's output and the page alike); with a child
killed, the coordinator's page says what the child's own record says (interrupted, and the command
that resumes it), and it lists each child's hypotheses and decisions under the child's name."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from belay.local.liveness import holder_process
from tests.belay_cli import run_belay, start_belay
from tests.cli.test_children import lease_holder, objective, rows, step_done, write_objective
from tests.testenv.polling import wait_until

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


def noting_plan(name: str, latency_s: float) -> dict[str, Any]:
    """A child that records a hypothesis and a decision, then writes its note through a model call
    of `latency_s` seconds (where a test kills it)."""
    notes = [
        {
            "tool": "record_note",
            "arguments": {
                "note_id": f"{name}-cause",
                "kind": "hypothesis",
                "status": "open",
                "text": f"{name}: the split is the cause",
            },
        },
        {
            "tool": "record_note",
            "arguments": {
                "note_id": f"{name}-fix",
                "kind": "decision",
                "status": "accepted",
                "text": f"{name}: split on the first '=' only",
            },
        },
    ]
    write = [
        {
            "tool": "write_file",
            "latency_s": latency_s,
            "arguments": {"path": f"out/{name}.md", "content": f"{name}\n"},
        },
        {"tool": "publish_deliverable", "arguments": {"path": f"out/{name}.md", "name": f"{name}.md"}},
    ]
    steps = [
        {"id": "think", "title": f"Think about {name}", "actions": notes},
        {"id": "write", "title": f"Write {name}", "actions": write},
    ]
    return {"subagents": {"writer": {"steps": steps}}}


def section(text: str, title: str) -> list[str]:
    """The lines of one section of a page, stripped."""
    lines = text.splitlines()
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return [line.strip() for line in lines[start + 1 : end]]


def test_the_coordinators_page_says_what_a_killed_childs_record_says_and_rolls_up_their_notes(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    plans = {"quick": noting_plan("quick", 0.0), "slow": noting_plan("slow", 60.0)}
    manifest = write_objective(tmp_path / "duo", "duo", "Two parts, one child session each.", plans)
    coordinator = start_belay(home, "run", str(manifest))
    try:
        wait_until(
            lambda: step_done(home, "slow", "writer/think") and step_done(home, "quick", "writer/write"),
            "the slow child's notes and the quick child's deliverable",
            timeout=90,
            while_running=coordinator,
        )
        holder = lease_holder(home, "slow")
        process = holder_process(holder or "")
        assert process is not None, holder
        subprocess.run(["kill", "-9", str(process[0])], check=True)
        wait_until(
            lambda: rows(objective(home, "duo"))["slow"]["bucket"] == "interrupted",
            "the killed child shown interrupted",
            timeout=30,
        )
        page = run_belay(home, "brief", "duo")
        assert page.returncode == 0, page.stderr
        text = page.stdout
        shown = json.loads(run_belay(home, "brief", "duo", "--json").stdout)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()

    # The wait on the killed child says what the child's record says, with the command that
    # resumes it; never that it runs.
    [waiting] = [line for line in section(text, "Waiting on external conditions") if "[session:slow]" in line]
    assert " runs" not in waiting and "child session slow (slow): Interrupted since " in waiting, text
    assert section(text, "Waiting on external conditions")[1].endswith("run: belay resume slow"), text
    children = section(text, "Child sessions")
    assert children[0] == "quick (part quick): Succeeded", text
    assert children[1].startswith("slow (part slow): Interrupted since "), text
    assert children[2] == "run: belay resume slow", text

    # Each child's hypotheses and decisions, attributed to it, each under its own heading.
    assert section(text, "Hypotheses (not yet accepted)") == [
        "child session quick: quick-cause [open]: quick: the split is the cause",
        "child session slow: slow-cause [open]: slow: the split is the cause",
    ], text
    assert section(text, "Decisions") == [
        "child session quick: quick-fix [accepted]: quick: split on the first '=' only",
        "child session slow: slow-fix [accepted]: slow: split on the first '=' only",
    ], text
    by_child = {c["session"]: c for c in shown["children"]}
    assert by_child["slow"]["phase"] == "Interrupted" and by_child["slow"]["command"] == "belay resume slow"
    assert [n["note_id"] for n in by_child["slow"]["hypotheses"]] == ["slow-cause"]

    # Once the coordinator is stopped too, its own resume resumes the child: one command.
    after = run_belay(home, "brief", "duo").stdout
    assert after.count("run: belay resume slow") == 0, after
    assert "`belay resume duo` resumes it" in "\n".join(section(after, "Child sessions")), after
