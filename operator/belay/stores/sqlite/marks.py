"""The high-water mark of each session's record, kept beside the SQLite file and outside it.

The hash chain and the head catch every change made to a record inside the file, but not the
file put back to an earlier state of itself that is whole: a lost WAL (its commits gone with it,
the main file still consistent), or an older copy of `events.db` restored. Read alone, such a
record is one that never went further, and a new attempt would do again what the lost events
recorded, filing the same ticket a second time. So each session's record also has a mark in a
file of its own, which neither takes back with the database:

    <directory of the database>/<database name without suffix>.marks/<sha256 of the session id>

It holds the deletion count of the session id (its generation), the last seq and the link of
that event in the hash chain, sealed with the record key like the head. The writer writes it
after the commit of each transaction that holds a durable append, and fsyncs it before that
append is acknowledged: a crash can leave the mark behind the record (by the relaxed appends
since the last durable one, or by the append whose mark was being written), never ahead of it.

The file has two slots. A write goes to the slot not holding the current mark, under an
exclusive lock of the file, and only when it moves the mark forward: a write torn by a crash
spoils that slot alone, and the other still holds the mark before it. A reader takes the
furthest slot whose seal holds; a spoiled slot is passed over. The file is made whole (its first
mark written and fsynced under a temporary name, then renamed into place), so a mark file that
exists always held a mark: one of the wrong size, or with no slot whose seal holds (zeroed, cut
short, overwritten), is damage, `RecordCorrupt` like a record behind its mark, never "no mark yet".

A record found behind its mark is `RecordCorrupt` naming the mark. Deleting the session removes
its mark (after the deletion's commit; a mark left by a deletion cut short is of an earlier
generation, and passed over).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from belay.stores.base import RecordCorrupt
from belay.stores.integrity import Chain, link_of

SLOT_BYTES = 256
_MAGIC = b"belay-mark-v1"


@dataclass(frozen=True, slots=True, order=True)
class Mark:
    """How far a session's record reached at a durable commit."""

    generation: int  # the session id's deletion count then
    seq: int
    link: bytes


def marks_directory(database: Path) -> Path:
    # Not `events.db-...`: a copy of `events.db*` put back from a backup must not bring its marks.
    return database.with_name(f"{database.stem}.marks")


