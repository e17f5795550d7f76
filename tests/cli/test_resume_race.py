"""`belay resume` while another attempt of the session is alive is refused in one line that names
the live attempt's process and since when, and records nothing: the live attempt is not recorded
as lost, not fenced out, and goes on to the end. The real command line: the first attempt runs a
long command (alive, renewing its lease, holding the session), the second is started beside it.
(A first attempt that is only stopped, SIGSTOP, does not hold the session:
tests/cli/test_fenced_effects.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.journal.events import Event, LifecycleEvent, LifecycleKind, ToolRequestEvent
from tests.belay_cli import completed, kill_group, read_events, run_belay, start_belay
from tests.scripted import write_scripted_session
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

HANG_S = 300.0  # a guard against a hang, never a timing
SESSION = "long-step"
# Long enough for the second command to start and be refused while the first still runs it.
SLEEP = ["sleep", "20"]


def long_session(directory: Path) -> Path:
    sleep = {"tool": "run_command", "arguments": {"command": SLEEP, "timeout_s": 120}}
    write = {"tool": "write_file", "arguments": {"path": "out/done.txt", "content": "done"}}
    return write_scripted_session(
        directory,
        SESSION,
        "Wait, then say so.",
        [{"name": "worker", "networkProfile": "none"}],
        {"worker": [{"id": "wait", "title": "Wait", "actions": [sleep, write]}]},
    )


def running_the_long_command(home: Path) -> bool:
    return any(
        isinstance(e, ToolRequestEvent) and e.payload.tool == "run_command"
        for e in (read_events(home, SESSION) if (home / "sessions").exists() else [])
    )


def lifecycle(events: list[Event], kind: LifecycleKind) -> list[Event]:
    return [e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == kind]


@pytest.mark.parametrize(
    "second", [("resume", SESSION), ("resume", SESSION, "--executor", "openai-agents", "--model", "gpt-5")]
)
def test_a_resume_beside_a_live_attempt_is_refused_and_records_nothing(
    tmp_path: Path, second: tuple[str, ...]
) -> None:
    manifest = long_session(tmp_path / "manifest")
    home = tmp_path / "home"
    live = start_belay(home, "run", "--quiet", str(manifest))
    try:
        wait_until(
            lambda: running_the_long_command(home),
            "the long command to start",
            timeout=HANG_S,
            while_running=live,
        )
        before = read_events(home, SESSION)

        refused = run_belay(home, *second)
        assert refused.returncode != 0
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error: ") and "live attempt" in line, line
        assert f"harness process {live.pid}, since " in line, line
        assert "recorded nothing" in line, line
        assert not lifecycle(read_events(home, SESSION), LifecycleKind.HARNESS_LOST)
        assert lifecycle(before, LifecycleKind.HARNESS_STARTED) == lifecycle(
            read_events(home, SESSION), LifecycleKind.HARNESS_STARTED
        )

        assert live.wait(timeout=HANG_S) == 0
        events = read_events(home, SESSION)
        assert completed(events)
        assert not lifecycle(events, LifecycleKind.HARNESS_LOST)
        assert len(lifecycle(events, LifecycleKind.HARNESS_STARTED)) == 1
    finally:
        if live.poll() is None:
            kill_group(live)
