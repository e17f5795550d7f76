"""The home is its owner's alone, whatever the umask `belay` is started with: under umask 022 (every
local user may read what it makes by default), a scripted session and a managed one on its local
stand-in leave a home that is 0700, every directory in it 0700 and every file 0600 or stricter:
the record and its WAL, the blobs, the manifests and plans, the logs, the liveness and sandbox
records, the ticket service's and the stand-in's state.

A workspace is a sandbox's own machine: its directory is 0700 (owned by the sandbox's uid when
`belay` runs as root), and what the sandbox's commands make in it has the usual modes (umask 022),
reachable by nobody else through the 0700 directories above it."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.journal.events import Actor, EventDraft, UserInput
from belay.stores.filesystem import FilesystemArtifactStore
from belay.stores.sqlite import SqliteEventStore
from tests.belay_cli import run_belay, stop_session_standins
from tests.executors.example import example_manifest
from tests.harness.example import MANIFEST

WORKSPACE = re.compile(r"workspace-\d+")
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


@pytest.fixture
def umask_022() -> Iterator[None]:
    """Every process the test starts inherits umask 022."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def in_a_workspace(home: Path, path: Path) -> bool:
    """Whether `path` lies inside a sandbox's workspace (not the workspace directory itself)."""
    parts = path.relative_to(home).parts
    return any(WORKSPACE.fullmatch(part) and index < len(parts) - 1 for index, part in enumerate(parts))


def too_open(home: Path) -> list[str]:
    """Every directory and file under the home (the home included) that another user could read,
    write or enter, with its mode; workspaces' contents aside."""
    found = []
    for path in [home, *home.rglob("*")]:
        if in_a_workspace(home, path):
            continue
        info = path.lstat()
        if (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)) and stat.S_IMODE(info.st_mode) & 0o077:
            found.append(f"{path.relative_to(home)}: {stat.filemode(info.st_mode)}")
    return found


def test_under_umask_022_everything_in_the_home_is_its_owners_alone(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in PROVIDER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)  # the managed session asks its local stand-in
    home = tmp_path / "home"
    control = tmp_path / "control"
    control.mkdir()
    assert stat.S_IMODE(control.stat().st_mode) == 0o755  # what the umask makes of anything else
    try:
        scripted = run_belay(home, "run", "--quiet", str(MANIFEST))
        assert scripted.returncode == 0, scripted.stderr
        managed = run_belay(home, "run", "--quiet", str(example_manifest(tmp_path / "managed")))
        assert managed.returncode == 0, managed.stderr
        names = {path.relative_to(home).as_posix() for path in home.rglob("*")}
        # What the check covers is there: the record, blobs, liveness, tickets, logs, the stand-in.
        for expected in (
            "events.db",
            "sessions/parser-fix/session.yaml",
            "sessions/parser-fix/plan.yaml",
            "sessions/parser-fix/tickets.json",
            "sessions/parser-fix/sandboxes.lock",
            "sessions/parser-fix/logs/harness.log",
            "sessions/parser-review/standins/openai-agents/standin.log",
        ):
            assert expected in names, sorted(names)
        assert any(name.startswith("artifacts/blobs/") for name in names)
        assert any(name.endswith("/server-1.log") for name in names)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert too_open(home) == []
        workspaces = [path for path in home.rglob("workspace-*") if WORKSPACE.fullmatch(path.name)]
        assert workspaces and all(stat.S_IMODE(path.stat().st_mode) == 0o700 for path in workspaces)
    finally:
        stop_session_standins(home)


def test_a_home_made_open_before_is_closed_by_the_next_command(tmp_path: Path, umask_022: None) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / "notes.txt").write_text("made by an earlier version\n")
    result = run_belay(home, "sessions")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


async def test_the_stores_are_private_on_their_own_whatever_the_umask(
    tmp_path: Path, umask_022: None
) -> None:
    """A `sqlite://` record and a `file://` artifact store outside any home (the operator's, a
    shared directory) are created private by the stores themselves, under umask 022."""
    records = SqliteEventStore(tmp_path / "records" / "events.db")
    await records.append("s", [EventDraft(payload=UserInput(goal="private"), actor=Actor(kind="user"))])
    blobs = FilesystemArtifactStore(tmp_path / "blobs")
    ref = blobs.put(b"private bytes\n")
    modes = {
        path.relative_to(tmp_path).as_posix(): stat.S_IMODE(path.stat().st_mode)
        for path in [*(tmp_path / "records").iterdir(), *(tmp_path / "blobs").rglob("*")]
    }
    await records.close()
    assert modes["records/events.db"] == 0o600
    assert modes.get("records/events.db-wal", 0o600) == 0o600
    assert modes[f"blobs/blobs/{ref.sha256[:2]}/{ref.sha256}"] == 0o400
    directories = ["blobs/blobs", "blobs/tmp", f"blobs/blobs/{ref.sha256[:2]}"]
    assert [modes[name] for name in directories] == [0o700] * 3
    assert stat.S_IMODE((tmp_path / "blobs").stat().st_mode) == 0o700
