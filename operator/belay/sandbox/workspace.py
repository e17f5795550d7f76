"""File operations confined to one workspace directory.

Every name is relative to the workspace. A name is refused before anything is touched when it is
absolute, contains `..`, or resolves (through a symlink anywhere on the way) outside the workspace.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO

from belay.journal.events import DeclaredArtifact
from belay.stores.base import UnsafePath

DEFAULT_FILE_MODE = 0o644
# The largest file the harness takes out of (or puts into) a workspace: the sandbox's limit on one
# file put, so whatever a checkpoint records can be restored.
MAX_FILE_BYTES = 1024 * 1024 * 1024
# How much of a file is held at once while it is hashed or streamed.
CHUNK_BYTES = 1024 * 1024


class WorkspaceRefusal(UnsafePath):
    """The workspace's content is not something the harness may take: the file at `path` breaks
    `rule` (one of REFUSAL_RULES). What is in a workspace is the agent's doing, so this is an answer
    to the agent (its step fails and says why), never a fault of the harness."""

    def __init__(self, path: str, rule: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.rule = rule


# Each way a declared file can be refused, and what it means.
REFUSAL_RULES: dict[str, str] = {
    "escape": "the path leaves the workspace",
    "symlink": "a declared file must be a regular file, not a symbolic link",
    "hard-link": "a declared file must not be a hard link (its content could be another file's)",
    "fifo": "a declared file must be a regular file, not a named pipe",
    "device": "a declared file must be a regular file, not a device",
    "socket": "a declared file must be a regular file, not a socket",
    "not-a-file": "a declared file must be a regular file",
    "size": f"a declared file may hold at most {MAX_FILE_BYTES} bytes",
    "changed": "the file changed while it was read",
    "unreadable": "a declared file must be readable by the sandbox's user (its mode forbids it)",
    "quota": "the workspace is out of disk space or over its quota",
}


def refusal(name: str, rule: str) -> WorkspaceRefusal:
    return WorkspaceRefusal(name, rule, f"path {name!r} refused ({rule}): {REFUSAL_RULES[rule]}")


def check_relative_name(name: str) -> PurePosixPath:
    """The lexical check, needing no filesystem: a non-empty relative path without `..`."""
    if not name or "\x00" in name:
        raise UnsafePath(f"invalid path {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("\\"):
        raise UnsafePath(f"absolute path {name!r} is not allowed; paths are relative to the workspace")
    if ".." in path.parts:
        raise UnsafePath(f"path {name!r} escapes the workspace ('..' is not allowed)")
    return path


def resolve_in_workspace(root: Path, name: str) -> Path:
    """The real path of `name` under `root`, refusing anything that would land outside it."""
    relative = check_relative_name(name)
    real_root = root.resolve()
    candidate = (real_root / relative).resolve()
    if candidate != real_root and not candidate.is_relative_to(real_root):
        raise UnsafePath(f"path {name!r} escapes the workspace through a symlink")
    return candidate


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class TooLarge(ValueError):
    """A file above what the reader may take; never read past the cap."""

    def __init__(self, name: str, size: int, cap: int) -> None:
        super().__init__(f"{name!r} is {size} bytes, above the read_file cap of {cap} bytes")
        self.name = name
        self.size = size
        self.cap = cap


def open_file(root: Path, name: str) -> tuple[IO[bytes], int]:
    """A workspace file opened for reading, and its size when it was opened."""
    path = resolve_in_workspace(root, name)
    if not path.is_file():
        raise FileNotFoundError(f"no file {name!r} in the workspace")
    # A command running meanwhile may swap in a link (which the resolved path must not follow) or a
    # pipe (which would block the reader): what is opened is checked, not what was looked at.
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except PermissionError:
        raise refusal(name, "unreadable") from None
    except OSError:
        raise refusal(name, "changed") from None
    opened = os.fstat(descriptor)
    if not stat.S_ISREG(opened.st_mode):
        os.close(descriptor)
        raise refusal(name, "changed")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb"), opened.st_size


def read_bytes(root: Path, name: str, cap: int) -> bytes:
    """The file's bytes, at most `cap` of them: a larger file (or one that grows past it while it
    is read) is TooLarge, and no more than `cap + 1` bytes are ever held."""
    handle, size = open_file(root, name)
    with handle:
        if size > cap:
            raise TooLarge(name, size, cap)
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(name, len(data), cap)
    return data


def hashed_file(root: Path, name: str) -> tuple[IO[bytes], int, str]:
    """A workspace file opened, its size and the sha256 of that many bytes, positioned at its
    start: what a download streams (a file that changes meanwhile fails the reader's hash check;
    one that grows is sent as it was when opened)."""
    handle, size = open_file(root, name)
    try:
        hasher, remaining = hashlib.sha256(), size
        while remaining > 0 and (chunk := handle.read(min(CHUNK_BYTES, remaining))):
            hasher.update(chunk)
            remaining -= len(chunk)
        handle.seek(0)
    except BaseException:
        handle.close()
        raise
    return handle, size - remaining, hasher.hexdigest()


class Staged:
    """A file being written under a hidden temporary name at the workspace's root (the same
    filesystem as its destination): `commit` makes its directories and renames it into place,
    complete, and `discard` removes it, leaving nothing. The bytes are written once, where they will
    stay, so a file takes its own size on the sandbox's disk, never twice."""

    def __init__(self, root: Path, name: str, mode: int | None = None) -> None:
        path = resolve_in_workspace(root, name)
        if path == root.resolve():
            raise UnsafePath("cannot write to the workspace root")
        if path.is_dir():
            raise IsADirectoryError(f"{name!r} is a directory")
        if mode is None:
            mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else DEFAULT_FILE_MODE
        self.root, self.name, self.mode = root, name, mode
        descriptor, temporary = tempfile.mkstemp(dir=root.resolve(), prefix=f".{path.name}.", suffix=".tmp")
        self.temporary = Path(temporary)
        self.handle = os.fdopen(descriptor, "wb")

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def commit(self) -> Path:
        try:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            path = resolve_in_workspace(self.root, self.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            # The parent may have been created through a symlink planted by a command: check again.
            path = resolve_in_workspace(self.root, self.name)
            if path.is_dir():
                raise IsADirectoryError(f"{self.name!r} is a directory")
            os.chmod(self.temporary, self.mode)
            os.replace(self.temporary, path)
        except BaseException:
            self.discard()
            raise
        return path

    def discard(self) -> None:
        self.handle.close()
        self.temporary.unlink(missing_ok=True)


def write_atomically(root: Path, name: str, data: bytes | IO[bytes], mode: int | None = None) -> Path:
    """Write through a temporary file in the same directory and rename, so a reader never sees a
    half-written file and a crash leaves either the old or the new content. `data` is the bytes,
    or a binary file read to its end."""
    staged = Staged(root, name, mode)
    try:
        if isinstance(data, bytes):
            staged.write(data)
        else:
            shutil.copyfileobj(data, staged.handle)
    except BaseException:
        staged.discard()
        raise
    return staged.commit()


def list_files(root: Path, name: str = ".") -> list[str]:
    """Regular files under `name`, as sorted workspace-relative POSIX paths. Symlinks are listed but
    never followed, so a link to `/` cannot make the listing walk the host."""
    start = root.resolve() if name in ("", ".") else resolve_in_workspace(root, name)
    real_root = root.resolve()
    if start.is_file():
        return [start.relative_to(real_root).as_posix()]
    if not start.is_dir():
        raise FileNotFoundError(f"no directory {name!r} in the workspace")
    found: list[str] = []
    for directory, subdirectories, files in os.walk(start, followlinks=False):
        subdirectories.sort()
        for file_name in files:
            found.append((Path(directory) / file_name).relative_to(real_root).as_posix())
        for link in subdirectories:
            if (Path(directory) / link).is_symlink():
                found.append((Path(directory) / link).relative_to(real_root).as_posix())
    return sorted(found)


def _kind_rule(mode: int) -> str | None:
    """The refusal rule a file's type breaks, None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "not-a-file"


def describe(root: Path, name: str, max_bytes: int = MAX_FILE_BYTES) -> DeclaredArtifact:
    """The declared-artifact entry for one workspace file: name, sha256, size and mode. Only a
    regular file with one link, at most `max_bytes`, that stays the same while it is hashed is
    described; anything else is a WorkspaceRefusal naming the rule it breaks."""
    relative = check_relative_name(name)
    try:
        # The parent directories: a symlink among them may not lead out of the workspace.
        path = resolve_in_workspace(root, relative.parent.as_posix()) / relative.name
    except UnsafePath:
        raise refusal(name, "escape") from None
    try:
        before = path.lstat()
    except FileNotFoundError:
        raise FileNotFoundError(f"declared file {name!r} is missing from the workspace") from None
    rule = _kind_rule(before.st_mode)
    if rule is None and before.st_nlink > 1:
        rule = "hard-link"
    if rule is None and before.st_size > max_bytes:
        rule = "size"
    if rule is not None:
        raise refusal(name, rule)
    # No following a link swapped in since, and no blocking on a pipe swapped in since.
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except PermissionError:
        raise refusal(name, "unreadable") from None
    except OSError:
        raise refusal(name, "changed") from None
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if (opened.st_ino, opened.st_dev) != (before.st_ino, before.st_dev):
            raise refusal(name, "changed")
        hasher, size = hashlib.sha256(), 0
        while chunk := handle.read(1024 * 1024):
            hasher.update(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise refusal(name, "size")
        after = os.fstat(handle.fileno())
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or size != after.st_size:
        raise refusal(name, "changed")
    return DeclaredArtifact(
        name=relative.as_posix(), sha256=hasher.hexdigest(), size=size, mode=stat.S_IMODE(after.st_mode)
    )
