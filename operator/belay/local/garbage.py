"""What a home collects once no record needs it (`belay gc`, and after every `belay resume`).

- Partial uploads: `artifacts/tmp/*`, a blob being written when its writer died.
- Orphan blobs: blobs in the home's own artifact store that no record names, older than a grace
  period (`GRACE_S`). The records' names come from every event of every session that stores its
  artifacts there (`belay.stores.retention.named_blobs`, with what the manifests and state
  snapshots they name name in turn), never from the fold.
- Superseded workspaces: every `workspace-<n>` (with its `run-<n>` and `egress-<n>`) of a
  subagent's sandbox but the newest and the one its server record names; a sandbox starts on a
  fresh workspace and is restored from the record, so an older one is never read again.

Nothing is collected on a guess. While any session of the home has a record that cannot be read
(RecordCorrupt, a damaged store, a store not answering), or the home shows a session ran whose
record holds no event of it (its harness log, sandboxes, tickets or lease), or the home's
own record is missing or empty while its artifact store holds blobs, the whole collection is
refused: a damaged record with the line every command says of it (`belay.local.record`), the rest
with `CollectionRefused`, naming the session and the way out. What it would remove may be all
that is left of that session's work once its record is restored from a backup.

A writer stores a blob before the event that names it, so nothing written since the collection
began, or since the start of any attempt still alive in the home, is removed: a blob such an
attempt is about to name (the artifact store touches a blob it is asked to store again) and a
partial upload it is writing are spared. A lease holder this machine cannot see (not a local
process) spares every unnamed blob. Only the home's own artifact store is collected: a shared
store (S3, `--artifacts`, `spec.stores`) may hold other homes' and clusters' blobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from belay.local.liveness import SERVER_RECORD, holder_alive, holder_process, sandbox_lock
from belay.local.record import check_store_file, read_session
from belay.local.runtime import HomeError, LocalHome
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, EventStore, RecordCorrupt, StoreError
from belay.stores.filesystem import FilesystemArtifactStore, check_address
from belay.stores.retention import hashes_in, named_blobs

# What separates a process's start as the kernel counts it (in clock ticks) from files' times.
MARGIN_S = 1.0
# How old a blob no readable record names must be before it goes. Some damage leaves no trace the
# collection can see (a record replaced by an older copy that never knew a later session, a session
# directory removed with it): the blobs of such a record look like orphans. A day leaves the person
# who notices the damage time to restore the record before its blobs are gone, as git keeps
# unreachable objects for a while; `belay gc --grace 0` collects at once.
GRACE_S = 24 * 3600.0
KINDS = ("partial upload", "orphan blob", "superseded workspace")


class CollectionRefused(HomeError):
    """The home shows a record the collection cannot read: nothing was removed."""


@dataclass(frozen=True)
class Removed:
    kind: str  # one of KINDS
    path: Path
    size: int


@dataclass
class Collection:
    removed: list[Removed] = field(default_factory=list)
    named: int = 0  # blobs kept because a record names them
    notes: list[str] = field(default_factory=list)  # what was not collected, and why
    # An attempt of the home may be alive: what was written since it started was kept.
    live_attempt: bool = False

    def summary(self, verb: str = "removed") -> str:
        """One line: what went, by kind, and how much."""
        parts = []
        for kind in KINDS:
            found = [r for r in self.removed if r.kind == kind]
            if found:
                plural = "s" if len(found) > 1 else ""
                parts.append(f"{len(found)} {kind}{plural} ({shown_size(sum(r.size for r in found))})")
        if not parts:
            return f"nothing to remove; kept {self.named} blobs the records name"
        total = shown_size(sum(r.size for r in self.removed))
        return f"{verb} {', '.join(parts)}: {total} in all; kept {self.named} blobs the records name"


DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float:
    """`90s`, `30m`, `12h`, `7d` or a number of seconds, in seconds; ValueError for anything else."""
    number, unit = text.strip(), ""
    if number and number[-1] in DURATION_UNITS:
        number, unit = number[:-1], number[-1]
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: write e.g. 0, 90s, 30m, 12h or 7d") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a duration: it must be 0 or more")
    return value * DURATION_UNITS[unit]


def shown_size(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


async def collect(home: LocalHome, *, dry_run: bool = False, grace_s: float = GRACE_S) -> Collection:
    """Remove (with `dry_run`, only find) what no record of the home needs. CollectionRefused,
    with nothing removed, while the home shows a record that cannot be read (see the module)."""
    found = Collection()
    if not home.root.is_dir():
        return found
    began = time.time()
    sessions = sorted(path.name for path in (home.root / "sessions").glob("*") if path.is_dir())
    own = None
    if not home.artifacts_url and home.artifacts_dir.is_dir():
        own = FilesystemArtifactStore(home.artifacts_dir)
    keep = await _what_records_need(home, sessions, own, began, found)
    if own is not None:
        _collect_store(own, keep, found, dry_run, began - grace_s)
    for session_id in sessions:
        _collect_workspaces(home, session_id, found, dry_run)
    return found


@dataclass(frozen=True)
class Keep:
    """What the collection of a store spares: the named blobs, and whatever changed at or after
    `since` (the grace period of unnamed blobs is the caller's)."""

    named: frozenset[str]
    since: float


async def _what_records_need(
    home: LocalHome,
    sessions: list[str],
    own: FilesystemArtifactStore | None,
    began: float,
    found: Collection,
) -> Keep:
    """The blobs the records whose artifacts are in the home's own store name, and the time since
    which nothing is removed: the collection's start, or an earlier start of an attempt still
    alive. Every record the home shows is read whole first: CollectionRefused when one cannot be."""
    since = began
    named: set[str] = set()
    stores: dict[str | None, EventStore] = {}
    alive = False
    session_id = ""
    try:
        check_store_file(home)
        own_record = await _own_record(home, stores)
        for session_id, events_url, artifacts_here in _sessions_of(home, sessions, own_record, own):
            if events_url not in stores:
                stores[events_url] = dataclasses.replace(home, events_url=events_url).open_event_store(
                    read_only=True
                )
            record = stores[events_url]
            # Opened as every command opens it, so a damaged record ends `gc` with the same line.
            await read_session(record, home.for_session(session_id), session_id)
            events = await record.read(session_id)
            if not events:
                await _refuse_if_leased(home, session_id, record)
            started = await _alive_since(record, session_id)
            alive = alive or started != float("inf")
            since = min(since, started)
            if own is not None and artifacts_here:
                names = named_blobs(events)
                named |= names.blobs | _named_by_documents(own, names.documents)
    except (CollectionRefused, RecordCorrupt):
        raise  # RecordCorrupt: in the store's own words, as every command says it
    except (StoreError, HomeError) as error:
        whose = f"session {session_id!r}" if session_id else f"the record {home.events_location}"
        raise CollectionRefused(f"{_REFUSED} {whose} cannot be read ({error}); {_WAY_OUT}") from None
    finally:
        for opened in stores.values():
            await opened.close()
    if own is not None and not own_record:
        _refuse_if_blobs_unnamed(home, own, named)
    found.live_attempt = alive
    return Keep(frozenset(named), since - MARGIN_S)


_REFUSED = "nothing was collected:"
_WAY_OUT = (
    "what a collection would remove may be all that is left of that session's work: restore its "
    "record first, then run `belay gc` again"
)


async def _own_record(home: LocalHome, stores: dict[str | None, EventStore]) -> list[str]:
    """The sessions of the home's own record (its events.db, or the `--events` store)."""
    if not home.events_url and not home.events_db.is_file():
        return []
    stores[home.events_url] = home.open_event_store(read_only=True)
    return await stores[home.events_url].list_sessions()


def _sessions_of(
    home: LocalHome, sessions: list[str], own_record: list[str], own: FilesystemArtifactStore | None
) -> list[tuple[str, str | None, bool]]:
    """(session, its event store's URL, whether its artifacts are in the home's own store) for
    every session of the home's own record and every session with an entry in the home (its
    record wherever its entry says)."""
    found: dict[tuple[str, str | None], bool] = {
        (session_id, home.events_url): home.artifacts_url is None for session_id in own_record
    }
    for session_id in sessions:
        entry = home.for_session(session_id)
        here = own is not None and _is_directory(entry.artifacts_url, own.root)
        found[(session_id, entry.events_url)] = found.get((session_id, entry.events_url), False) or here
    return [
        (s, url, here) for (s, url), here in sorted(found.items(), key=lambda i: (i[0][0], i[0][1] or ""))
    ]


async def _refuse_if_leased(home: LocalHome, session_id: str, record: EventStore) -> None:
    """CollectionRefused for a session that holds a lease in a record with no event of it (a home
    that ran it shows it by its harness log or sandboxes, which `read_session` refuses)."""
    lease = await record.current_lease(session_id)
    if lease is not None:
        raise CollectionRefused(
            f"{_REFUSED} session {session_id!r} holds lease {lease.number} ({lease.holder}) in "
            f"{home.for_session(session_id).events_location} but its record there has no event; {_WAY_OUT}"
        )


def _refuse_if_blobs_unnamed(home: LocalHome, own: FilesystemArtifactStore, named: set[str]) -> None:
    """CollectionRefused when the home's own record holds no session at all (its events.db
    missing or emptied) while its artifact store holds blobs no other record names: the record
    that named them is what is missing, not their need."""
    for path in (own.root / "blobs").glob("*/*"):
        if path.name not in named:
            raise CollectionRefused(
                f"{_REFUSED} {home.events_location} holds no session, but {own.root} holds blobs no "
                f"record names: the record was emptied or lost. Restore it from a backup, then run "
                f"`belay gc` again; if the blobs are truly needed by nothing, remove {own.root} yourself"
            )


def _is_directory(url: str | None, root: Path) -> bool:
    if url is None:
        return True
    parts = urlsplit(url)
    return parts.scheme == "file" and Path(unquote(parts.path)).resolve() == root.resolve()


async def _alive_since(record: EventStore, session_id: str) -> float:
    """When the session's attempt started, if it may still be alive (its lease holder's process
    exists, or is not one this machine can see: the epoch); infinity when none is."""
    lease = await record.current_lease(session_id)
    if lease is None or holder_alive(lease.holder) is False:
        return float("inf")
    process = holder_process(lease.holder)
    if process is None or process[1] is None:
        return 0.0
    return _boot_time() + process[1] / os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    """When the machine booted, on the wall clock: a process's start is counted from there."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def _named_by_documents(store: FilesystemArtifactStore, documents: frozenset[str]) -> set[str]:
    """What the named manifests and snapshot roots name. One that is gone or damaged protects
    nothing (a reader passes it over)."""
    named: set[str] = set()
    for sha256 in documents:
        with contextlib.suppress(ArtifactNotFound, ArtifactCorrupted):
            named |= hashes_in(store.get(sha256).decode(errors="replace"))
    return named


def _collect_store(
    store: FilesystemArtifactStore, keep: Keep, found: Collection, dry_run: bool, graced: float
) -> None:
    """Partial uploads older than `keep.since`; blobs no record names, older than that and than
    `graced` (the grace period's start)."""
    for path in sorted((store.root / "tmp").glob("*")):
        _remove_if_old(path, keep.since, "partial upload", found, dry_run, path.unlink)
    for path in sorted((store.root / "blobs").glob("*/*")):
        with contextlib.suppress(ValueError, StoreError):
            sha256 = check_address(path.name)
            if sha256 in keep.named:
                found.named += 1
                continue
            _remove_if_old(
                path,
                min(keep.since, graced),
                "orphan blob",
                found,
                dry_run,
                functools.partial(store.delete, sha256),
            )


def _remove_if_old(
    path: Path, since: float, kind: str, found: Collection, dry_run: bool, remove: Callable[[], object]
) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if info.st_mtime >= since or not stat.S_ISREG(info.st_mode):
        return
    if not dry_run:
        with contextlib.suppress(FileNotFoundError):
            remove()
    found.removed.append(Removed(kind, path, info.st_size))


def _collect_workspaces(home: LocalHome, session_id: str, found: Collection, dry_run: bool) -> None:
    """Every subagent's superseded workspaces, while no sandbox of the session is starting."""
    session_dir = home.session_dir(session_id)
    sandboxes = home.sandboxes_dir(session_id)
    if not sandboxes.is_dir():
        return
    with sandbox_lock(session_dir, exclusive=True) as taken:
        if not taken:
            found.notes.append(f"{session_id}: a sandbox is starting; its workspaces were left alone")
            return
        for sandbox_dir in sorted(path for path in sandboxes.iterdir() if path.is_dir()):
            for number in _superseded(sandbox_dir):
                workspace = sandbox_dir / f"workspace-{number}"
                size = _tree_size(workspace)
                if not dry_run:
                    for name in (f"workspace-{number}", f"run-{number}", f"egress-{number}"):
                        _remove_tree(sandbox_dir / name)
                found.removed.append(Removed("superseded workspace", workspace, size))


def _superseded(sandbox_dir: Path) -> list[int]:
    """The numbers of the workspaces neither newest nor named by the sandbox's server record."""
    numbers = sorted(
        int(path.name.removeprefix("workspace-"))
        for path in sandbox_dir.glob("workspace-*")
        if path.name.removeprefix("workspace-").isdigit() and path.is_dir() and not path.is_symlink()
    )
    in_use = {numbers[-1]} if numbers else set()
    with contextlib.suppress(OSError, ValueError):
        from belay.sandbox.local import ServerRecord

        record = ServerRecord.model_validate_json((sandbox_dir / SERVER_RECORD).read_text())
        in_use.add(int(Path(record.workspace).name.removeprefix("workspace-")))
    return [number for number in numbers if number not in in_use]


def _tree_size(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(directory) / name).lstat().st_size
    return total


def _remove_tree(path: Path) -> None:
    """A tree removed whole, including directories a sandbox's command made read-only."""

    def writable_and_again(function: Callable[[str], object], name: str, _: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            function(name)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=writable_and_again)
