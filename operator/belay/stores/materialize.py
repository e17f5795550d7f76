"""Writing declared artifacts into a workspace, for every artifact store.

This is where untrusted names (from a checkpoint's manifest) meet the file system, so every backend
shares this one implementation:
- every name is checked before anything is written: no absolute name, no `..`, no symlink on the
  way (a symlink anywhere under root, even one pointing inside it, is refused: following it is how
  a workspace gets written outside itself);
- every blob is known to exist before anything is written;
- the directories are then walked with `O_NOFOLLOW` file descriptors, so a symlink swapped in after
  the check is still refused, and each file is written to a temporary name, hash-checked, and renamed
  into place, so a workspace never holds a half-written or unverified file under a declared name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from belay.journal.events import DeclaredArtifact
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, ArtifactStore, UnsafePath


def safe_parts(name: str) -> tuple[str, ...]:
    """The components of a relative name that stays under its root, or UnsafePath."""
    if not name or "\x00" in name:
        raise UnsafePath(f"empty or NUL-containing artifact name: {name!r}")
    if name.startswith("/") or os.path.isabs(name):
        raise UnsafePath(f"absolute artifact name: {name!r}")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if any(part == ".." for part in parts):
        raise UnsafePath(f"artifact name escapes its root: {name!r}")
    if not parts:
        raise UnsafePath(f"artifact name names the root itself: {name!r}")
    return parts


def check_destination(root: Path, parts: tuple[str, ...], name: str) -> None:
    """UnsafePath if writing `parts` under root would go through a symlink or onto a directory."""
    current = root
    for index, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            raise UnsafePath(f"artifact name {name!r} goes through the symlink {current}")
        if not current.exists():
            return
        last = index == len(parts) - 1
        if not last and not current.is_dir():
            raise UnsafePath(f"artifact name {name!r}: {current} is not a directory")
        if last and current.is_dir():
            raise UnsafePath(f"artifact name {name!r}: {current} is a directory")


def materialize_from(store: ArtifactStore, entries: Sequence[DeclaredArtifact], root: Path) -> list[Path]:
    """Write each entry under root at its name from `store`, verifying every hash and size.

    Raises UnsafePath or ArtifactNotFound before writing anything; ArtifactCorrupted if stored bytes
    do not match (files already written for earlier entries stay; the damaged one is not written).
    """
    root = Path(root)
    planned = [(entry, safe_parts(entry.name)) for entry in entries]
    if root.is_symlink():
        raise UnsafePath(f"the workspace root {root} is a symlink")
    root.mkdir(parents=True, exist_ok=True)
    for entry, parts in planned:
        check_destination(root, parts, entry.name)
    for entry, _ in planned:
        if not store.exists(entry.sha256):
            raise ArtifactNotFound(f"declared artifact {entry.name!r} ({entry.sha256}) is not stored")
    written = []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for entry, parts in planned:
            _write_under(store, root_fd, parts, entry)
            written.append(root.joinpath(*parts))
    finally:
        os.close(root_fd)
    return written


def _write_under(store: ArtifactStore, root_fd: int, parts: tuple[str, ...], entry: DeclaredArtifact) -> None:
    directory_fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=directory_fd)
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(f"{entry.name!r}: {part!r} is a symlink or not a directory") from exc
                raise
            os.close(directory_fd)
            directory_fd = next_fd
        _write_file(store, directory_fd, parts[-1], entry)
    finally:
        os.close(directory_fd)


def _write_file(store: ArtifactStore, directory_fd: int, filename: str, entry: DeclaredArtifact) -> None:
    tmp_name = f".{filename}.{uuid.uuid4().hex}.partial"
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=directory_fd)
    try:
        hasher = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            # The store verifies too; checking here as well means no backend can skip it.
            for chunk in store.open(entry.sha256):
                hasher.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            if hasher.hexdigest() != entry.sha256:
                raise ArtifactCorrupted(
                    f"artifact {entry.sha256} for {entry.name!r} reads back as {hasher.hexdigest()}"
                )
            if size != entry.size:
                raise ArtifactCorrupted(f"{entry.name!r}: declared {entry.size} bytes, stored {size}")
            os.fchmod(out.fileno(), entry.mode & 0o777)  # never setuid/setgid/sticky from a manifest
            os.fsync(out.fileno())
        # rename replaces the directory entry itself, even a symlink swapped in: nothing is followed.
        os.rename(tmp_name, filename, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=directory_fd)
        raise
