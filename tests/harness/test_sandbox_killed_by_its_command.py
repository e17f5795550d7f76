"""A command that kills its own sandbox (its server process) is not replayed on every replacement
forever: the second replacement caused by the same call ends that call with its error result,
which says the command killed its sandbox, and the step goes on in a restored sandbox. Before,
191 replacements in 300 s; `recovery.maxAttempts` is not what stops it (it is 1 here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.journal.events import Lifecycle, LifecycleKind
from tests.harness.content import PUBLISH, brief, result_of, run_session

KILLERS = {
    "its-parent": "kill -9 $PPID; sleep 5",
    "every-python": "pkill -9 python; sleep 5",
}


@pytest.mark.parametrize("killer", sorted(KILLERS))
def test_a_command_that_kills_its_sandbox_fails_after_the_second_replacement(
    tmp_path: Path, killer: str
) -> None:
    step = {
        "id": "work",
        "title": "Kill the sandbox's server, then do the work",
        "verify": {"command": "test -s out/result.txt && test -s out/before.txt", "exit_code": 0},
        "actions": [
            {"tool": "write_file", "arguments": {"path": "out/before.txt", "content": "kept\n"}},
            {"tool": "run_command", "arguments": {"command": KILLERS[killer]}},
            *PUBLISH,
        ],
    }
    events = run_session(tmp_path, [step], recovery={"maxAttempts": 1})

    killed = result_of(events, "solo.work.2")
    assert not killed.ok and killed.error is not None
    assert killed.error.startswith("the command killed its sandbox: the sandbox was lost 2 times"), (
        killed.error
    )
    replaced = [
        e
        for e in events
        if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.SANDBOX_REPLACED
    ]
    assert len(replaced) == 2
    # The step went on in the restored sandbox (the write before the kill replayed into it).
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded"
    assert [s["status"] for s in page["steps"] if s["task_id"] == "solo/work"] == ["verified"]
