"""Which blobs a deleted session takes with it: a pure function of the records.

Artifacts are content-addressed and shared. Two sessions that stored the same bytes hold one blob,
and a fork's copied history refers to its source's blobs, so deleting a session's artifacts may
remove only the blobs that no other session's record refers to. A manifest refers to its entries:
they stay while any record refers to the manifest.

What in an event refers to a blob:
- `tool_request`: an argument stored as `{"$artifact": sha256, "size": n}` (a large argument);
- `tool_result`: `output_ref` (a large output) and `derived_from.artifacts`;
- `artifact`: `ref` and `derived_from.artifacts`;
- `checkpoint`: `patch` and every declared artifact (the files a restore writes back);
- `note`: `derived_from.artifacts`.
A verification's `output_sha256` is a hash of its output, never stored as a blob.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DeclaredArtifact,
    DerivedFrom,
    Event,
    Note,
    ToolRequest,
    ToolResult,
)
from belay.stores.base import MANIFEST_MEDIA_TYPE


@dataclass(frozen=True)
class References:
    """The blobs one record refers to; `manifests` are those among them stored as manifests."""

    blobs: frozenset[str] = frozenset()
    manifests: frozenset[str] = frozenset()


@dataclass
class _Collected:
    blobs: set[str] = field(default_factory=set)
    manifests: set[str] = field(default_factory=set)

    def ref(self, ref: ArtifactRef | None) -> None:
        if ref is None:
            return
        self.blobs.add(ref.sha256)
        if ref.media_type == MANIFEST_MEDIA_TYPE:
            self.manifests.add(ref.sha256)

    def derived(self, derived_from: DerivedFrom | None) -> None:
        if derived_from is not None:
            self.blobs.update(derived_from.artifacts)

    def declared(self, entries: Iterable[DeclaredArtifact]) -> None:
        self.blobs.update(entry.sha256 for entry in entries)


def references(events: Iterable[Event]) -> References:
    """Every blob the events refer to."""
    found = _Collected()
    for event in events:
        p = event.payload
        if isinstance(p, ToolRequest):
            for value in p.arguments.values():
                if isinstance(value, dict) and isinstance(value.get(ARTIFACT_ARGUMENT), str):
                    found.blobs.add(value[ARTIFACT_ARGUMENT])
        elif isinstance(p, ToolResult):
            found.ref(p.output_ref)
            found.derived(p.derived_from)
        elif isinstance(p, Artifact):
            found.ref(p.ref)
            found.derived(p.derived_from)
        elif isinstance(p, Checkpoint):
            found.ref(p.patch)
            found.declared(p.declared_artifacts)
        elif isinstance(p, Note):
            found.derived(p.derived_from)
    return References(frozenset(found.blobs), frozenset(found.manifests))


def expanded(refs: References, manifest_entries: Mapping[str, Sequence[DeclaredArtifact]]) -> set[str]:
    """The blobs, with the entries of the manifests among them."""
    blobs = set(refs.blobs)
    for manifest in refs.manifests:
        blobs.update(entry.sha256 for entry in manifest_entries.get(manifest, ()))
    return blobs


def blobs_only_of(
    deleted: References,
    others: Iterable[References],
    manifest_entries: Mapping[str, Sequence[DeclaredArtifact]],
) -> frozenset[str]:
    """The blobs the deleted session refers to (manifests with their entries) that no other
    session does. `manifest_entries` holds the entries of the manifests either side refers to; a
    manifest missing from it (already deleted) protects nothing and frees nothing but itself."""
    mine = expanded(deleted, manifest_entries)
    theirs: set[str] = set()
    for refs in others:
        theirs |= expanded(refs, manifest_entries)
    return frozenset(mine - theirs)
