"""What a home collects once no record needs it (`belay gc`, and after every `belay resume`).

- Partial uploads: `artifacts/tmp/*`, a blob being written when its writer died.
- Orphan blobs: blobs in the home's own artifact store that no record names. The records' names
  come from every event of every session that stores its artifacts there
  (`belay.stores.retention.named_blobs`, with what the manifests and state snapshots they name
  name in turn), never from the fold, and a record that cannot be read (damaged, its store not
  answering) stops the collection of blobs altogether: nothing is removed on a guess.
- Superseded workspaces: every `workspace-<n>` (with its `run-<n>` and `egress-<n>`) of a
  subagent's sandbox but the newest and the one its server record names; a sandbox starts on a
  fresh workspace and is restored from the record, so an older one is never read again.

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
from belay.local.runtime import HomeError, LocalHome
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, EventStore, StoreError
from belay.stores.filesystem import FilesystemArtifactStore, check_address
from belay.stores.retention import hashes_in, named_blobs

# What separates a process's start as the kernel counts it (in clock ticks) from files' times.
MARGIN_S = 1.0
KINDS = ("partial upload", "orphan blob", "superseded workspace")


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


def shown_size(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


async def collect(home: LocalHome, *, dry_run: bool = False) -> Collection:
    """Remove (with `dry_run`, only find) what no record of the home needs."""
    found = Collection()
    if not home.root.is_dir():
        return found
    began = time.time()
    sessions = sorted(path.name for path in (home.root / "sessions").glob("*") if path.is_dir())
    if not home.artifacts_url and home.artifacts_dir.is_dir():
        store = FilesystemArtifactStore(home.artifacts_dir)
        keep = await _what_records_need(home, sessions, store, began, found)
        _collect_store(store, keep, found, dry_run)
    for session_id in sessions:
        _collect_workspaces(home, session_id, found, dry_run)
    return found


@dataclass(frozen=True)
class Keep:
    """What the collection of a store spares: the named blobs (None: every blob, as a record that
    must be read could not be), and whatever changed at or after `since`."""

    named: frozenset[str] | None
    since: float


async def _what_records_need(
    home: LocalHome, sessions: list[str], store: FilesystemArtifactStore, began: float, found: Collection
) -> Keep:
    """The blobs the records whose artifacts are in `store` name, and the time since which nothing
    is removed: the collection's start, or an earlier start of an attempt still alive."""
    since = began
    named: set[str] = set()
    stores: dict[str | None, EventStore] = {}
    alive = False
    try:
        for session_id, events_url in await _sessions_in(home, sessions, stores, store.root):
            if events_url not in stores:
                stores[events_url] = dataclasses.replace(home, events_url=events_url).open_event_store()
            record = stores[events_url]
            started = await _alive_since(record, session_id)
            alive = alive or started != float("inf")
            since = min(since, started)
            names = named_blobs(await record.read(session_id))
            named |= names.blobs | _named_by_documents(store, names.documents)
    except (StoreError, HomeError) as error:
        found.notes.append(f"no blob was removed: a record that names them cannot be read ({error})")
        return Keep(None, began)
    finally:
        for opened in stores.values():
            await opened.close()
    found.live_attempt = alive
    return Keep(frozenset(named), since - MARGIN_S)


async def _sessions_in(
    home: LocalHome, sessions: list[str], stores: dict[str | None, EventStore], artifacts_root: Path
) -> list[tuple[str, str | None]]:
    """(session, its event store's URL) for every session whose artifacts may be in the home's
    store: every session of the home's own record, and every session with an entry in the home
    whose artifacts are there (its record wherever its entry says)."""
    found: set[tuple[str, str | None]] = set()
    if home.events_url or home.events_db.is_file():
        stores[home.events_url] = home.open_event_store()
        found |= {
            (session_id, home.events_url) for session_id in await stores[home.events_url].list_sessions()
        }
    for session_id in sessions:
        own = home.for_session(session_id)
        if _is_directory(own.artifacts_url, artifacts_root):
            found.add((session_id, own.events_url))
    return sorted(found, key=lambda pair: (pair[0], pair[1] or ""))


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


def _collect_store(store: FilesystemArtifactStore, keep: Keep, found: Collection, dry_run: bool) -> None:
    for path in sorted((store.root / "tmp").glob("*")):
        _remove_if_old(path, keep.since, "partial upload", found, dry_run, path.unlink)
    for path in sorted((store.root / "blobs").glob("*/*")):
        with contextlib.suppress(ValueError, StoreError):
            sha256 = check_address(path.name)
            if keep.named is None or sha256 in keep.named:
                found.named += 1
                continue
            _remove_if_old(
                path, keep.since, "orphan blob", found, dry_run, functools.partial(store.delete, sha256)
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
