"""Which blobs a deleted session takes with it, and which blobs any records still name (`named_blobs`,
what `belay gc` keeps): pure functions of the records.

Artifacts are content-addressed and shared. Two sessions that stored the same bytes hold one blob,
and a fork's copied history refers to its source's blobs, so deleting a session's artifacts may
remove only the blobs that no other session's record refers to. A manifest refers to its entries:
they stay while any record refers to the manifest.

What in an event refers to a blob:
- `tool_request`: an argument stored as `{"$artifact": sha256, "size": n}` (a large argument);
- `tool_result`: `output_ref` (a large output) and `derived_from.artifacts`;
- `artifact`: `ref` and `derived_from.artifacts`;
- `checkpoint`: `patch` and every declared artifact (the files a restore writes back), or the
  manifest that lists them (`declared_manifest`, a checkpoint of too many files for one event);
- `note`: `derived_from.artifacts`.
A verification's `output_sha256` is a hash of its output, never stored as a blob.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DeclaredArtifact,
    DerivedFrom,
    Event,
    Note,
    StateSnapshot,
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
            found.ref(p.declared_manifest)
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


# --------------------------------------------------------------------------------------------------
# Everything a record names, for a collector that must never remove what it still needs

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Named:
    """Every sha256 some records name, anywhere in any event (a superset of the blobs they refer
    to: a verification's output hash, an approval's payload hash, a hash quoted in a text are
    named too). `documents`: the named blobs that name further blobs, to be read for those (a
    manifest's entries; a state snapshot's pages)."""

    blobs: frozenset[str] = frozenset()
    documents: frozenset[str] = frozenset()


def named_blobs(events: Iterable[Event]) -> Named:
    """What a collector keeps: read from the events, not the fold, because the record keeps naming
    what the fold has set aside (a superseded artifact, an old snapshot, an invalidated checkpoint)
    and every view may still read it."""
    blobs: set[str] = set()
    documents: set[str] = set()
    for event in events:
        payload = event.payload.model_dump(mode="json")
        _collect(payload, blobs, documents)
        if isinstance(event.payload, StateSnapshot):
            documents.add(event.payload.ref.sha256)
    return Named(frozenset(blobs), frozenset(documents))


def hashes_in(text: str) -> set[str]:
    """Every sha256 written in a text (a document's bytes, decoded)."""
    return set(_SHA256.findall(text))


def _collect(value: Any, blobs: set[str], documents: set[str]) -> None:
    if isinstance(value, str):
        blobs.update(_SHA256.findall(value))
    elif isinstance(value, dict):
        if value.get("media_type") == MANIFEST_MEDIA_TYPE and isinstance(value.get("sha256"), str):
            documents.add(value["sha256"])
        for key, item in value.items():
            _collect(key, blobs, documents)
            _collect(item, blobs, documents)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, blobs, documents)
