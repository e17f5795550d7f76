"""Every failure a person can cause (a damaged artifact store, a manifest that cannot be read, a
home that is not one) prints one `error:` line that says what to do, and no traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from belay.cli.main import app
from belay.journal.events import Artifact, EventDraft, UserInput
from belay.local.runtime import LocalHome, install_session
from tests.api.invalid_manifests import Case, valid_manifest
from tests.cli.test_invalid_manifests import write_case

runner = CliRunner()
SESSION = "damaged"


def one_error_line(home: Path, *args: str) -> str:
    result = runner.invoke(app, ["--home", str(home), *args])
    assert result.exit_code == 1, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def record_artifact(home: Path) -> Path:
    """A record with one deliverable; returns the blob's file."""
    store = LocalHome(home).open_artifact_store()
    ref = store.put(b"the deliverable")

    async def append() -> None:
        events = LocalHome(home).open_event_store()
        try:
            drafts = [UserInput(goal="deliver"), Artifact(name="report.md", ref=ref, deliverable=True)]
            await events.append(SESSION, [EventDraft(payload=p) for p in drafts])
        finally:
            await events.close()

    asyncio.run(append())
    return Path(store.location(ref.sha256).removeprefix("file://"))


def test_a_corrupt_blob_is_named_with_what_to_do(tmp_path: Path) -> None:
    blob = record_artifact(tmp_path)
    blob.chmod(0o644)
    blob.write_bytes(b"tampered")
    line = one_error_line(tmp_path, "artifacts", "get", SESSION, "report.md", "-o", str(tmp_path / "out"))
    assert "corrupt" in line and "restore the file from a backup" in line
    assert not (tmp_path / "out").exists()


def test_a_missing_blob_is_named_with_what_to_do(tmp_path: Path) -> None:
    record_artifact(tmp_path).unlink()
    line = one_error_line(tmp_path, "artifacts", "get", SESSION, "report.md", "-o", str(tmp_path / "out"))
    assert "lost a blob" in line and "restore it from a backup" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),  # a directory
        (b"\xff\xfe binary", "not a text file"),
        (b"spec: [unclosed\n", "not valid YAML"),
        (b"- a list\n", "expected a YAML mapping"),
    ],
    ids=["directory", "binary", "broken-yaml", "not-a-mapping"],
)
def test_a_manifest_that_cannot_be_read_is_refused(
    tmp_path: Path, content: bytes | None, expected: str
) -> None:
    manifest = tmp_path / "session.yaml"
    if content is None:
        manifest.mkdir()
    else:
        manifest.write_bytes(content)
    assert expected in one_error_line(tmp_path / "home", "run", str(manifest))
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("damage", ["manifest", "plan"])
def test_a_stored_manifest_or_plan_that_cannot_be_used_stops_resume_with_advice(
    tmp_path: Path, damage: str
) -> None:
    home = LocalHome(tmp_path / "home")
    session = install_session(
        home, write_case(tmp_path / "case", Case("stored", valid_manifest("stored"), ""))
    )
    stored = home.manifest_file(session.session_id) if damage == "manifest" else home.plan_file("stored")
    stored.write_text("subagents: [unclosed\n")
    line = one_error_line(home.root, "resume", "stored")
    assert "the stored manifest of session stored cannot be used" in line and "restore it" in line


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("home-is-a-file", "is not a directory"),
        ("record-is-not-sqlite", "is not a session record"),
        ("artifacts-is-a-file", "is not a directory"),
    ],
)
def test_a_home_that_is_not_one_is_refused_before_anything_runs(
    tmp_path: Path, damage: str, expected: str
) -> None:
    home = tmp_path / "home"
    if damage == "home-is-a-file":
        home.write_text("not a home")
    else:
        home.mkdir()
        (home / ("events.db" if damage == "record-is-not-sqlite" else "artifacts")).write_text("not a record")
    before = {p: p.read_bytes() for p in [home, *home.rglob("*")] if p.is_file()}
    for args in (("sessions",), ("brief", "x"), ("run", str(tmp_path / "absent.yaml")), ("artifacts", "x")):
        line = one_error_line(home, *args)
        assert expected in line and "point --home" in line, (args, line)
    assert {p: p.read_bytes() for p in [home, *home.rglob("*")] if p.is_file()} == before