class RecordMarks:
    """The marks of every session recorded in one SQLite file."""

    def __init__(self, database: Path, chain: Chain) -> None:
        self.database = database
        self.directory = marks_directory(database)
        self.chain = chain

    def path(self, session_id: str) -> Path:
        return self.directory / hashlib.sha256(session_id.encode()).hexdigest()

    def _seal(self, session_id: str, generation: int, seq: int, link: bytes) -> bytes:
        return self.chain.mac(b"mark:%s:%d:%d:%s" % (session_id.encode(), generation, seq, link))

    def _slot(self, session_id: str, mark: Mark) -> bytes:
        seal = self._seal(session_id, mark.generation, mark.seq, mark.link)
        line = b" ".join((_MAGIC, b"%d" % mark.generation, b"%d" % mark.seq, mark.link, seal)) + b"\n"
        return line.ljust(SLOT_BYTES, b"\0")

    def _parsed(self, session_id: str, slot: bytes) -> Mark | None:
        fields = slot.rstrip(b"\0").split()
        if len(fields) != 5 or fields[0] != _MAGIC:
            return None
        try:
            generation, seq = int(fields[1]), int(fields[2])
        except ValueError:
            return None
        link, seal = fields[3], fields[4]
        if not hmac.compare_digest(seal, self._seal(session_id, generation, seq, link)):
            return None
        return Mark(generation, seq, link)

    def _slots(self, session_id: str, data: bytes) -> list[Mark | None]:
        return [self._parsed(session_id, data[start : start + SLOT_BYTES]) for start in (0, SLOT_BYTES)]

    def read(self, session_id: str) -> Mark | None:
        """The session's mark: the furthest slot whose seal holds; None when it has no mark file.
        RecordCorrupt for a mark file that holds no mark (see the module docstring)."""
        path = self.path(session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        marks = [mark for mark in self._slots(session_id, data) if mark is not None]
        whole = len(data) == 2 * SLOT_BYTES
        if not whole or not marks:
            what = "no sealed mark" if whole else f"{len(data)} bytes, not {2 * SLOT_BYTES}"
            raise RecordCorrupt(
                session_id,
                1,
                f"its mark {path} is damaged ({what}: zeroed, cut short or overwritten), so how far its "
                f"record reached cannot be known; {way_out_of(self.database, path)}",
            )
        return max(marks)

    def advance(self, session_id: str, mark: Mark) -> None:
        """Move the session's mark forward to `mark` (never back), durably. Raises OSError."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.path(session_id)
        try:
            descriptor = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            if self._create(path, session_id, mark):
                return
            descriptor = os.open(path, os.O_RDWR)  # another writer made it meanwhile
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            slots = self._slots(session_id, os.pread(descriptor, 2 * SLOT_BYTES, 0))
            present = [(held, index) for index, held in enumerate(slots) if held is not None]
            if present and max(present)[0] >= mark:
                return
            # The slot not holding the furthest mark, so a torn write leaves that one whole.
            target = 1 - max(present)[1] if present else 0
            os.pwrite(descriptor, self._slot(session_id, mark), target * SLOT_BYTES)
            os.fdatasync(descriptor)
        finally:
            os.close(descriptor)  # releases the lock

    def _create(self, path: Path, session_id: str, mark: Mark) -> bool:
        """Make the mark file whole under a temporary name and link it into place; False when
        another writer made it first. A crash leaves no mark file, or a whole one."""
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(descriptor, self._slot(session_id, mark) + b"\0" * SLOT_BYTES)
            os.fdatasync(descriptor)
        finally:
            os.close(descriptor)
        try:
            os.link(temporary, path)  # never replaces a mark file another writer made
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        _sync_directory(self.directory)
        return True

    def remove(self, session_id: str) -> None:
        self.path(session_id).unlink(missing_ok=True)


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def way_out_of(database: Path, mark: Path) -> str:
    """The one way out of a record its mark says is behind, or of a damaged mark."""
    return (
        f"put back what holds the rest (the lost {database.name}-wal beside {database}, or the latest "
        f"backup), or, to accept the loss and go on from the record as it is, remove the mark {mark} "
        "(what the lost events did outside the record may then be done again, except what a reconcile "
        "probe finds)"
    )


def generation(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT count FROM deletions WHERE session_id = ?", (session_id,)).fetchone()
    return int(row[0]) if row is not None else 0


def behind_mark(
    conn: sqlite3.Connection, session_id: str, mark: Mark, where: Path, database: Path
) -> RecordCorrupt | None:
    """RecordCorrupt when the record, as `conn` reads it now, is behind `mark` (kept in `where`):
    shorter, or holding another event at the mark's seq. Run in one read transaction (or the
    writer's); the mark must have been read before it began, so the commit it records is in it."""
    current = generation(conn, session_id)
    if current > mark.generation:
        return None  # a mark of the session id before a deletion
    row = conn.execute("SELECT last_seq, chain FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    last = int(row[0]) if row is not None else 0
    way_out = way_out_of(database, where)
    if current < mark.generation:
        return RecordCorrupt(
            session_id,
            1,
            f"{database} holds the session as it was before it was deleted and started again (its "
            f"mark {where} records deletion {mark.generation}, the record {current}): an older copy "
            f"was put back; {way_out}",
        )
    if last == 0:
        return RecordCorrupt(
            session_id,
            1,
            f"{database} holds no event of it, but this home ran it (its mark {where} records seq "
            f"{mark.seq}): its record was emptied, cut short or lost, and a new attempt would start "
            f"it over and repeat what it did; {way_out}",
        )
    if last < mark.seq:
        return RecordCorrupt(
            session_id,
            last + 1,
            f"the record ends at seq {last}, but its mark {where} records seq {mark.seq} written: "
            f"the events after seq {last} were lost (a lost WAL, or an older copy of {database} put "
            f"back), and a new attempt would repeat what they did; {way_out}",
        )
    if last == mark.seq:
        link = row[1] if isinstance(row[1], bytes) else str(row[1]).encode()
    else:
        stored = conn.execute(
            "SELECT event_json FROM events WHERE session_id = ? AND seq = ?", (session_id, mark.seq)
        ).fetchone()
        link = b"" if stored is None else link_of(session_id, mark.seq, _as_bytes(stored[0]))
    if not hmac.compare_digest(link, mark.link):
        return RecordCorrupt(
            session_id,
            mark.seq,
            f"the event at seq {mark.seq} is not the one its mark {where} records: the record was put "
            f"back to an earlier state and written on since; {way_out}",
        )
    return None


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
