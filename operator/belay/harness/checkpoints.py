"""A subagent's checkpoints: what one records, how its verification runs, which one a sandbox is
restored from.

A checkpoint is what the design asks of one: the repository revision of the declared files (a git
commit made in the sandbox, `belay.harness.revision`), the patch since the inputs (an artifact),
the runtime image, environment and dependency metadata, the completed steps, the next step, the
declared files and the verification with its status. A subagent's first checkpoint is its inputs
(recorded by `belay.harness.recovery` into its first sandbox), which every later patch is taken
against; each step's is made when the step is done (`update_plan`, `belay.harness.harness_tools`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from belay.api.agentsession import SubagentSpec
from belay.harness.declared import declared_paths
from belay.harness.revision import Revision, dependency_manifests
from belay.journal.events import ArtifactRef, Checkpoint, DeclaredArtifact, Verification, sha256_of
from belay.journal.state import SessionState
from belay.sandbox.client import SandboxClient, WorkspaceRefused
from belay.sandbox.protocol import REFUSED_STATUS
from belay.sandbox.workspace import REFUSAL_RULES
from belay.stores.base import MAX_PAYLOAD_BYTES, ArtifactStore

# A checkpoint event above this size keeps its declared files in a manifest instead (leaving room
# for what the runtime adds to it, the provenance).
INLINE_CHECKPOINT_BYTES = MAX_PAYLOAD_BYTES // 2


def inputs_checkpoint_id(subagent: str) -> str:
    return f"{subagent}/inputs"


def step_checkpoint_id(state: SessionState, subagent: str, step: str) -> str:
    """The checkpoint of a step's round: a step reopened by a scope change or a rejection is done
    again, and each round's checkpoint is kept apart."""
    task = state.tasks.get(f"{subagent}/{step}")
    round_ = task.round if task is not None else 1
    return f"{subagent}/{step}" if round_ == 1 else f"{subagent}/{step}@{round_}"


def inputs_checkpoint(state: SessionState, subagent: str) -> Checkpoint | None:
    for record in state.subagent_checkpoints.get(subagent, ()):
        if record.checkpoint.checkpoint_id == inputs_checkpoint_id(subagent):
            return record.checkpoint
    return None


def restore_point(state: SessionState, subagent: str) -> Checkpoint | None:
    """The newest verified checkpoint of a subagent that is still valid, else its inputs
    checkpoint, else None (a subagent never started)."""
    verified = state.last_valid_checkpoint(subagent, verified=True)
    return verified.checkpoint if verified is not None else inputs_checkpoint(state, subagent)


async def verify(client: SandboxClient, command: str, expected_exit: int) -> Verification:
    """Run a checkpoint's verification command in the sandbox: passed when it exits as expected."""
    response = await client.call("run_command", {"command": command, "timeout_s": 600})
    output = response.get("output") or {}
    exit_code = int(output.get("exit_code", -1)) if response.get("ok") else -1
    return Verification(
        command=command,
        status="passed" if exit_code == expected_exit else "failed",
        exit_code=exit_code,
        output_sha256=sha256_of(output.get("stdout", "")),
    )


async def store_declared_files(
    client: SandboxClient, artifacts: ArtifactStore, patterns: Sequence[str]
) -> list[DeclaredArtifact]:
    """The workspace's declared files, each stored in the artifact store under the hash the
    sandbox gave for it. What the sandbox refuses to describe (a symlink, a pipe...) and a file that
    changed meanwhile raise WorkspaceRefused."""
    listing = await client.call("list_files", {"path": "."})
    paths = declared_paths((listing.get("output") or {}).get("files", []), patterns)
    entries = await client.manifest(paths) if paths else []

    async def store(entry: DeclaredArtifact) -> DeclaredArtifact:
        data = await client.get_file(entry.name)
        ref = await asyncio.to_thread(artifacts.put, data)
        if ref.sha256 != entry.sha256:
            message = f"path {entry.name!r} refused (changed): {REFUSAL_RULES['changed']}"
            raise WorkspaceRefused(message, REFUSED_STATUS, entry.name, "changed")
        return entry.model_copy(update={"uri": ref.uri})

    # Side by side: each store waits on the disk, the next file's fetch on the sandbox.
    return list(await asyncio.gather(*(store(entry) for entry in entries)))


async def declared_of(artifacts: ArtifactStore, checkpoint: Checkpoint) -> list[DeclaredArtifact]:
    """A checkpoint's declared files: in the event, or in the manifest it names."""
    if checkpoint.declared_manifest is None:
        return list(checkpoint.declared_artifacts)
    return await asyncio.to_thread(artifacts.get_manifest, checkpoint.declared_manifest.sha256)


async def bounded(artifacts: ArtifactStore, checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint as one event can hold it: declared files too many for the record's payload
    limit (a repository of a few thousand files) go to a manifest in the artifact store."""
    if len(checkpoint.model_dump_json().encode()) <= INLINE_CHECKPOINT_BYTES:
        return checkpoint
    manifest = await asyncio.to_thread(artifacts.put_manifest, checkpoint.declared_artifacts)
    return checkpoint.model_copy(update={"declared_artifacts": (), "declared_manifest": manifest})


def checkpoint_of(
    sub: SubagentSpec,
    checkpoint_id: str,
    revision: Revision,
    patch: ArtifactRef,
    declared: Sequence[DeclaredArtifact],
    *,
    covers_seq: int,
    runtime_image: str,
    verification: Verification,
    next_step: str | None,
    completed_steps: tuple[str, ...] = (),
) -> Checkpoint:
    """The checkpoint to record for a revision of the declared files and its patch."""
    return Checkpoint(
        checkpoint_id=checkpoint_id,
        covers_seq=covers_seq,
        repository_revision=revision.revision,
        patch=patch,
        runtime_image=sub.image or runtime_image,
        completed_steps=completed_steps,
        next_step=next_step,
        declared_artifacts=tuple(declared),
        environment={**revision.environment, "network_profile": sub.network_profile},
        dependencies={
            **revision.dependencies,
            **dependency_manifests({entry.name: entry.sha256 for entry in declared}),
        },
        verification=verification,
        subagent=sub.name,
        result_id=f"checkpoint:{checkpoint_id}",
    )
