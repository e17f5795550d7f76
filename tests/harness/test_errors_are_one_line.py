"""An error a tool call returns to the model, and the page shows, is one line that keeps its
cause: arguments the sandbox refuses are named with what is wrong with each, not pydantic's
several-line text."""

from __future__ import annotations

from pathlib import Path

from tests.harness.content import PUBLISH, brief, result_of, run_session


def test_arguments_the_sandbox_refuses_come_back_as_one_line_naming_each_problem(tmp_path: Path) -> None:
    step = {
        "id": "work",
        "title": "Call a tool with arguments it does not take, then do the work",
        "verify": {"command": "test -s out/result.txt", "exit_code": 0},
        "actions": [
            {"tool": "run_command", "arguments": {"command": "true", "colour": "red", "shell": True}},
            *PUBLISH,
        ],
    }
    events = run_session(tmp_path, [step])

    refused = result_of(events, "solo.work.1")
    assert not refused.ok and refused.error is not None
    assert "\n" not in refused.error, refused.error
    # The cause is kept: each argument refused, and what the tool takes instead.
    assert refused.error.startswith("run_command: unexpected argument "), refused.error
    assert "'colour'" in refused.error and "'shell'" in refused.error, refused.error
    assert "(it takes only: command, timeout_s, cwd)" in refused.error, refused.error
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded"
    assert "\\n" not in str(page.get("steps")), page.get("steps")
