"""The example's record put back behind what its harness did, as a bad disk or a restored backup
would: the harness killed (`kill -9`) right after its ticket was filed and the WAL then lost, or
`events.db` replaced by an earlier copy. Every command says RecordCorrupt naming the record's
high-water mark, instead of taking the shorter record for one that never went further (which a
resume would follow by filing the ticket again under the same mark). And once a person accepts
the loss (removes the mark, as the error says, or restores a whole old home, marks included),
the resumed harness probes before the unsafe call its record holds no request for: the ticket
already in the world is its result, and the ticket service still holds one."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from belay.journal.events import OperationOutcomeEvent, ToolResultEvent
from belay.stores.sqlite.marks import marks_directory
from tests.belay_cli import completed, read_events, run_belay, run_until, tickets_in
from tests.cli.test_damaged_records import assert_one_line, harness_log
from tests.harness.example import MANIFEST, SESSION

TICKET = "researcher.diagnose.4"  # create_ticket: unsafe
FILED = f"tool_result:{TICKET}"  # the harness is killed right after recording the ticket filed
BEFORE_THE_TICKET = "tool_request:researcher.diagnose.1"
MARK_SAYS = ("events.marks/", "remove the mark")


def record_file(home: Path) -> Path:
    return home / "events.db"


def lose_the_wal(home: Path) -> None:
    for suffix in ("-wal", "-shm"):
        record_file(home).with_name("events.db" + suffix).unlink(missing_ok=True)


def backup(home: Path, into: Path) -> Path:
    """A whole copy of the record as it is now, taken as `sqlite3 events.db .backup` would."""
    into.mkdir(parents=True, exist_ok=True)
    copy = into / "events.db"
    source, target = sqlite3.connect(record_file(home)), sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return copy


def put_back(copy: Path, home: Path) -> None:
    lose_the_wal(home)
    shutil.copyfile(copy, record_file(home))


def last_seq_in_file(home: Path) -> int:
    conn = sqlite3.connect(f"file:{record_file(home)}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (SESSION,)).fetchone()
        return int(row[0]) if row is not None else 0
    finally:
        conn.close()


def checkpoint(home: Path) -> None:
    """The WAL moved into the main file, as the last writer's clean exit does."""
    conn = sqlite3.connect(record_file(home))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def mentions(copy: Path, text: str) -> int:
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        query = "SELECT count(*) FROM events WHERE instr(event_json, ?) > 0"
        return int(conn.execute(query, (text.encode(),)).fetchone()[0])
    finally:
        conn.close()


def assert_every_command_names_the_mark(home: Path) -> None:
    log_before = harness_log(home)
    for command in (
        ("brief", SESSION),
        ("events", SESSION),
        ("artifacts", SESSION),
        ("resume", "-q", SESSION),
    ):
        assert_one_line(run_belay(home, *command), *MARK_SAYS)
    listed = run_belay(home, "sessions")
    assert "RecordCorrupt" in listed.stdout, listed.stdout + listed.stderr
    assert tickets_in(home, SESSION) == 1, "the ticket was filed again"
    assert harness_log(home) == log_before, "an attempt ran on the record put back"


@pytest.mark.parametrize("earlier_attempt", [False, True], ids=["all-in-the-wal", "earlier-attempt-kept"])
def test_a_lost_wal_after_the_ticket_was_filed_is_record_corrupt_naming_the_mark(
    tmp_path: Path, earlier_attempt: bool
) -> None:
    home = tmp_path / "home"
    if earlier_attempt:  # an attempt killed before the ticket, its events then checkpointed
        reached, _ = run_until(home, ["run", "--quiet", str(MANIFEST)], BEFORE_THE_TICKET)
        assert reached
        checkpoint(home)
        reached, _ = run_until(home, ["resume", "--quiet", SESSION], FILED)
    else:
        reached, _ = run_until(home, ["run", "--quiet", str(MANIFEST)], FILED)
    assert reached
    assert tickets_in(home, SESSION) == 1
    # Not read before the WAL is lost: the last connection to close would checkpoint it.
    recorded = len(harness_log(home).splitlines())  # a line per event the harness recorded
    lose_the_wal(home)
    kept = last_seq_in_file(home)
    assert kept < recorded, "nothing was lost with the WAL: the test shows nothing"
    assert (kept > 0) == earlier_attempt
    assert_every_command_names_the_mark(home)


def test_an_older_copy_put_back_is_corrupt_and_once_accepted_the_ticket_is_not_filed_again(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    reached, _ = run_until(home, ["run", "--quiet", str(MANIFEST)], BEFORE_THE_TICKET)
    assert reached
    earlier = backup(home, tmp_path / "backup")
    reached, _ = run_until(home, ["resume", "--quiet", SESSION], FILED)
    assert reached
    assert tickets_in(home, SESSION) == 1

    put_back(earlier, home)
    assert not mentions(earlier, TICKET), "the copy already holds the ticket's request"
    assert_every_command_names_the_mark(home)

    # The loss accepted: the record goes on from the copy, which holds no request for the ticket.
    shutil.rmtree(marks_directory(record_file(home)))
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert tickets_in(home, SESSION) == 1, "the ticket was filed a second time"

    events = read_events(home, SESSION)
    assert completed(events)
    [outcome] = [
        e for e in events if isinstance(e, OperationOutcomeEvent) and e.payload.operation_id == TICKET
    ]
    assert outcome.payload.by == "probe" and outcome.payload.succeeded
    assert outcome.payload.effects == ("TICKET-1",)
    assert "holds no earlier request" in outcome.payload.detail
    [result] = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == TICKET]
    assert result.payload.ok and result.payload.output["id"] == "TICKET-1"
