"""Every wait the page lists carries the command that ends it, and that command, run exactly as
printed, is accepted: approve or reject an approval, answer a question, reconcile an unknown
outcome, mark an external condition met, download or reject a deliverable. Afterwards the page
says who decided what, when and why, and nothing waits any more."""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import json
import shlex
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
    Lifecycle,
    LifecycleKind,
    OperationOutcome,
    Payload,
    ToolRequest,
    UserInput,
    Wait,
    WaitKind,
)
from belay.local.runtime import LocalHome
from tests.belay_cli import run_belay

runner = CliRunner()
SESSION = "printed"
HARNESS = Actor(kind="harness", attempt=1, subagent="fixer")
REPORT = b"# research\nthe findings\n"


def _request(op: str, tool: str, effect: EffectClass = EffectClass.IDEMPOTENT) -> ToolRequest:
    return ToolRequest(operation_id=op, tool=tool, arguments={"x": op}, effect=effect, subagent="fixer")


def write_session(home: Path) -> None:
    """A session that waits on you (an approval, a question, an unknown outcome), on CI, and on
    your review of a report, all at once."""

    async def append() -> None:
        local = LocalHome(home)
        ref = local.open_artifact_store().put(REPORT, media_type="text/markdown")
        payloads: list[Payload] = [
            Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
            _request("fixer.notes.2", "publish_deliverable"),
            ApprovalRequest(
                approval_id="approve-fixer.notes.2",
                operation_id="fixer.notes.2",
                tool="publish_deliverable",
                payload_sha256="ab" * 32,
                summary="fixer publishes notes.md",
            ),
            _request("fixer.ask.3", "wait_on_user"),
            Wait(wait_id="wait-fixer.ask.3", kind=WaitKind.ON_USER, reason="which branch?"),
            _request("ci.wait-ci.1", "wait_on_external"),
            Wait(
                wait_id="wait-ci.wait-ci.1",
                kind=WaitKind.ON_EXTERNAL,
                reason="CI pipeline must be green",
                condition="ci-green",
            ),
            _request("fixer.ticket.4", "create_ticket", EffectClass.UNSAFE),
            OperationOutcome(operation_id="fixer.ticket.4", outcome="unknown", detail="the harness was lost"),
            Artifact(
                name="research.md", ref=ref, deliverable=True, subagent="fixer", description="the report"
            ),
            Wait(
                wait_id="review-research.md",
                kind=WaitKind.READY_FOR_REVIEW,
                reason="research.md is ready for review",
                artifact="research.md",
            ),
        ]
        store = local.open_event_store()
        try:
            await store.append(SESSION, [EventDraft(payload=UserInput(goal="fix the parser"))])
            await store.append(SESSION, [EventDraft(payload=p, actor=HARNESS) for p in payloads])
        finally:
            await store.close()

    asyncio.run(append())


def belay(home: Path, command: str) -> tuple[int, str]:
    """`command` exactly as the page printed it, in this home."""
    words = shlex.split(command)
    assert words[0] == "belay", command
    result = runner.invoke(app, ["--home", str(home), *words[1:]])
    return result.exit_code, result.output


def brief(home: Path) -> dict:  # type: ignore[type-arg]
    code, output = belay(home, f"belay brief {SESSION} --json")
    assert code == 0, output
    return json.loads(output)


