"""Which workspace files are a subagent's declared state.

Only declared files survive a sandbox replacement. Byte-code caches are never declared: they are
rebuilt on demand and their bytes differ from run to run. Nor is `.belay`, where the sandbox keeps
the git repository of its checkpoints' revisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from belay.api.agentsession import AgentSession, SubagentInput
from belay.harness.git_input import InputUnavailable, git_input_files, git_input_label
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, ArtifactStore

NEVER_DECLARED_PARTS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".belay")


def is_cache(path: str) -> bool:
    parts = path.split("/")
    return any(part in NEVER_DECLARED_PARTS for part in parts) or path.endswith((".pyc", ".pyo"))


def declared_paths(files: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The files matching any pattern (fnmatch, where `*` also crosses `/`), caches excluded."""
    return sorted(
        f for f in files if not is_cache(f) and any(fnmatchcase(f, pattern) for pattern in patterns)
    )


def input_files(source: Path, target: str) -> list[tuple[str, Path]]:
    """(workspace path, local file) for every file of an input directory, caches excluded."""
    if not source.is_dir():
        raise FileNotFoundError(f"input directory {source} does not exist")
    pairs = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if path.is_file() and not is_cache(relative):
            pairs.append((f"{target.strip('/')}/{relative}", path))
    return pairs


def read_input(
    item: SubagentInput, git_credentials: Path | None, artifacts: ArtifactStore | None = None
) -> list[tuple[str, bytes]]:
    """One input's files, (workspace path, bytes), caches excluded: a directory's, those of a
    repository's tree at its commit (belay.harness.git_input, which raises InputUnavailable), or
    the pinned bytes of another session's deliverable (`artifact_input_file`)."""
    if item.artifact is not None:
        return [artifact_input_file(item, artifacts)]
    if item.git is not None:
        try:
            files = git_input_files(item.git, item.target, git_credentials)
        except InputUnavailable as error:
            # Named as the record names it, so the operator can tell when the spec corrects it.
            raise InputUnavailable(f"input {git_input_label(item.target, item.git)}: {error}") from None
        return [(name, data) for name, data in files if not is_cache(name)]
    assert item.source is not None
    return [(name, path.read_bytes()) for name, path in input_files(Path(item.source), item.target)]


def artifact_input_file(item: SubagentInput, artifacts: ArtifactStore | None) -> tuple[str, bytes]:
    """`<target>/<deliverable>` and the bytes its pin names, read from the artifact store by their
    sha256 (which the store checks): never the source session's current deliverable, which may
    have been amended since the pin. InputUnavailable when there is no pin or no such blob."""
    artifact = item.artifact
    assert artifact is not None
    if artifact.sha256 is None:
        raise InputUnavailable(
            f"{artifact.shown()} has no pinned sha256 (`belay run` or the operator pins it)"
        )
    if artifacts is None:
        raise InputUnavailable(f"{artifact.shown()}: this harness reads no artifact store for inputs")
    try:
        data = artifacts.get(artifact.sha256)
    except (ArtifactNotFound, ArtifactCorrupted) as error:
        raise InputUnavailable(f"{artifact.shown()}, sha256 {artifact.sha256}: {error}") from None
    return f"{item.target.strip('/')}/{artifact.deliverable}", data


def with_recorded_pins(session: AgentSession, pins: Mapping[str, str]) -> AgentSession:
    """The session with each artifact input's sha256 taken from its record's pins (in a cluster,
    the operator's `session_link` of kind `input`, by "<session>/<deliverable>"), whatever its spec
    says: an input the record pins nothing for has no sha256, and is not read."""
    subagents = []
    for sub in session.spec.subagents:
        inputs = []
        for item in sub.inputs:
            if item.artifact is not None:
                pinned = pins.get(f"{item.artifact.session}/{item.artifact.deliverable}")
                item = item.model_copy(
                    update={"artifact": item.artifact.model_copy(update={"sha256": pinned})}
                )
            inputs.append(item)
        subagents.append(sub.model_copy(update={"inputs": inputs}))
    return session.model_copy(update={"spec": session.spec.model_copy(update={"subagents": subagents})})


def read_inputs(session: AgentSession) -> dict[str, list[tuple[str, bytes]]]:
    """Each subagent's declared input files: (workspace path, bytes), read from their sources."""
    return dict(DeclaredInputs(session))


class DeclaredInputs(Mapping[str, list[tuple[str, bytes]]]):
    """Each subagent's declared input files, (workspace path, bytes), read from their sources when
    first asked for. Only a subagent's first sandbox is seeded from them: an attempt that restores
    every subagent from the record (whose inputs checkpoint holds the same files) never reads
    them, so a harness that replaces a lost one does not read its inputs again."""

    def __init__(
        self,
        session: AgentSession,
        git_credentials: Path | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        # Where the Secrets that git inputs name are mounted (a harness pod's
        # belay.harness.git_input.GIT_CREDENTIALS_DIR); None where none are.
        self._git_credentials = git_credentials
        # Where artifact inputs' pinned bytes are read: the session's own artifact store.
        self._artifacts = artifacts
        self._subagents = {sub.name: sub for sub in session.spec.subagents}
        self._read: dict[str, list[tuple[str, bytes]]] = {}

    def __getitem__(self, subagent: str) -> list[tuple[str, bytes]]:
        if subagent not in self._read:
            sub = self._subagents[subagent]
            self._read[subagent] = [
                pair
                for item in sub.inputs
                for pair in read_input(item, self._git_credentials, self._artifacts)
            ]
        return self._read[subagent]

    def __iter__(self) -> Iterator[str]:
        return iter(self._subagents)

    def __len__(self) -> int:
        return len(self._subagents)

    @property
    def read(self) -> list[str]:
        """The subagents whose inputs were read so far."""
        return sorted(self._read)
