"""Every command reads a damaged record the same way: the same one `error:` line from `brief`,
`events`, `sessions`, `artifacts`, `report`, `gc`, `resume` and a decision, whatever the damage
(8 KiB of random bytes over the pages of each table of events.db, an event edited, the file
emptied), because each opens the record through one function (`belay.local.record`). Before it,
a damaged page of the index of latest events was RecordCorrupt for `brief` and nothing for
`events`, and `sessions` told the person to resume a session `resume` refused."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.belay_cli import run_belay, tickets_in
from tests.cli.test_damaged_records import empty_it, overwrite_middle_pages
from tests.cli.test_gc_damaged_record import edit_an_event
from tests.harness.example import MANIFEST, SESSION


@pytest.fixture(scope="module")
def finished_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("finished") / "home"
    result = run_belay(home, "run", "--quiet", str(MANIFEST))
    assert result.returncode == 0, result.stderr
    return home


def overwrite_table(table: str) -> Callable[[Path], None]:
    """8 KiB of random bytes from the first page of `table` on (the table's root, and the page after)."""

    def damage(home: Path) -> None:
        record = home / "events.db"
        conn = sqlite3.connect(record)
        try:
            [(page_size,)] = conn.execute("PRAGMA page_size")
            [(root,)] = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        finally:
            conn.close()
        with record.open("r+b") as handle:
            handle.seek((root - 1) * page_size)
            handle.write(random.Random(table).randbytes(8192))

    return damage


DAMAGES: dict[str, Callable[[Path], None]] = {
    "latest-of-type-pages": overwrite_table("latest_of_type"),
    "lease-pages": overwrite_table("leases"),
    "head-pages": overwrite_table("sessions"),
    "claim-pages": overwrite_table("claims"),
    "event-pages": overwrite_middle_pages,
    "edited-event": edit_an_event,
    "emptied": empty_it,
}


def commands(tmp_path: Path) -> list[tuple[str, ...]]:
    return [
        ("brief", SESSION),
        ("brief", "--json", SESSION),
        ("events", SESSION),
        ("sessions",),
        ("artifacts", SESSION),
        ("artifacts", "get", SESSION, "report.md", "-o", str(tmp_path / "report.md")),
        ("report", SESSION, "-o", str(tmp_path / "report.html")),
        ("gc", "--grace", "0"),
        ("message", SESSION, "go on"),
        ("resume", "--quiet", SESSION),
    ]


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_command_says_the_same_line_of_the_same_damage(
    finished_home: Path, tmp_path: Path, damage: str
) -> None:
    home = tmp_path / "home"
    shutil.copytree(finished_home, home)
    DAMAGES[damage](home)
    log = (home / "sessions" / SESSION / "logs" / "harness.log").read_text()

    said: dict[str, str] = {}
    for command in commands(tmp_path):
        result = run_belay(home, *command)
        assert result.returncode != 0, f"{command}: answered as if nothing were wrong:\n{result.stdout}"
        assert "Traceback" not in result.stderr, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"{command}: {result.stderr}"
        said[" ".join(command[:2])] = lines[0]

    assert len(set(said.values())) == 1, "\n".join(f"{name}: {line}" for name, line in said.items())
    [line] = set(said.values())
    assert line.startswith("error: RecordCorrupt: ") and "restore" in line, line
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "report.html").exists()
    assert (
        tickets_in(home, SESSION) == 1
        and (home / "sessions" / SESSION / "logs" / "harness.log").read_text() == log
    )
