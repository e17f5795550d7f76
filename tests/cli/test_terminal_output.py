"""No raw control byte reaches the terminal: goals, notes, titles, reasons and names carrying ESC
sequences and other C0 and C1 characters are shown escaped (`\\u001b`) by every human-readable
output of `belay`, and JSON output stays valid JSON that decodes to the same text."""

from __future__ import annotations

import asyncio
import getpass
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from belay.cli.main import app
from belay.journal.events import (
    Actor,
    ApprovalRequest,
    Artifact,
    EffectClass,
    EventDraft,
    Note,
    NoteKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Wait,
    WaitKind,
)
from belay.local.runtime import LocalHome

runner = CliRunner()
SESSION = "hostile"
# Clear the screen, retitle the window, ring, rewrite the line, a C1 CSI, DEL and NUL.
HOSTILE = "start \x1b[2J\x1b]0;owned\x07 \r over \x9b31m \x85 \x7f \x00 end"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
APPROVAL = "approve-\x1b[31mop"


def record(home: Path) -> None:
    ref = LocalHome(home).open_artifact_store().put(b"report")
    worker = Actor(kind="harness", subagent="solo")
    payloads = [
        UserInput(goal=f"goal {HOSTILE}", parts={"repository": f"part {HOSTILE}"}),
        Task(task_id="solo/step", title=f"title {HOSTILE}", status=TaskStatus.RUNNING, owner="solo"),
        ToolRequest(operation_id=f"op {HOSTILE}", tool="run_command", effect=EffectClass.IDEMPOTENT),
        ToolResult(operation_id=f"op {HOSTILE}", ok=False, error=f"error {HOSTILE}"),
        Note(note_id="cause", kind=NoteKind.HYPOTHESIS, text=f"note {HOSTILE}"),
        Note(note_id="fix", kind=NoteKind.DECISION, text=f"decision {HOSTILE}", status="accepted"),
        ApprovalRequest(
            approval_id=APPROVAL,
            operation_id="op",
            tool="create_ticket",
            payload_sha256="ab" * 32,
            summary=f"summary {HOSTILE}",
        ),
        Wait(wait_id="question", kind=WaitKind.ON_USER, reason=f"reason {HOSTILE}"),
        Artifact(name="report\x1b[8m.md", ref=ref, deliverable=True, description=f"about {HOSTILE}"),
        Wait(
            wait_id="review",
            kind=WaitKind.READY_FOR_REVIEW,
            reason=f"review {HOSTILE}",
            artifact="report\x1b[8m.md",
        ),
    ]

    async def append() -> None:
        store = LocalHome(home).open_event_store()
        try:
            await store.append(SESSION, [EventDraft(payload=p, actor=worker) for p in payloads])
        finally:
            await store.close()

    asyncio.run(append())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("terminal") / "home"
    record(root)
    return root


HUMAN_COMMANDS = [
    ("brief", SESSION),
    ("brief", SESSION, "--markdown"),
    ("events", SESSION),
    ("sessions",),
    ("artifacts", SESSION),
    ("approve", SESSION, "no-such\x1b[31mid"),  # the error lists what is pending
]


@pytest.mark.parametrize("args", HUMAN_COMMANDS, ids=[" ".join(a[:1] + a[2:3]) for a in HUMAN_COMMANDS])
def test_human_output_holds_no_raw_control_character(home: Path, args: tuple[str, ...]) -> None:
    result = runner.invoke(app, ["--home", str(home), *args])
    shown = result.stdout + result.stderr
    assert RAW_CONTROL.search(shown) is None, repr(shown)
    assert "\\u001b" in shown  # shown, escaped, not dropped


def test_an_answer_and_its_echo_hold_no_raw_control_character(tmp_path: Path) -> None:
    record(tmp_path)
    answered = runner.invoke(app, ["--home", str(tmp_path), "answer", SESSION, "question", f"yes {HOSTILE}"])
    assert answered.exit_code == 0 and RAW_CONTROL.search(answered.stdout + answered.stderr) is None
    shown = runner.invoke(app, ["--home", str(tmp_path), "events", SESSION, "--from", "11"]).stdout
    assert f"-> yes ({getpass.getuser()}) yes" in shown and shown.count("\\u001b[2J") == 2
    assert RAW_CONTROL.search(shown) is None


def test_the_briefing_shows_every_hostile_field_escaped(home: Path) -> None:
    text = runner.invoke(app, ["--home", str(home), "brief", SESSION]).stdout
    escaped = "start \\u001b[2J\\u001b]0;owned\\u0007 \\u000d over \\u009b31m \\u0085 \\u007f \\u0000 end"
    for field in ("goal", "title", "note", "decision", "summary", "reason"):
        assert f"{field} {escaped}" in text, field


def test_json_output_stays_valid_and_decodes_to_the_recorded_text(home: Path) -> None:
    brief = runner.invoke(app, ["--home", str(home), "brief", SESSION, "--json"])
    assert RAW_CONTROL.search(brief.stdout) is None
    assert json.loads(brief.stdout)["goal"] == f"goal {HOSTILE}"
    events = runner.invoke(app, ["--home", str(home), "events", SESSION, "--json"])
    assert RAW_CONTROL.search(events.stdout) is None
    first = json.loads(events.stdout.splitlines()[0])
    assert first["payload"]["goal"] == f"goal {HOSTILE}"