def printed(page: dict, which: str) -> list[str]:  # type: ignore[type-arg]
    """Every command (or alternative) the waits of the page print."""
    sections = ("waiting_on_you", "waiting_on_external", "ready_for_review")
    return [item[which] for section in sections for item in page[section] if item.get(which)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # where a download writes
    write_session(tmp_path / "home")
    return tmp_path / "home"


def test_every_wait_prints_the_command_of_its_kind(home: Path) -> None:
    page = brief(home)
    ends = {item["id"]: (item["command"], item.get("alternative")) for item in page["waiting_on_you"]}
    assert ends == {
        "approve-fixer.notes.2": (
            f"belay approve {SESSION} approve-fixer.notes.2",
            f'belay reject {SESSION} approve-fixer.notes.2 --reason "..."',
        ),
        "fixer.ticket.4": (
            f"belay reconcile {SESSION} fixer.ticket.4 --succeeded",
            f"belay reconcile {SESSION} fixer.ticket.4 --failed",
        ),
        "wait-fixer.ask.3": (
            f'belay answer {SESSION} wait-fixer.ask.3 "..."',
            f'belay reject {SESSION} wait-fixer.ask.3 --reason "..."',
        ),
    }
    [external] = page["waiting_on_external"]
    assert external["command"] == f"belay approve {SESSION} wait-ci.wait-ci.1"
    [review] = page["ready_for_review"]
    assert review["command"] == f"belay artifacts get {SESSION} research.md -o research.md"
    assert review["alternative"] == f'belay reject {SESSION} research.md --reason "..."'
    # Each is listed once: none of the operations that wait is also "running".
    assert page["running"] == []
    code, text = belay(home, f"belay brief {SESSION}")
    assert code == 0 and f"once it holds, run: belay approve {SESSION} wait-ci.wait-ci.1" in text
    # The fleet counts the session under each of its waits.
    code, fleet = belay(home, "belay sessions")
    assert code == 0 and "1 waiting on you, 1 on external conditions, 1 ready for review" in fleet


def test_each_command_printed_is_accepted_as_printed_and_the_page_says_who_decided(home: Path) -> None:
    for command in printed(brief(home), "command"):
        code, output = belay(home, command)
        assert code == 0, f"{command}: {output}"
    assert Path("research.md").read_bytes() == REPORT
    page = brief(home)
    assert page["waiting_on_you"] == [] and page["waiting_on_external"] == []
    decided = {(d["kind"], d["item"]): (d["outcome"], d["by"]) for d in page["decided"]}
    # Without --by, each decision is recorded as the user who ran the command.
    person = getpass.getuser()
    assert decided == {
        ("approval", "approve-fixer.notes.2"): ("granted", person),
        ("answer", "wait-fixer.ask.3"): ("yes", person),
        ("answer", "wait-ci.wait-ci.1"): ("yes", person),
        ("reconciliation", "fixer.ticket.4"): ("took effect", person),
    }
    assert all(d["at"] for d in page["decided"])
    [answer] = [d for d in page["decided"] if d["item"] == "wait-fixer.ask.3"]
    assert answer["reason"] == "..."  # the answer's text, as typed
    code, text = belay(home, f"belay brief {SESSION}")
    assert code == 0 and "Decided by people" in text
    assert f"approval approve-fixer.notes.2: granted by {person} at " in text


def test_each_alternative_printed_is_accepted_as_printed(home: Path) -> None:
    for command in printed(brief(home), "alternative"):
        code, output = belay(home, command)
        assert code == 0, f"{command}: {output}"
    page = brief(home)
    assert page["waiting_on_you"] == [] and page["ready_for_review"] == []
    [rejection] = [r for r in page["rejections"] if r["item"] == "research.md"]
    assert rejection["reason"] == "..."


def test_artifacts_through_a_pipe_keep_every_cell_whole_and_as_json(home: Path) -> None:
    listed = run_belay(home, "artifacts", SESSION)  # stdout is a pipe, not a terminal
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if line.startswith("research.md")]
    digest = hashlib.sha256(REPORT).hexdigest()
    assert digest in row.split() and "…" not in listed.stdout
    as_json = run_belay(home, "artifacts", SESSION, "--json")
    assert as_json.returncode == 0, as_json.stderr
    [entry] = json.loads(as_json.stdout)
    assert (entry["name"], entry["sha256"], entry["size"]) == ("research.md", digest, len(REPORT))
    assert entry["deliverable"] and entry["ready_for_review"] and Path(entry["location"]).is_file()
