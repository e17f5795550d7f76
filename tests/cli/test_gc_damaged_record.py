"""`belay gc` on a home whose record is damaged removes nothing: with events.db emptied, deleted,
cut short, 8 KiB of its pages overwritten, or an event edited, and with the traces of the session
gone too, it ends with one `error:` line naming what cannot be read and how to get out, and every
blob and workspace stays. Once the copy of the record is put back, the deliverables are fetched.
A blob no record names goes only once it is older than the grace period."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.local.garbage import GRACE_S
from belay.stores.filesystem import FilesystemArtifactStore
from tests.belay_cli import run_belay
from tests.cli.test_damaged_records import cut_it_short, delete_it, empty_it, overwrite_middle_pages
from tests.harness.example import MANIFEST, SESSION

DELIVERABLES = ("report.md", "fix.patch")


@pytest.fixture(scope="module")
def finished_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("finished") / "home"
    result = run_belay(home, "run", "--quiet", str(MANIFEST))
    assert result.returncode == 0, result.stderr
    return home


def edit_an_event(home: Path) -> None:
    """One recorded event changed behind Belay's back: the hash chain no longer holds."""
    conn = sqlite3.connect(home / "events.db", isolation_level=None)
    try:
        conn.execute(
            "UPDATE events SET event_json = replace(event_json, 'confparse', 'confpar5e') "
            "WHERE session_id = ? AND seq = 1",
            (SESSION,),
        )
    finally:
        conn.close()


def emptied_and_traces_gone(home: Path) -> None:
    """events.db emptied and the session's whole directory removed: nothing says it ran but the
    blobs its record named."""
    empty_it(home)
    shutil.rmtree(home / "sessions" / SESSION)


def everything_in(home: Path) -> dict[str, bytes]:
    """Every file of the artifact store and the sandboxes, by path, with its bytes."""
    found = {}
    for top in (home / "artifacts", home / "sessions"):
        for path in sorted(top.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.suffix != ".lock":
                found[str(path.relative_to(home))] = path.read_bytes()
    return found


@pytest.mark.parametrize(
    "damage",
    [empty_it, delete_it, cut_it_short, overwrite_middle_pages, edit_an_event, emptied_and_traces_gone],
    ids=["emptied", "deleted", "cut-short", "pages", "edited", "emptied-no-traces"],
)
def test_gc_of_a_damaged_record_removes_nothing_and_the_restored_record_fetches_its_deliverables(
    finished_home: Path, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    home = tmp_path / "home"
    shutil.copytree(finished_home, home)
    backup = tmp_path / "events.db.backup"
    shutil.copyfile(home / "events.db", backup)
    # What a real collection would find to remove, were the record whole: a superseded workspace.
    old = home / "sessions" / SESSION / "sandboxes" / "researcher" / "workspace-0"
    old.mkdir()
    (old / "left.txt").write_text("from an attempt long gone\n")
    damage(home)
    before = everything_in(home)

    for command in (("gc", "--grace", "0"), ("gc",), ("gc", "--dry-run", "--grace", "0")):
        refused = run_belay(home, *command)

        assert refused.returncode != 0, refused.stdout
        assert "Traceback" not in refused.stderr, refused.stderr
        lines = refused.stderr.splitlines()
        # A damaged record in the words every command says it; any other refusal says gc's own.
        assert len(lines) == 1 and lines[0].startswith(
            ("error: RecordCorrupt: ", "error: nothing was collected: ")
        ), refused.stderr
        assert "restore" in lines[0].lower(), lines[0]
        assert refused.stdout == ""
        assert everything_in(home) == before, "the collection removed something"

    shutil.copyfile(backup, home / "events.db")
    for name in DELIVERABLES:
        target = tmp_path / name
        fetched = run_belay(home, "artifacts", "get", SESSION, name, "-o", str(target))
        assert fetched.returncode == 0, fetched.stderr
        assert f"sha256 {hashlib.sha256(target.read_bytes()).hexdigest()}" in fetched.stderr


def test_the_refusal_names_the_session_that_cannot_be_read(finished_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(finished_home, home)
    edit_an_event(home)
    refused = run_belay(home, "gc")
    assert f"session {SESSION!r}" in refused.stderr and "RecordCorrupt" in refused.stderr, refused.stderr
    empty_it(home)
    refused = run_belay(home, "gc")
    assert f"session {SESSION!r}" in refused.stderr and "holds no event of it" in refused.stderr
    shutil.rmtree(home / "sessions" / SESSION)  # nothing left that names the session but its blobs
    refused = run_belay(home, "gc")
    assert (
        refused.stderr.startswith("error: nothing was collected: ") and "holds no session" in refused.stderr
    )


def test_a_blob_no_record_names_goes_only_after_the_grace_period(finished_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(finished_home, home)
    store = FilesystemArtifactStore(home / "artifacts")
    young, old = (store.put(f"stored, never recorded: {age}\n".encode()) for age in ("young", "old"))
    now = time.time()
    os.utime(store.blob_path(young.sha256), (now - GRACE_S / 2, now - GRACE_S / 2))
    os.utime(store.blob_path(old.sha256), (now - GRACE_S - 60, now - GRACE_S - 60))

    collected = run_belay(home, "gc")

    assert collected.returncode == 0, collected.stderr
    assert [line.split()[-3] for line in collected.stdout.splitlines()[:-1]] == [
        str(store.blob_path(old.sha256))
    ], collected.stdout
    assert store.blob_path(young.sha256).exists() and not store.blob_path(old.sha256).exists()

    shorter = run_belay(home, "gc", "--grace", f"{GRACE_S / 4:g}s")

    assert shorter.returncode == 0, shorter.stderr
    assert not store.blob_path(young.sha256).exists()
    for name in DELIVERABLES:
        assert run_belay(home, "artifacts", "get", SESSION, name, "-o", str(tmp_path / name)).returncode == 0


@pytest.mark.parametrize("grace", ["soon", "-1h", "nan", "1e999d"])
def test_a_grace_that_is_no_duration_is_refused(tmp_path: Path, grace: str) -> None:
    result = run_belay(tmp_path / "home", "gc", "--grace", grace)
    assert result.returncode != 0
    assert result.stderr.startswith("error: --grace: ") and len(result.stderr.splitlines()) == 1
