"""An unsafe MCP call under kills, through the real CLI: a real MCP server (the official SDK's,
`tests/mcp/server/tracker_server.py`) runs in the subagent's sandbox, and `belay run` is killed with
SIGKILL (its whole process group) before, during and after its unsafe call, then `belay resume`d.
The tracker counts every issue it opens: at most one, whatever the kill, and a call cut off by the
kill is never sent again. Its outcome is shown with what the server's probe found, for a person to
confirm."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from belay.journal.events import Event, OperationOutcomeEvent, ToolRequestEvent, WaitEvent
from tests.belay_cli import completed, kill_group, read_events, run_belay, run_until, start_belay
from tests.mcp.session import FIND, OPEN, SESSION, tracker_session
from tests.mcp.tracker_backend import Tracker, running_tracker
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

RECONCILE = f"reconcile-{OPEN}"


def requests_of(events: list[Event], operation_id: str) -> int:
    return sum(isinstance(e, ToolRequestEvent) and e.payload.operation_id == operation_id for e in events)


def waits(events: list[Event]) -> set[str]:
    return {e.payload.wait_id for e in events if isinstance(e, WaitEvent)}


def resume_to_the_end(home: Path) -> list[Event]:
    resumed = run_belay(home, "resume", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return read_events(home, SESSION)


def killed_during_the_call(tmp_path: Path, tracker: Tracker, **server: object) -> tuple[Path, Path]:
    """`belay run` killed while the tracker holds its answer to the open it has counted."""
    manifest = tracker_session(tmp_path / "session", tracker.url, **server)
    home = tmp_path / "home"
    tracker.delay_s = 120
    run = start_belay(home, "run", str(manifest))
    wait_until(lambda: tracker.opened, "the tracker to count the open", timeout=120, while_running=run)
    kill_group(run)
    tracker.delay_s = 0
    return home, manifest


def resume_until_it_waits(home: Path) -> subprocess.Popen[bytes]:
    resume = start_belay(home, "resume", SESSION)
    wait_until(
        lambda: RECONCILE in waits(read_events(home, SESSION)),
        "the resume to ask whether the open took effect",
        timeout=120,
        while_running=resume,
    )
    return resume


def test_a_kill_before_the_unsafe_call_sends_it_once(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url)
        reached, _ = run_until(home, ["run", str(manifest)], f"tool_result:{FIND}")
        assert reached
        assert tracker.opened == 0
        after = resume_to_the_end(home)
        assert completed(after)
        assert tracker.opened == 1
        assert requests_of(after, OPEN) == 1
        assert RECONCILE not in waits(after)


def test_a_kill_after_the_unsafe_call_repeats_nothing(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url)
        reached, _ = run_until(home, ["run", str(manifest)], f"tool_result:{OPEN}")
        assert reached
        after = resume_to_the_end(home)
        assert completed(after)
        assert tracker.opened == 1
        assert requests_of(after, OPEN) == 1
        assert RECONCILE not in waits(after)


def test_a_kill_during_the_unsafe_call_is_reconciled_with_the_probe_never_sent_again(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home, _ = killed_during_the_call(tmp_path, tracker)
        assert tracker.opened == 1
        resume = resume_until_it_waits(home)
        try:
            page = run_belay(home, "brief", SESSION)
            assert page.returncode == 0, page.stderr
            # The person reads what the probe found: the issue the cut-off call opened.
            assert "tracker.find_issues" in page.stdout and "ISSUE-1" in page.stdout, page.stdout
            assert f"belay reconcile {SESSION} {OPEN} --succeeded" in page.stdout
            outcome = [e for e in read_events(home, SESSION) if isinstance(e, OperationOutcomeEvent)]
            assert [o.payload.outcome for o in outcome] == ["unknown"]
            assert "ISSUE-1" in outcome[0].payload.detail
            assert tracker.opened == 1  # waiting on the person, it sent nothing
            approved = run_belay(home, "reconcile", SESSION, OPEN, "--succeeded")
            assert approved.returncode == 0, approved.stderr
            assert resume.wait(timeout=120) == 0
        finally:
            if resume.poll() is None:
                kill_group(resume)
        after = read_events(home, SESSION)
        assert completed(after)
        assert tracker.opened == 1
        assert requests_of(after, OPEN) == 1


def test_without_a_probe_a_cut_off_call_waits_on_the_person(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home, _ = killed_during_the_call(tmp_path, tracker, probe=None)
        resume = resume_until_it_waits(home)
        try:
            page = run_belay(home, "brief", SESSION).stdout
            assert f"reconciliation {OPEN}: tracker.open_issue outcome unknown" in page, page
            assert "its probe" not in page
            assert tracker.opened == 1
            # The person says it did not: then, and only then, it is sent (again, to the tracker).
            rejected = run_belay(home, "reconcile", SESSION, OPEN, "--failed")
            assert rejected.returncode == 0, rejected.stderr
            assert resume.wait(timeout=120) == 0
        finally:
            if resume.poll() is None:
                kill_group(resume)
        assert completed(read_events(home, SESSION))
        assert tracker.opened == 2


def test_an_unsafe_call_sent_and_never_answered_is_an_unknown_outcome_not_a_failure(tmp_path: Path) -> None:
    """No kill: the server takes the call and passes its timeout. It may have taken effect, so it
    is reconciled like a call a kill cut off, never called failed nor sent again."""
    with running_tracker(tmp_path / "calls.log") as tracker:
        # The server's timeout bounds its start and listing too: long enough for a loaded machine
        # to start it, far shorter than the tracker's delay.
        tracker.delay_s = 120
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url, timeoutSeconds=20)
        run = start_belay(home, "run", str(manifest))
        try:
            wait_until(
                lambda: RECONCILE in waits(read_events(home, SESSION)),
                "the run to ask whether the unanswered open took effect",
                timeout=120,
                while_running=run,
            )
            [outcome] = [e for e in read_events(home, SESSION) if isinstance(e, OperationOutcomeEvent)]
            assert outcome.payload.outcome == "unknown"
            assert "did not answer within 20s" in outcome.payload.detail
            assert "ISSUE-1" in outcome.payload.detail  # what the probe found
            tracker.delay_s = 0
            reconciled = run_belay(home, "reconcile", SESSION, OPEN, "--succeeded")
            assert reconciled.returncode == 0, reconciled.stderr
            assert run.wait(timeout=120) == 0
        finally:
            if run.poll() is None:
                kill_group(run)
        assert tracker.opened == 1
        assert completed(read_events(home, SESSION))
