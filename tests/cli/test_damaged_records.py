"""A finished record of the example session, damaged as bad luck would: the SQLite file emptied,
deleted, cut short, or 8 KiB of its pages overwritten with random bytes. Every command ends with
one `error:` line that says what is wrong and what to do, never a traceback; `resume` (and `run`
of the same manifest) never takes the damaged record for a new session, so nothing starts over as
attempt 1 and the ticket the session filed is not filed again."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.stores.sqlite.marks import marks_directory
from tests.belay_cli import run_belay, tickets_in
from tests.harness.example import MANIFEST, SESSION

Damage = Callable[[Path], None]


@pytest.fixture(scope="module")
def finished_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("finished") / "home"
    result = run_belay(home, "run", "--quiet", str(MANIFEST))
    assert result.returncode == 0, result.stderr
    assert tickets_in(home, SESSION) == 1
    return home


def copy_of(home: Path, into: Path) -> Path:
    copy = into / "home"
    shutil.copytree(home, copy)
    return copy


def empty_it(home: Path) -> None:
    """`truncate -s 0 events.db`"""
    with (home / "events.db").open("r+b") as record:
        record.truncate(0)


def delete_it(home: Path) -> None:
    (home / "events.db").unlink()


def cut_it_short(home: Path) -> None:
    """The file cut at half its length, as a copy interrupted halfway leaves it."""
    record = home / "events.db"
    with record.open("r+b") as handle:
        handle.truncate(record.stat().st_size // 2)


def overwrite_middle_pages(home: Path) -> None:
    """8 KiB of random bytes over the pages in the middle of the file, starting at the page that
    holds the middle event (found by its link in the hash chain, which only its stored bytes hold)."""
    record = home / "events.db"
    conn = sqlite3.connect(record)
    try:
        [(page_size,)] = conn.execute("PRAGMA page_size")
        [(link,)] = conn.execute(
            "SELECT substr(event_json, 11, 64) FROM events WHERE session_id = ? "
            "AND seq = (SELECT last_seq / 2 FROM sessions WHERE session_id = ?)",
            (SESSION, SESSION),
        )
    finally:
        conn.close()
    data = record.read_bytes()
    where = data.index(bytes(link))
    with record.open("r+b") as handle:
        handle.seek(where // page_size * page_size)
        handle.write(random.Random(36).randbytes(8192))


def assert_one_line(result: subprocess.CompletedProcess[str], *wanted: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: RecordCorrupt: "), lines[0]
    for text in wanted:
        assert text in lines[0], lines[0]
    return lines[0]


def harness_log(home: Path) -> str:
    return (home / "sessions" / SESSION / "logs" / "harness.log").read_text()


def assert_nothing_started_over(home: Path, log_before: str) -> None:
    """No new attempt recorded anything (the harness log, a line per event, is as it was), and
    the ticket service filed nothing more."""
    assert tickets_in(home, SESSION) == 1, "the ticket was filed again"
    assert harness_log(home) == log_before, "an attempt ran on the damaged record"


@pytest.mark.parametrize("damage", [empty_it, delete_it], ids=["emptied", "deleted"])
def test_a_record_emptied_or_lost_is_corrupt_not_a_new_session(tmp_path: Path, damage: Damage) -> None:
    home = tmp_path / "home"  # its own, not a copy: `run` of the same manifest is the same session
    assert run_belay(home, "run", "--quiet", str(MANIFEST)).returncode == 0
    log_before = harness_log(home)
    damage(home)
    said = "holds no event of it, but this home ran it"
    starts = [
        run_belay(home, *command) for command in (("resume", "-q", SESSION), ("run", "-q", str(MANIFEST)))
    ]
    assert_nothing_started_over(home, log_before)
    for started in starts:
        assert_one_line(started, said, "a new attempt would start it over")
    for command in (("brief", SESSION), ("events", SESSION), ("artifacts", SESSION)):
        assert_one_line(run_belay(home, *command), said, "restore the store from a backup")
    listed = run_belay(home, "sessions")
    assert_one_line(listed, said)
    assert "RecordCorrupt" in listed.stdout  # its row, as for a record that fails its chain
    assert not (home / "events.db").exists() or (home / "events.db").stat().st_size == 0


def test_a_session_whose_run_recorded_nothing_is_still_only_unknown(tmp_path: Path) -> None:
    """Its manifest alone is no sign that the home ran it (`belay run` writes it first): a run
    refused before its first event leaves a session that is unknown, not corrupt."""
    home = tmp_path / "home"
    assert run_belay(home, "run", "--quiet", str(MANIFEST)).returncode == 0
    shutil.rmtree(home / "sessions" / SESSION / "logs")
    shutil.rmtree(home / "sessions" / SESSION / "sandboxes")
    shutil.rmtree(marks_directory(home / "events.db"))  # a run that recorded nothing left none
    (home / "sessions" / SESSION / "tickets.json").unlink()
    empty_it(home)
    result = run_belay(home, "brief", SESSION)
    assert result.returncode != 0 and result.stderr.startswith("error: unknown session"), result.stderr


DAMAGED_FILE = ("is damaged (SQLite: ", "restore it from a backup", ".recover")


@pytest.mark.parametrize("damage", [cut_it_short, overwrite_middle_pages], ids=["cut-short", "pages"])
def test_a_damaged_file_is_one_line_naming_it_from_every_command(
    finished_home: Path, tmp_path: Path, damage: Damage
) -> None:
    home = copy_of(finished_home, tmp_path)
    log_before = harness_log(home)
    damage(home)
    commands = [
        ("brief", SESSION),
        ("brief", "--json", SESSION),
        ("events", SESSION),
        ("sessions",),
        ("artifacts", SESSION),
        ("report", SESSION, "--output", str(tmp_path / "report.html")),
        ("approve", SESSION, "review-report.md"),
        ("resume", "--quiet", SESSION),
    ]
    for command in commands:
        line = assert_one_line(run_belay(home, *command), *DAMAGED_FILE)
        assert f"{home / 'events.db'} is damaged" in line, line
    assert_nothing_started_over(home, log_before)
