"""Checkpoint objects mirrored from checkpoint events: one per event, owned by the session."""

from __future__ import annotations

from typing import Any

from belay.api.checkpoint import Checkpoint, CheckpointArtifact, CheckpointSpec, CheckpointVerification
from belay.controller import names
from belay.controller.desired import SessionRef
from belay.journal.events import CheckpointEvent


def checkpoint_object(ref: SessionRef, event: CheckpointEvent) -> dict[str, Any]:
    payload = event.payload
    verification = payload.verification
    spec = CheckpointSpec(
        session=ref.name,
        checkpoint_id=payload.checkpoint_id,
        seq=event.seq,
        covers_seq=payload.covers_seq,
        verified=payload.verified,
        verification=None
        if verification is None
        else CheckpointVerification(
            command=verification.command, status=verification.status, exit_code=verification.exit_code
        ),
        subagent=payload.subagent,
        next_step=payload.next_step,
        completed_steps=list(payload.completed_steps),
        repository_revision=payload.repository_revision,
        runtime_image=payload.runtime_image,
        declared_artifacts=[
            CheckpointArtifact(name=a.name, sha256=a.sha256, size=a.size) for a in payload.declared_artifacts
        ],
        declared_manifest=payload.declared_manifest.sha256 if payload.declared_manifest else None,
    )
    labels = {**names.session_labels(ref.name)}
    if payload.subagent:
        labels[names.LABEL_SUBAGENT] = payload.subagent
    checkpoint = Checkpoint(
        metadata={
            "name": names.checkpoint_object_name(ref.name, event.seq),
            "namespace": ref.namespace,
            "labels": labels,
            # Owned, not controlled: deleting the session removes its checkpoints with it.
            "ownerReferences": [{**ref.owner_reference(), "controller": False}],
        },
        spec=spec,
    )
    return checkpoint.model_dump(mode="json", by_alias=True, exclude_none=True)
