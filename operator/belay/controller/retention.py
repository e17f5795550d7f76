"""What deleting an AgentSession does to its record and its artifacts (`spec.retention`).

Artifacts go first: which blobs are the session's own is read from its record. Only blobs no other
session's record (in the same event store) refers to are deleted, manifests after their entries,
so a deletion cut short and run again still finds everything it has left to do. Then the record.
Every step is idempotent: a finalizer that runs twice (the operator restarted mid-delete) deletes
what is left and reports it.

Only the session's own record is touched: the one of its namespace and name, bound to its uid
(`belay.controller.ownership`). A record written for another AgentSession of the same name, which
this one was refused, is kept whatever the retention says.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from belay.api.agentsession import AgentSessionSpec, RetentionPolicy
from belay.controller.names import record_id
from belay.controller.ownership import belongs_to, move_legacy_record, owner_after
from belay.journal.events import DeclaredArtifact
from belay.stores.base import ArtifactNotFound, ArtifactStore, EventStore
from belay.stores.retention import blobs_only_of, expanded, references


@dataclass(frozen=True)
class RetentionNote:
    """A Normal Kubernetes Event saying what was deleted."""

    reason: str
    message: str


async def delete_own_artifacts(
    session_id: str, events: EventStore, artifacts: ArtifactStore
) -> RetentionNote:
    mine = references(await events.read(session_id))
    others = [references(await events.read(s)) for s in await events.list_sessions() if s != session_id]
    entries: dict[str, list[DeclaredArtifact]] = {}
    for manifest in mine.manifests.union(*(o.manifests for o in others)):
        # A manifest gone already was deleted by an earlier run, after its entries.
        with contextlib.suppress(ArtifactNotFound):
            entries[manifest] = await asyncio.to_thread(artifacts.get_manifest, manifest)
    own = blobs_only_of(mine, others, entries)
    shared = len(expanded(mine, entries) - own)
    # Manifests last: while one is stored, a run cut short can still find its entries.
    ordered = sorted(own, key=lambda sha256: (sha256 in mine.manifests, sha256))
    deleted = 0
    for sha256 in ordered:
        deleted += await asyncio.to_thread(artifacts.delete, sha256)
    return RetentionNote(
        "ArtifactsDeleted",
        f"deleted {deleted} artifact blobs only this session referred to; "
        f"kept {shared} that other sessions' records refer to",
    )


async def delete_record(session_id: str, events: EventStore) -> RetentionNote:
    last_seq = await events.last_seq(session_id)
    await events.delete_session(session_id)
    return RetentionNote("RecordDeleted", f"deleted the session record ({last_seq} events)")


async def apply_retention(
    session_id: str, policy: RetentionPolicy, events: EventStore, artifacts: ArtifactStore
) -> list[RetentionNote]:
    notes = []
    if policy.artifacts == "Delete":
        notes.append(await delete_own_artifacts(session_id, events, artifacts))
    if policy.record == "Delete":
        notes.append(await delete_record(session_id, events))
    return notes


async def retain_or_delete(
    namespace: str,
    name: str,
    uid: str,
    spec: AgentSessionSpec,
    events: EventStore,
    artifacts: ArtifactStore,
) -> list[RetentionNote]:
    """`spec.retention` applied to the record of the AgentSession `uid`, and to nothing else. A
    record still under the bare name, the session's own, is moved first (it goes or stays with
    the session's)."""
    if spec.retention.record == "Retain" and spec.retention.artifacts == "Retain":
        return []  # nothing to delete, nothing to read: a record that cannot be read stays too
    record = record_id(namespace, name)
    await move_legacy_record(events, name, record, uid, spec.adopt_record)
    recorded = await events.read(record)
    owner = owner_after(recorded)
    if not belongs_to(owner, uid, recorded[-1].seq if recorded else 0):
        return [
            RetentionNote(
                "RecordBelongsToAnother",
                f"kept the record {record}: it was written for AgentSession uid {owner or 'none'}, not "
                f"this one ({uid}); nothing of it was deleted",
            )
        ]
    return await apply_retention(record, spec.retention, events, artifacts)
