"""A command that stops its own sandbox's server (SIGSTOP) rather than killing it is reported as
what happened: the sandbox stopped answering and was replaced, never that it was killed. The call
fails after the second replacement, as for a command that kills its sandbox, and the step goes on
in a restored sandbox."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import Lifecycle, LifecycleKind
from tests.harness.content import PUBLISH, brief, result_of, run_session


def test_a_command_that_stops_its_sandbox_is_reported_stopped_not_killed(tmp_path: Path) -> None:
    step = {
        "id": "work",
        "title": "Stop the sandbox's server, then do the work",
        "verify": {"command": "test -s out/result.txt && test -s out/before.txt", "exit_code": 0},
        "actions": [
            {"tool": "write_file", "arguments": {"path": "out/before.txt", "content": "kept\n"}},
            # The shortest wait the client allows: the server gives no answer at all.
            {"tool": "run_command", "arguments": {"command": "kill -STOP $PPID; sleep 5", "timeout_s": 1}},
            *PUBLISH,
        ],
    }
    events = run_session(tmp_path, [step], recovery={"maxAttempts": 1})

    stopped = result_of(events, "solo.work.2")
    assert not stopped.ok and stopped.error is not None
    said = "the command stopped its sandbox from answering: the sandbox was lost 2 times"
    assert stopped.error.startswith(said), stopped.error
    assert "killed its sandbox" not in stopped.error and "not killed" in stopped.error
    assert "did not answer within" in stopped.error and "\n" not in stopped.error
    replaced = [
        e
        for e in events
        if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.SANDBOX_REPLACED
    ]
    assert len(replaced) == 2
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded"
    assert [s["status"] for s in page["steps"] if s["task_id"] == "solo/work"] == ["verified"]
    shown = str(page)
    assert "stopped its sandbox from answering" in shown or "solo.work.2" not in shown
    assert "killed its sandbox" not in shown
