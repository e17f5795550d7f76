"""The timeline report from a record, without a browser: what the page says, and that nothing a
record holds can put markup, script or a fetch into it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from belay.journal.events import Actor, Artifact, ArtifactRef, Rejection, Task, TaskStatus, Wait, WaitKind
from belay.journal.state import fold
from belay.views.report import chart as chart_module
from belay.views.report import html as html_module
from belay.views.report import words as words_module
from belay.views.report.build import session_report
from belay.views.report.html import render_html
from tests.journal.fixtures import IMPLEMENTER, USER, LogBuilder, ReadPage, realistic_log, sha

HOSTILE = '<script>alert(1)</script><img src="http://evil.test/x.png">'


def test_every_step_wait_recovery_and_scope_change_of_a_record_is_on_the_page() -> None:
    events = realistic_log()
    state = fold(events)
    page = ReadPage(render_html([session_report(events, state)]))
    text = page.text
    for task_id in state.tasks:
        assert task_id in text, task_id
    for wait_id in ("review-patch", "reconcile-op-push-1", "ci-green", "apr-publish"):
        assert wait_id in text, wait_id
    assert "ci/fix-quoted-newline status == success" in text
    assert "Scope changed at 2026-11-29 09:" in text and "by dana (request v2): target Python 3.12" in text
    assert "git_push (op-push-1) was in flight: its outcome was unknown" in text
    # Nothing reconciled the push: the recovery is shown as not done, in red.
    assert re.search(r'<li class="bad">Recovery by the harness', render_html([session_report(events)]))
    assert "Interrupted" in text and "attempt 1 lost: PodDeleted" in text
    assert "belay artifacts get parser-fix parser.patch -o parser.patch" in text


def test_a_rejected_deliverable_is_marked_where_it_was_made_and_says_why() -> None:
    log = LogBuilder()
    log.add(Task(task_id="patch", title="Patch", status=TaskStatus.PLANNED, owner="implementer"))
    log.add(Task(task_id="patch", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    ref = ArtifactRef(sha256=sha("patch"), size=10, media_type="text/x-diff")
    log.add(Artifact(name="fix.patch", ref=ref, deliverable=True, subagent="implementer"), actor=IMPLEMENTER)
    log.add(Task(task_id="patch", status=TaskStatus.DONE), actor=IMPLEMENTER)
    log.add(
        Rejection(name="fix.patch", sha256=ref.sha256, reason="it drops the header", by="dana"), actor=USER
    )
    html = render_html([session_report(log.events)])
    text = ReadPage(html).text
    assert "Rejected fix.patch at 2026-11-29 09:05:00 UTC by dana: it drops the header." in text
    patch_row = re.search(r'<g class="row row-step">.*?</g>', html)
    assert patch_row is not None and "fix.patch rejected by dana: it drops the header" in patch_row.group()


def _hostile_log() -> list:
    log = LogBuilder()
    log.add(Task(task_id="x", title=HOSTILE, status=TaskStatus.PLANNED, owner="implementer"))
    log.add(Task(task_id="x", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    log.add(
        Wait(wait_id="w", kind=WaitKind.ON_EXTERNAL, reason=HOSTILE, condition=HOSTILE), actor=IMPLEMENTER
    )
    ref = ArtifactRef(sha256=sha("x"), size=1, media_type="text/plain")
    log.add(Artifact(name="out.txt", ref=ref, deliverable=True), actor=Actor(subagent="implementer"))
    return log.events


@pytest.mark.parametrize("wall", [True, False], ids=["escaped", "wall-removed"])
def test_record_text_never_becomes_markup_a_script_or_a_fetch(
    wall: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model writes step titles, wait reasons and conditions, and a store location may be any
    string: all of it reaches the page as text, and only a file or http(s) URL becomes a link.
    With the wall removed (`escaped` and `href` passing strings through wherever the page is
    drawn) the same record puts a script, an image fetch and a javascript: link into the page,
    which shows this test can fail."""
    if not wall:
        for module in (chart_module, html_module):
            monkeypatch.setattr(module, "escaped", str)
        monkeypatch.setattr(html_module, "href", lambda url: url)
    events = _hostile_log()
    report = session_report(events, locate=lambda ref: "javascript:alert(1)")
    page = ReadPage(render_html([report]))
    unsafe = (
        {"script", "img"} & page.tags
        or page.fetches
        or [link for link in page.links if not link.startswith("#")]
    )
    if wall:
        assert not unsafe, unsafe
        assert HOSTILE in page.text and "javascript:alert(1)" in page.text
    else:
        assert unsafe


def test_a_night_spent_waiting_is_a_labelled_break_in_the_axis() -> None:
    log = LogBuilder()
    log.add(Task(task_id="x", title="X", status=TaskStatus.PLANNED, owner="implementer"))
    log.add(Task(task_id="x", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    log.add(Wait(wait_id="ci", kind=WaitKind.ON_EXTERNAL, reason="CI", condition="ci"), actor=IMPLEMENTER)
    log.start += timedelta(hours=9)  # the next events come nine hours later
    log.add(
        Wait(wait_id="ci", kind=WaitKind.ON_EXTERNAL, reason="CI", condition="ci", resolved=True), actor=USER
    )
    log.add(Task(task_id="x", status=TaskStatus.DONE), actor=IMPLEMENTER)
    html = render_html([session_report(log.events)])
    assert "\u2248 9 h 1 min" in ReadPage(html).text
    assert "9 h 1 min, answered by dana" in ReadPage(html).text


def test_several_sessions_share_one_page_with_a_table_of_them_on_top() -> None:
    first = realistic_log()
    second = LogBuilder(session_id="parser-docs")
    second.add(Task(task_id="docs", title="Docs", status=TaskStatus.PLANNED, owner="implementer"))
    second.add(Task(task_id="docs", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    html = render_html([session_report(first), session_report(second.events)])
    page = ReadPage(html)
    assert page.text.strip().startswith("2 sessions: timeline 2 sessions")
    assert page.links[:2] == ["#session-parser-fix", "#session-parser-docs"]
    assert html.count('<section class="session"') == 2 and html.count('<svg class="chart"') == 2


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.042, "0.04 s"),
        (0.999, "1.0 s"),
        (4.21, "4.2 s"),
        (9.96, "10 s"),
        (59.6, "1 min 0 s"),
        (184, "3 min 4 s"),
        (3599.7, "1 h 0 min"),
        (8040, "2 h 14 min"),
        (273600, "3 d 4 h"),
    ],
)
def test_a_duration_reads_as_a_person_would_say_it(seconds: float, words: str) -> None:
    assert words_module.duration(seconds) == words
