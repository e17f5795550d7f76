"""Downloads never escape the working directory: a deliverable name is one plain file name where
the harness records it, and `belay artifacts get` without -o writes only such a name, into the
working directory; with -o it writes where -o says."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from belay.api.agentsession import parse_manifest
from belay.cli.main import app
from belay.journal.events import Artifact, EventDraft, ToolResult, UserInput, Wait, WaitKind
from belay.local.runtime import LocalHome, run_local

runner = CliRunner()
SESSION = "downloads"
HOSTILE_NAMES = ("../../../../escape.txt", "/tmp/belay-escape-test.txt", "out/escape.txt", ".profile")


def record_deliverables(home: Path, names: list[str], data: bytes) -> None:
    """A record whose deliverables carry these names, as an older harness or a forged record could."""
    ref = LocalHome(home).open_artifact_store().put(data)

    async def append() -> None:
        store = LocalHome(home).open_event_store()
        try:
            drafts = [EventDraft(payload=UserInput(goal="deliver"))]
            for name in names:
                drafts.append(EventDraft(payload=Artifact(name=name, ref=ref, deliverable=True)))
                review = Wait(
                    wait_id=f"review-{name}", kind=WaitKind.READY_FOR_REVIEW, reason="", artifact=name
                )
                drafts.append(EventDraft(payload=review))
            await store.append(SESSION, drafts)
        finally:
            await store.close()

    asyncio.run(append())


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_harness_refuses_to_record_a_deliverable_under_a_name_that_is_not_a_plain_file_name(
    tmp_path: Path,
) -> None:
    actions = [{"tool": "write_file", "arguments": {"path": "out/result.txt", "content": "result"}}]
    actions += [
        {"tool": "publish_deliverable", "arguments": {"path": "out/result.txt", "name": name}}
        for name in (*HOSTILE_NAMES, "result.txt")
    ]
    plan = {"subagents": {"solo": {"steps": [{"id": "publish", "title": "Publish", "actions": actions}]}}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    session = parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": SESSION},
            "spec": {
                "request": {"goal": "Publish out/result.txt."},
                "executor": {"type": "scripted", "plan": str(tmp_path / "plan.yaml")},
                "subagents": [{"name": "solo", "deliverable": "result.txt"}],
            },
        }
    )
    home = LocalHome(tmp_path / "home")
    result = asyncio.run(run_local(home, session, with_ticket_service=False))
    assert result.completed, result.detail

    async def read() -> list[object]:
        store = home.open_event_store()
        try:
            return [event.payload for event in await store.read(SESSION)]
        finally:
            await store.close()

    payloads = asyncio.run(read())
    refused = [p.error or "" for p in payloads if isinstance(p, ToolResult) and not p.ok]
    assert len(refused) == len(HOSTILE_NAMES)
    assert all("deliverable must be a plain file name" in error for error in refused)
    assert [p.name for p in payloads if isinstance(p, Artifact)] == ["result.txt"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_get_without_output_refuses_a_name_that_is_not_plain_and_writes_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, work = tmp_path / "home", tmp_path / "a" / "b" / "c" / "d" / "work"
    record_deliverables(home, [name], b"payload")
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    outside = Path("/tmp/belay-escape-test.txt")
    outside.unlink(missing_ok=True)

    result = runner.invoke(app, ["--home", str(home), "artifacts", "get", SESSION, name])

    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "choose where with -o PATH" in result.stderr
    assert files_under(tmp_path / "a") == [] and not outside.exists()
    assert not (tmp_path / "escape.txt").exists()


def test_get_writes_a_plain_name_into_the_working_directory_and_anywhere_with_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    record_deliverables(home, ["fix.patch", "../../../../escape.txt"], b"patch bytes")
    work.mkdir()
    monkeypatch.chdir(work)

    assert runner.invoke(app, ["--home", str(home), "artifacts", "get", SESSION, "fix.patch"]).exit_code == 0
    assert (work / "fix.patch").read_bytes() == b"patch bytes"

    elsewhere = tmp_path / "elsewhere" / "chosen.bin"
    args = ["--home", str(home), "artifacts", "get", SESSION, "../../../../escape.txt", "-o", str(elsewhere)]
    assert runner.invoke(app, args).exit_code == 0
    assert elsewhere.read_bytes() == b"patch bytes"
    written = [path for path in files_under(tmp_path) if not path.startswith("home/")]
    assert written == ["elsewhere/chosen.bin", "work/fix.patch"]


def test_the_download_commands_the_briefing_prints_write_into_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    record_deliverables(home, ["report.md", *HOSTILE_NAMES], b"report")
    work.mkdir()
    monkeypatch.chdir(work)
    brief = runner.invoke(app, ["--home", str(home), "brief", SESSION])
    commands = [
        line.split("download: ", 1)[1].split("  (sha256")[0]
        for line in brief.stdout.splitlines()
        if "download: " in line
    ]
    assert len(commands) == 1 + len(HOSTILE_NAMES)
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["belay", "artifacts", "get"]
        result = runner.invoke(app, ["--home", str(home), *words[1:]])
        assert result.exit_code == 0, (command, result.output)
    # A name of plain segments keeps them (a collected deliverable, `<child>/<name>`), still under
    # the working directory; any other is written by its last segment.
    expected = ["report.md", "escape.txt", "belay-escape-test.txt", ".profile", "out/escape.txt"]
    assert files_under(work) == sorted(expected)
