"""Restoring declared state into a clean sandbox, and proving it arrived intact.

A replacement sandbox holds nothing but what a checkpoint declared. `restore` refuses every unsafe
name before writing anything, pushes each blob with its hash (the server checks it on receipt),
then reads the manifest back and fails if any file differs from its declaration.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from belay.journal.events import DeclaredArtifact
from belay.sandbox.client import SandboxClient, SandboxError
from belay.sandbox.workspace import check_relative_name
from belay.stores.base import ArtifactStore, UnsafePath


class RestoreVerificationFailed(SandboxError):
    """After a restore, the sandbox's files do not match the declared hashes."""

    def __init__(self, mismatches: list[str]) -> None:
        super().__init__("restored files differ from their declaration: " + "; ".join(mismatches))
        self.mismatches = mismatches


def check_declared_names(entries: Sequence[DeclaredArtifact]) -> None:
    """Refuse the whole restore if any name is unsafe or declared twice."""
    seen: set[str] = set()
    for entry in entries:
        normalized = check_relative_name(entry.name).as_posix()
        if normalized in seen:
            raise UnsafePath(f"declared file {entry.name!r} appears twice")
        seen.add(normalized)


def manifest_mismatches(
    expected: Sequence[DeclaredArtifact], actual: Sequence[DeclaredArtifact]
) -> list[str]:
    """One line per declared file whose content in the sandbox is not what was declared."""
    found = {entry.name: entry for entry in actual}
    problems = []
    for entry in expected:
        name = check_relative_name(entry.name).as_posix()
        observed = found.get(name)
        if observed is None:
            problems.append(f"{name}: missing")
        elif observed.sha256 != entry.sha256:
            problems.append(f"{name}: sha256 {observed.sha256} but declared {entry.sha256}")
        elif observed.size != entry.size:
            problems.append(f"{name}: {observed.size} bytes but declared {entry.size}")
    return problems


async def verify_restored(
    client: SandboxClient, entries: Sequence[DeclaredArtifact]
) -> list[DeclaredArtifact]:
    """Read the sandbox's manifest of the declared names; raise if any hash or size differs."""
    if not entries:
        return []
    try:
        actual = await client.manifest([entry.name for entry in entries])
    except SandboxError as error:
        if error.status == 404:
            raise RestoreVerificationFailed([str(error)]) from error
        raise
    problems = manifest_mismatches(entries, actual)
    if problems:
        raise RestoreVerificationFailed(problems)
    return actual


async def restore(
    client: SandboxClient, artifact_store: ArtifactStore, entries: list[DeclaredArtifact]
) -> list[DeclaredArtifact]:
    """Write every declared artifact into the sandbox and verify the result; returns the manifest."""
    check_declared_names(entries)
    for entry in entries:
        data = await asyncio.to_thread(artifact_store.get, entry.sha256)
        await client.put_file(entry.name, data, entry.sha256, mode=entry.mode)
    return await verify_restored(client, entries)


async def push_directory(
    client: SandboxClient, source: Path, *, prefix: str = "", skip: tuple[str, ...] = ("__pycache__", ".git")
) -> list[DeclaredArtifact]:
    """Copy a local directory tree into the sandbox (for seeding a workspace, e.g. with a repository)
    and return what was written, as declared-artifact entries."""
    written = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if not path.is_file() or any(part in skip for part in relative.parts):
            continue
        data = path.read_bytes()
        name = f"{prefix.rstrip('/')}/{relative.as_posix()}" if prefix else relative.as_posix()
        mode = path.stat().st_mode & 0o777
        written.append(await client.put_file(name, data, hashlib.sha256(data).hexdigest(), mode=mode))
    return written
