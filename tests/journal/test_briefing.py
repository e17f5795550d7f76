from __future__ import annotations

import json

from hypothesis import given, settings

from belay.journal.events import (
    ApprovalRequest,
    ArtifactRef,
    DerivedFrom,
    EffectClass,
    OperationOutcome,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.state import fold
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_json, render_markdown, render_text
from tests.journal.fixtures import COMPAT, PATCH, PUBLISH_SHA, LogBuilder, realistic_log, sha
from tests.journal.strategies import logs


def _text() -> str:
    state = fold(realistic_log())
    return render_text(briefing(state, artifact_store="/var/lib/belay/artifacts"))


def _section(text: str, title: str) -> str:
    """The lines of one section: from its heading to the next unindented line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def test_briefing_fits_on_a_page() -> None:
    assert len(_text().splitlines()) < 60


def test_what_was_asked_and_every_scope_change() -> None:
    asked = _section(_text(), "Asked")
    assert "Fix the CSV parser's quoted-newline bug and prepare a release" in asked
    assert "target: Python 3.12" in asked  # the request as it stands now
    changes = _section(_text(), "Scope changes")
    # When, by whom, and the difference in the request.
    assert "v2 at 2026-11-29 09:30 UTC by dana: target Python 3.12 instead of 3.11" in changes
    assert "target: 'Python 3.11' -> 'Python 3.12'" in changes


def test_steps_done_and_verified() -> None:
    steps = _section(_text(), "Steps")
    assert "verified  reproduce: Reproduce the bug with a failing test [researcher]" in steps
    assert "done      patch: Patch the tokenizer [implementer] -> parser.patch" in steps
    assert "running   publish" in steps


def test_what_is_running() -> None:
    running = _section(_text(), "Running now")
    assert "task publish: Publish the release [implementer]" in running
    # The publish awaiting approval waits on you, listed there only.
    assert "op-publish-1" not in running
    # The push whose outcome is unknown is not "running": it waits on reconciliation.
    assert "op-push-1" not in running


def test_what_waits_on_the_user_with_the_command_to_act() -> None:
    waiting = _section(_text(), "Waiting on you")
    assert "approval apr-publish: publish csvkit-lite 1.4.1 to the internal index" in waiting
    assert f"payload sha256 {PUBLISH_SHA}" in waiting
    assert "run: belay approve parser-fix apr-publish" in waiting
    assert "belay reject parser-fix apr-publish" in waiting
    assert "reconciliation op-push-1: git_push outcome unknown" in waiting
    assert (
        "run: belay reconcile parser-fix op-push-1 --succeeded  "
        "(or: belay reconcile parser-fix op-push-1 --failed)" in waiting
    )
    assert "reconcile-op-push-1" not in waiting  # its wait is the reconciliation, listed once
    # The wait that restates the approval is not listed twice.
    assert "approve-publish" not in waiting


def test_a_question_to_the_user_comes_with_the_answer_command() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    log.add(Wait(wait_id="which-branch", kind=WaitKind.ON_USER, reason="which branch should I target?"))
    waiting = _section(render_text(briefing(fold(log.events))), "Waiting on you")
    assert "decision which-branch: which branch should I target?" in waiting
    assert 'run: belay answer parser-fix which-branch "..."' in waiting


def test_what_waits_on_an_external_condition() -> None:
    external = _section(_text(), "Waiting on external conditions")
    assert "ci-green: CI must pass on the fix branch [ci/fix-quoted-newline status == success]" in external


def test_what_is_ready_for_review_and_where_to_download_it() -> None:
    review = _section(_text(), "Ready for review")
    assert "parser.patch (2048 bytes, text/x-diff, implementer)" in review
    assert "download: belay artifacts get parser-fix parser.patch -o parser.patch" in review
    assert PATCH.uri in review


def test_download_location_comes_from_the_locator() -> None:
    def locate(ref: ArtifactRef) -> str:
        return f"/var/lib/belay/artifacts/{ref.sha256[:2]}/{ref.sha256}"

    b = briefing(fold(realistic_log()), locate=locate)
    assert b.ready_for_review[0].location == locate(PATCH)
    assert locate(PATCH) in render_text(b)


def test_hypotheses_and_decisions_are_told_apart() -> None:
    hypotheses = _section(_text(), "Hypotheses")
    assert "h-escape [open]" in hypotheses and "h-newline [open]" in hypotheses
    assert "d-rfc" not in hypotheses
    decisions = _section(_text(), "Decisions")
    assert "d-rfc [accepted]: follow RFC 4180" in decisions
    assert "h-escape" not in decisions


def test_under_each_scope_change_what_became_invalid_and_what_stays_reusable_and_why() -> None:
    change = _section(_text(), "Scope changes")
    invalid, reusable = change.split("still reusable:")
    assert "compat-matrix.md (artifact): depends on target, changed in v2" in invalid
    assert "reproduce [now verified]: depends on bug only: unchanged" in reusable
    assert "parser.patch (deliverable)" in reusable and "compat-matrix" not in reusable
    b = briefing(fold(realistic_log()))
    [item] = b.scope_changes
    assert [o.result_id for o in item.invalid_outputs] == ["compat-matrix"]
    assert [v.step for v in item.reusable_steps] == ["reproduce"]
    assert COMPAT.sha256 not in {o.result_id for o in item.reusable_outputs}


def test_attempts_recoveries_and_unknown_outcomes() -> None:
    recovery = _section(_text(), "Attempts and recovery")
    assert "attempt 2; harness lost 1x; restored 1x from cp-1" in recovery
    assert "unknown outcomes to reconcile: op-push-1 (git_push)" in recovery
    assert "last verified checkpoint cp-1" in recovery


def test_markdown_and_json_carry_the_same_answers() -> None:
    b = briefing(fold(realistic_log()))
    markdown = render_markdown(b)
    assert markdown.startswith("# Session parser-fix: WaitingOnUser")
    assert "## Waiting on you" in markdown
    assert "- run: belay approve parser-fix apr-publish" in markdown.replace("  - run", "- run")
    data = json.loads(render_json(b))
    assert data["waiting_on_you"][0]["command"] == "belay approve parser-fix apr-publish"
    assert (
        data["ready_for_review"][0]["command"]
        == "belay artifacts get parser-fix parser.patch -o parser.patch"
    )
    assert data["scope_changes"][0]["invalid_outputs"][0]["result_id"] == "compat-matrix"
    assert data["scope_changes"][0]["changes"] == [
        {"part": "target", "before": "Python 3.11", "after": "Python 3.12"}
    ]


@settings(max_examples=60, deadline=None)
@given(events=logs())
def test_briefing_is_deterministic(events: list) -> None:
    first = briefing(fold(events))
    second = briefing(fold(list(events)))
    assert render_json(first) == render_json(second)
    assert render_text(first) == render_text(second)


def _long_session() -> list:
    log = LogBuilder()
    log.add(UserInput(goal="Port every module", parts={"api": "v1", "style": "pep8"}))
    for i in range(40):
        status = TaskStatus.VERIFIED if i < 5 else TaskStatus.DONE if i < 35 else TaskStatus.PLANNED
        log.add(Task(task_id=f"step-{i:02}", title=f"Port module {i}", status=status, owner="implementer"))
    # Running on the goal alone: the changes of parts below leave it running (one that depends on
    # a changed part is reopened, belay.journal.state.invalidation.running_on).
    log.add(Task(task_id="step-35", status=TaskStatus.RUNNING, request_parts=("goal",)))
    for i in range(80):
        part = "api" if i < 50 else "style"
        derived = DerivedFrom(request_version=1, request_parts=(part,))
        log.add(ToolResult(operation_id=f"op-{i}", ok=True, result_id=f"r-{i:02}", derived_from=derived))
    for i in range(10):
        log.add(ScopeChange(request_version=2 + i, summary=f"change {i}", changed_parts={"style": f"s{i}"}))
    log.add(ScopeChange(request_version=12, summary="api v2", changed_parts={"api": "v2"}))
    return log.events


def test_a_long_session_still_fits_on_a_page_and_keeps_what_matters() -> None:
    text = render_text(briefing(fold(_long_session())))
    assert len(text.splitlines()) < 60
    steps = _section(text, "Steps")
    assert "... 28 earlier steps not shown (23 done, 5 verified)" in steps
    assert "running   step-35" in steps and "planned   step-39" in steps
    assert "done      step-34" in steps  # the most recent finished steps stay
    changes = _section(text, "Scope changes")
    assert "... 5 earlier changes not shown" in changes and "by harness: api v2" in changes
    # Earlier changes in two lines each; the last one in full.
    assert "style: 's4' -> 's5'; made 0 results invalid" in changes
    assert "made invalid: 50 intermediate results" in changes
    assert "still reusable: nothing" in changes  # "style" results fell to the earlier changes


def _a_long_history() -> list:
    """A session whose record outgrew a page: 30 failed effects in the world, the earliest one
    waiting on a retry decision, one with an unknown outcome, and a scope change that reopens
    20 steps."""
    log = LogBuilder()
    log.add(UserInput(goal="Open a ticket per failing module", parts={"api": "v1"}))
    for i in range(20):
        log.add(Task(task_id=f"step-{i:02}", title=f"Module {i}", status=TaskStatus.DONE))
    for i in range(30):
        op = f"op-{i:02}"
        log.add(
            ToolRequest(
                operation_id=op, tool="create_ticket", effect=EffectClass.UNSAFE, step=f"step-{i % 20:02}"
            )
        )
        derived = DerivedFrom(request_version=1, request_parts=("api",))
        log.add(
            ToolResult(
                operation_id=op,
                ok=False,
                error=f"tracker down {i}",
                result_id=f"r-{i:02}",
                derived_from=derived,
            )
        )
    # The change comes before the retry is asked: a retry asked before it, on a step it reopened,
    # would be withdrawn (the step makes its calls again).
    log.add(ScopeChange(request_version=2, summary="api v2", changed_parts={"api": "v2"}))
    log.add(
        ApprovalRequest(
            approval_id="retry-op-00",
            operation_id="op-00",
            tool="create_ticket",
            payload_sha256=sha("p"),
            summary="s",
            kind="retry",
        )
    )
    log.add(ToolRequest(operation_id="op-lost", tool="create_ticket", effect=EffectClass.UNSAFE))
    log.add(OperationOutcome(operation_id="op-lost", outcome="unknown", detail="harness lost"))
    return log.events


def test_a_long_history_is_summarised_with_counts_and_keeps_what_waits_on_you() -> None:
    b = briefing(fold(_a_long_history()))
    attention = [(a.kind, a.id) for a in b.needs_attention]
    # The retry decision and the unknown outcome stay, however old; of the other failures, the
    # latest eight, and a count of the rest with the command that lists them.
    assert ("failed_effect", "op-00") in attention and ("unknown_effect", "op-lost") in attention
    assert [i for k, i in attention if k == "failed_effect"][1:] == [f"op-{i}" for i in range(22, 30)]
    assert b.needs_attention_omitted == 21
    text = render_text(b)
    section = _section(text, "Needs attention")
    assert "... 21 earlier failed effects not shown; `belay events parser-fix` lists every one" in section
    assert "op-05" not in section and "op-29" in section
    # The scope change reopened every step: the first twelve are named, the rest counted.
    [change] = b.scope_changes
    assert [v.step for v in change.invalid_steps] == [f"step-{i:02}" for i in range(12)]
    assert change.invalid_steps_omitted == 8
    assert all(v.why == "depends on api, changed in v2" for v in change.invalid_steps)
    assert "... and 8 more steps" in _section(text, "Scope changes")
    assert change.invalidated_count == 30
