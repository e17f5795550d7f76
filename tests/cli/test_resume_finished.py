"""`belay resume` of a session that succeeded says so in one line and starts no attempt; once an
amend reopens it, the same command resumes it."""

from __future__ import annotations

from pathlib import Path

from tests.belay_cli import attempts, read_events, run_belay
from tests.scripted import write_scripted_session

SESSION = "finished"


def manifest(directory: Path) -> Path:
    steps = [
        {
            "id": "write",
            "title": "Write the notes",
            "verify": {"command": "test -s out/notes.md", "exit_code": 0},
            "actions": [
                {
                    "tool": "run_command",
                    "arguments": {"command": "mkdir -p out && echo notes > out/notes.md"},
                },
                {"tool": "publish_deliverable", "arguments": {"path": "out/notes.md", "name": "notes.md"}},
            ],
        }
    ]
    writer = {"name": "writer", "networkProfile": "none", "declared": ["out/*"], "deliverable": "notes.md"}
    return write_scripted_session(directory, SESSION, "Write notes.", [writer], {"writer": steps})


def test_resume_of_a_succeeded_session_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(manifest(tmp_path / "session")))
    assert ran.returncode == 0, ran.stderr
    before = len(read_events(home, SESSION))

    resumed = run_belay(home, "resume", SESSION)
    assert resumed.returncode == 0, resumed.stderr
    [line] = resumed.stdout.splitlines()
    assert line.startswith(f"nothing to resume: session {SESSION} succeeded (attempt 1)")
    assert f"`belay brief {SESSION}`" in line and f"`belay amend {SESSION}" in line
    assert len(read_events(home, SESSION)) == before  # no attempt started, nothing recorded

    amended = run_belay(home, "amend", SESSION, "--goal", "Write longer notes.")
    assert amended.returncode == 0, amended.stderr
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stderr
    assert "nothing to resume" not in resumed.stdout
    assert attempts(read_events(home, SESSION)) == 2
