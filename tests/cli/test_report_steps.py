"""The timeline report counts steps, never checkpoints: after `belay run
examples/release-notes/session.yaml` (every step done), the page `belay report` writes from the
record and the page `kubectl belay report` writes from what a cluster holds (the status the
operator projects from the same record, and a Checkpoint object per checkpoint event, mirrored as
the operator mirrors them) say the same number of steps done, of the steps `belay brief` lists.
A checkpoint is not a step: a subagent's inputs have one, a step has one per round."""

from __future__ import annotations

import asyncio
import html
import re
from datetime import UTC, datetime
from pathlib import Path

from belay.cli.cluster import _checkpoint
from belay.controller.checkpoints import checkpoint_object
from belay.controller.desired import SessionRef
from belay.controller.status import session_status_patch
from belay.journal.events import CheckpointEvent
from belay.local.record import open_session
from belay.local.runtime import LocalHome
from belay.views.report.from_status import status_report
from belay.views.report.html import render_html
from tests.belay_cli import read_events, run_belay

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASE_NOTES = REPO_ROOT / "examples/release-notes/session.yaml"
SESSIONS = ("release-notes", "notes-parser", "notes-docs")


def steps_done_column(page: str) -> dict[str, str]:
    """The table of sessions on top of a page of several: its "steps done" cell, by session."""
    table = page[page.index("<table>") : page.index("</table>")]
    cells = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]:
        texts = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        cells[texts[0]] = texts[5]
    return cells


def glance_done(page: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(r"<li class=\"[a-z]+\">(Done: [^<]*)</li>", page)]


def cluster_page(home: Path, now: datetime) -> str:
    """What `kubectl belay report` writes of the three sessions, from the status and Checkpoint
    objects the operator makes of their records."""

    async def opened(name: str):  # type: ignore[no-untyped-def]
        return await open_session(LocalHome(home), name)

    reports = []
    for name in SESSIONS:
        record = asyncio.run(opened(name))
        status = session_status_patch(
            record.state, previous_status=None, generation=1, now=now, liveness=record.liveness
        )
        ref = SessionRef(name=name, namespace="default", uid=f"uid-{name}")
        checkpoints = []
        for event in read_events(home, name):
            if isinstance(event, CheckpointEvent):
                item = checkpoint_object(ref, event)
                item["metadata"]["creationTimestamp"] = event.created_at.isoformat()
                checkpoints.append(_checkpoint(item))
        reports.append(status_report(name, status, goal="", checkpoints=checkpoints, briefing=[], now=now))
    return render_html(reports)


def test_both_reports_count_the_steps_the_page_lists_not_the_checkpoints(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", str(RELEASE_NOTES), "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    steps = {}
    for name in SESSIONS:
        page = run_belay(home, "brief", name)
        assert page.returncode == 0, page.stderr
        lines = page.stdout.splitlines()
        listed = lines[lines.index("Steps") + 1 : lines.index("Running now")]
        # A subagent's own task ("writer: Writes release notes. [writer]") is not a step.
        own = [line for line in listed if line.split()[1].rstrip(":") == "writer"]
        steps[name] = len(listed) - len(own)
        assert all(line.split()[0] in ("done", "verified") for line in listed), page.stdout
    checkpoints = {
        name: sum(isinstance(e, CheckpointEvent) for e in read_events(home, name)) for name in SESSIONS
    }
    # Were checkpoints counted as steps, the counts would differ: each session has more.
    assert all(checkpoints[name] > steps[name] for name in SESSIONS), (checkpoints, steps)

    written = tmp_path / "report.html"
    made = run_belay(home, "report", *SESSIONS, "-o", str(written))
    assert made.returncode == 0, made.stderr
    for page in (written.read_text(), cluster_page(home, datetime.now(UTC))):
        assert steps_done_column(page) == {name: f"{steps[name]} of {steps[name]}" for name in SESSIONS}
        done = glance_done(page)
        assert [line.split(";")[0] for line in done] == [
            f"Done: {steps[name]} of {steps[name]} steps ({'0' if name == 'release-notes' else '1'} verified)"
            for name in SESSIONS
        ], done
