"""A finished record of the example session, changed behind Belay's back by editing its SQLite file:
an event edited, an event forged into the middle, an event deleted, the tail cut off. `brief`,
`resume` and `events` each end with one `error:` line, RecordCorrupt at the seq where the record
stops being what was written; never a traceback, never a silent pass."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.journal.events import Lifecycle, LifecycleKind
from belay.stores.integrity import GENESIS, RECORD_KEY_FILE_ENV, Chain
from belay.stores.sqlite.marks import Mark, RecordMarks
from tests.belay_cli import run_belay
from tests.harness.example import MANIFEST, SESSION

FIELDS_START = len(b'{"chain":"') + 64 + 2  # where the stored envelope's fields begin
Tampering = Callable[[sqlite3.Connection, int], int]  # (record, last seq) -> the seq it breaks


@pytest.fixture(scope="module")
def finished_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("finished") / "home"
    result = run_belay(home, "run", "--quiet", str(MANIFEST))
    assert result.returncode == 0, result.stderr
    return home


def copy_of(home: Path, into: Path) -> Path:
    copy = into / "home"
    shutil.copytree(home, copy)
    return copy


def tamper(home: Path, change: Tampering) -> int:
    conn = sqlite3.connect(home / "events.db", isolation_level=None)
    try:
        [(last_seq,)] = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (SESSION,))
        return change(conn, last_seq)
    finally:
        conn.close()


def stored(conn: sqlite3.Connection, seq: int) -> bytes:
    [(value,)] = conn.execute(
        "SELECT event_json FROM events WHERE session_id = ? AND seq = ?", (SESSION, seq)
    )
    return bytes(value)


def edit_a_payload(conn: sqlite3.Connection, last_seq: int) -> int:
    """A tool result in the middle says something else."""
    [(seq,)] = conn.execute(
        "SELECT min(seq) FROM events WHERE session_id = ? AND type = 'tool_result' AND seq > ?",
        (SESSION, last_seq // 2),
    )
    value = json.loads(stored(conn, seq))
    value["payload"]["output"] = {"stdout": "all good"}
    conn.execute(
        "UPDATE events SET event_json = ? WHERE session_id = ? AND seq = ?",
        (json.dumps(value, separators=(",", ":")).encode(), SESSION, seq),
    )
    return int(seq)


def forge_an_event_into_the_middle(conn: sqlite3.Connection, last_seq: int) -> int:
    """A session_completed slipped in at seq 20, every later event moved up one, the head too;
    its chain field copied from the event it displaced."""
    seq = 20
    conn.execute("UPDATE events SET seq = -seq - 1 WHERE session_id = ? AND seq >= ?", (SESSION, seq))
    conn.execute("UPDATE events SET seq = -seq WHERE session_id = ? AND seq < 0", (SESSION,))
    displaced = json.loads(stored(conn, seq + 1))
    forged = {
        "chain": displaced["chain"],
        "seq": seq,
        "session_id": SESSION,
        "created_at": displaced["created_at"],
        "idempotency_key": None,
        "parent_seq": None,
        "actor": displaced["actor"],
        "type": "lifecycle",
        "payload": Lifecycle(kind=LifecycleKind.SESSION_COMPLETED).model_dump(mode="json"),
    }
    conn.execute(
        "INSERT INTO events (session_id, seq, type, created_at, event_json) "
        "VALUES (?, ?, 'lifecycle', '', ?)",
        (SESSION, seq, json.dumps(forged, separators=(",", ":")).encode()),
    )
    conn.execute("UPDATE sessions SET last_seq = ? WHERE session_id = ?", (last_seq + 1, SESSION))
    return seq


def delete_a_middle_event(conn: sqlite3.Connection, last_seq: int) -> int:
    seq = last_seq // 2
    conn.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (SESSION, seq))
    return seq


def cut_off_the_tail(conn: sqlite3.Connection, last_seq: int) -> int:
    """The last three events (the session's end among them) removed."""
    conn.execute("DELETE FROM events WHERE session_id = ? AND seq > ?", (SESSION, last_seq - 3))
    return last_seq - 2


def assert_one_corrupt_line(result: subprocess.CompletedProcess[str], seq: int) -> None:
    assert result.returncode != 0
    stderr = result.stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: RecordCorrupt: ") and f"at seq {seq}:" in lines[0], lines[0]
    assert "restore the store from a backup" in lines[0]


@pytest.mark.parametrize(
    "change", [edit_a_payload, forge_an_event_into_the_middle, delete_a_middle_event, cut_off_the_tail]
)
def test_brief_resume_and_events_refuse_a_tampered_record(
    finished_home: Path, tmp_path: Path, change: Tampering
) -> None:
    home = copy_of(finished_home, tmp_path)
    assert run_belay(home, "brief", SESSION).returncode == 0  # intact before
    seq = tamper(home, change)
    for command in (("brief", SESSION), ("resume", "--quiet", SESSION), ("events", SESSION)):
        assert_one_corrupt_line(run_belay(home, *command), seq)
    listed = run_belay(home, "sessions")
    assert_one_corrupt_line(listed, seq)
    assert "RecordCorrupt" in listed.stdout  # the row of the session, beside the others


def test_approving_on_a_tampered_record_is_refused_too(finished_home: Path, tmp_path: Path) -> None:
    home = copy_of(finished_home, tmp_path)
    seq = tamper(home, delete_a_middle_event)
    assert_one_corrupt_line(run_belay(home, "approve", SESSION, "approve-implementer.publish.3"), seq)


def recompute_from(conn: sqlite3.Connection, first_seq: int, chain: Chain) -> None:
    """What someone who can write the file and knows how links are made does after an edit:
    relink every event from `first_seq` on, and reseal the head."""
    rows = conn.execute(
        "SELECT seq, event_json FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
        (SESSION, first_seq - 1),
    ).fetchall()
    link = GENESIS if first_seq == 1 else bytes(rows[0][1])[10:74]
    for seq, value in rows[1:] if first_seq > 1 else rows:
        relinked, link = chain.stored(link, bytes(value)[FIELDS_START:])
        conn.execute(
            "UPDATE events SET event_json = ? WHERE session_id = ? AND seq = ?", (relinked, SESSION, seq)
        )
    last = rows[-1][0]
    conn.execute(
        "UPDATE sessions SET chain = ?, seal = ? WHERE session_id = ?",
        (link, chain.seal(last, link), SESSION),
    )


def reseal_the_mark(conn: sqlite3.Connection, chain: Chain) -> None:
    """The record's high-water mark made again for the relinked head, as a careful forger would."""
    [(last, link)] = conn.execute("SELECT last_seq, chain FROM sessions WHERE session_id = ?", (SESSION,))
    [(_, _, record)] = conn.execute("PRAGMA database_list")
    marks = RecordMarks(Path(record), chain)
    marks.remove(SESSION)
    marks.advance(SESSION, Mark(0, last, bytes(link)))


def test_with_a_record_key_a_relinked_edit_is_refused_and_without_one_it_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record key is the wall against a forger who recomputes the chain: the same careful
    edit passes unnoticed when the record has no key (the wall switched off), and is refused at
    the edited seq when it has one."""
    key = tmp_path / "record.key"
    key.write_bytes(b"an example record key of more than 32 bytes\n")
    for keyed in (False, True):
        if keyed:
            monkeypatch.setenv(RECORD_KEY_FILE_ENV, str(key))
        home = tmp_path / f"keyed-{keyed}"
        assert run_belay(home, "run", "--quiet", str(MANIFEST)).returncode == 0

        def careful_edit(conn: sqlite3.Connection, last_seq: int) -> int:
            seq = edit_a_payload(conn, last_seq)
            recompute_from(conn, seq, Chain(None))  # without the key, the empty key is all there is
            reseal_the_mark(conn, Chain(None))
            return seq

        seq = tamper(home, careful_edit)
        events = run_belay(home, "events", "--json", SESSION)
        if keyed:
            assert_one_corrupt_line(events, seq)
        else:
            assert events.returncode == 0 and '"all good"' in events.stdout
