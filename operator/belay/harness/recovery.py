"""Recovery: every subagent's sandbox, clean and restored from the record.

An attempt gives each subagent a clean sandbox restored from its last verified checkpoint that is
still valid (declared files only, every hash checked, the verification re-run: a different result
means recovery needed something undeclared, and the attempt stops visibly). The requests the
previous attempt left open are settled after that by the tool runtime, which runs them
(`ToolRuntime.settle_open_operations`, by `belay.journal.recovery.recovery_plan`).

A checkpoint with a repository revision and a patch is restored through them: the inputs are
written and committed (their commit must be the inputs checkpoint's revision), the patch is applied
and committed (that commit must be the checkpoint's revision), and the declared files are checked
against their hashes. A restore that arrives anywhere else fails visibly.

A sandbox lost while the attempt runs (its pod deleted, its process dead) does not end the
attempt: the call that found it gone waits for a replacement, restores it from the last verified
checkpoint as a new attempt would, and the request runs again by its effect class.

A sandbox whose work a scope change or a rejection made invalid is rewound in place: its workspace
is emptied and the last checkpoint still valid restored into it, exactly as into a clean one, so
the reopened steps are done again from there. (In place, because in a cluster the sandbox pods are
the operator's: the harness cannot ask for a new one when none was lost.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from belay.api.agentsession import SubagentInput, SubagentSpec
from belay.harness.arguments import resolve_arguments
from belay.harness.attempt import Attempt, RecoveryFailed
from belay.harness.checkpoints import (
    bounded,
    checkpoint_of,
    declared_of,
    inputs_checkpoint,
    inputs_checkpoint_id,
    restore_point,
    verify,
)
from belay.harness.git_input import INPUT_UNAVAILABLE, InputUnavailable
from belay.harness.revision import RESTORE_PATCH_PATH, RevisionError, make_revision
from belay.journal.events import (
    Checkpoint,
    DeclaredArtifact,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    Verification,
)
from belay.journal.tools import tool_spec
from belay.sandbox.client import SandboxError, SandboxReplaced, SandboxUnavailable
from belay.sandbox.restore import restore as restore_declared
from belay.sandbox.restore import verify_restored
from belay.stores.base import ArtifactStore

UNDECLARED_STATE = "UndeclaredState"
REVISION_MISMATCH = "RevisionMismatch"
REWIND_FAILED = "RewindFailed"
# Everything in the workspace root, hidden entries included; run in the sandbox like any command.
EMPTY_WORKSPACE = ["find", ".", "-mindepth", "1", "-maxdepth", "1", "-exec", "rm", "-rf", "{}", "+"]


class SandboxHandle(Protocol):
    name: str
    endpoint: str
    pid: int
    instance: str  # unique per sandbox server start; the client is bound to it
    network_isolated: bool

    @property
    def client(self) -> Any: ...

    async def stop(self) -> None: ...


class SandboxProvider(Protocol):
    async def start(self, subagent: SubagentSpec, replacing: SandboxHandle | None = None) -> SandboxHandle:
        """A clean sandbox for the subagent. With `replacing` (a lost sandbox, already stopped):
        one that is not that instance."""
        ...


@dataclass
class Recovery:
    attempt: Attempt
    artifacts: ArtifactStore
    provider: SandboxProvider
    # subagent -> (workspace path, bytes): declared inputs, recorded on the first attempt only
    inputs: Mapping[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    runtime_image: str = "local"
    handles: dict[str, SandboxHandle] = field(default_factory=dict)
    # subagent -> the record's last seq when its sandbox was restored: a step reopened after that
    # (a scope change, a rejection) means the sandbox holds work that is invalid now.
    prepared_at: dict[str, int] = field(default_factory=dict)

    def handle(self, subagent: str) -> SandboxHandle:
        return self.handles[subagent]

    async def stop_all(self) -> None:
        await asyncio.gather(*(h.stop() for h in self.handles.values()), return_exceptions=True)

    # ---------------------------------------------------------------------------------------------
    # Sandboxes

    async def prepare_sandbox(
        self, sub: SubagentSpec, lost: SandboxHandle | None = None, why: str = ""
    ) -> None:
        attempt = self.attempt
        state = await attempt.state()
        known = state.subagents.get(sub.name)
        replacing = known is not None and known.sandbox_starts > 0
        await attempt.check_lease()
        handle = await self.provider.start(sub, lost)
        self.handles[sub.name] = handle
        isolation = "network isolated" if handle.network_isolated else "network NOT isolated"
        detail = f"clean workspace, pid {handle.pid}, profile {sub.network_profile}, {isolation}"
        # A local sandbox says which walls it observed around itself (or why there are none).
        walls = getattr(handle, "walls", "")
        if walls:
            detail += f"; walls: {walls}"
        if lost is not None:
            detail = (
                f"replaces instance {lost.instance}, lost under attempt {attempt.number} ({why}); {detail}"
            )
        await attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.SANDBOX_REPLACED if replacing else LifecycleKind.SANDBOX_STARTED,
                    attempt=attempt.number,
                    subagent=sub.name,
                    detail=detail,
                )
            ],
            subagent=sub.name,
            durable=False,  # lost with the machine, the sandbox is gone too: the next one is recorded
        )
        state = await attempt.state()
        self.prepared_at[sub.name] = state.last_seq
        checkpoint = restore_point(state, sub.name)
        if checkpoint is None:
            await self.seed_inputs(sub, handle)
        else:
            await self.restore(sub, handle, checkpoint)

    async def rewind_if_reopened(self, sub: SubagentSpec) -> None:
        """A scope change or a rejection reopened a step of this subagent after its sandbox was
        restored: the workspace holds invalid work. Empty it and restore the last checkpoint that
        is still valid, so the reopened steps are done again from there."""
        state = await self.attempt.state()
        known = state.subagents.get(sub.name)
        prepared = self.prepared_at.get(sub.name)
        if known is None or known.reopened_seq is None or prepared is None or known.reopened_seq <= prepared:
            return
        checkpoint = restore_point(state, sub.name)
        if checkpoint is None:
            return  # nothing was ever restored into it: nothing to rewind
        handle = self.handles[sub.name]
        emptied = await handle.client.call("run_command", {"command": EMPTY_WORKSPACE, "timeout_s": 300})
        if not emptied.get("ok") or (emptied.get("output") or {}).get("exit_code") != 0:
            detail = f"{sub.name}: the workspace could not be emptied to rewind it: {emptied}"
            await self.fail(sub, checkpoint, REWIND_FAILED, detail)
        self.prepared_at[sub.name] = state.last_seq
        why = f"rewound in place: work after it was made invalid at seq {known.reopened_seq}; "
        await self.restore(sub, handle, checkpoint, why)

    async def replace_sandbox(self, sub: SubagentSpec, lost: SandboxUnavailable) -> None:
        """The subagent's sandbox went away under this attempt: wait for a replacement and restore
        it from the last verified checkpoint exactly as a new attempt would (declared files, their
        hashes, the verification re-run, the idempotent operations after it replayed). A
        replacement lost during its own restore is replaced in turn, a bounded number of times."""
        tries = max(1, self.attempt.session.spec.recovery.max_attempts)
        for _ in range(tries):
            previous = self.handles[sub.name]
            if not isinstance(lost, SandboxReplaced) and await answers(previous):
                return  # a broken connection, not a lost sandbox: its workspace is intact
            await previous.stop()
            try:
                await self.prepare_sandbox(sub, previous, str(lost))
                return
            except SandboxUnavailable as again:
                lost = again
        raise lost

    async def seed_inputs(self, sub: SubagentSpec, handle: SandboxHandle) -> None:
        """The subagent's declared inputs, written into its first sandbox and committed there: its
        first checkpoint (nothing completed yet), which every later patch is taken against."""
        try:
            # Read (a repository fetched) only now, and only for a sandbox that starts from them.
            files = await asyncio.to_thread(lambda: list(self.inputs.get(sub.name, [])))
        except InputUnavailable as error:
            await self.input_unavailable(sub, str(error))
        entries = []
        for name, data in files:
            ref = await asyncio.to_thread(self.artifacts.put, data)
            entries.append(DeclaredArtifact(name=name, sha256=ref.sha256, size=ref.size, uri=ref.uri))
        await restore_declared(handle.client, self.artifacts, entries)
        checkpoint_id = inputs_checkpoint_id(sub.name)
        try:
            revision, patch = await make_revision(handle.client, [e.name for e in entries], checkpoint_id)
        except RevisionError as error:
            raise RecoveryFailed(REVISION_MISMATCH, f"{sub.name}: {error}") from None
        patch_ref = await asyncio.to_thread(self.artifacts.put, patch, media_type="text/x-diff")
        state = await self.attempt.state()
        made = checkpoint_of(
            sub,
            checkpoint_id,
            revision,
            patch_ref,
            entries,
            covers_seq=state.last_seq,
            runtime_image=self.runtime_image,
            # Nothing ran yet: the inputs are checked file by file (and by their commit) on restore.
            verification=Verification(command="(the inputs: each declared file's sha256)", status="not_run"),
            next_step=sub.name,  # the subagent's own task: its plan is not started yet
        )
        checkpoint = await bounded(self.artifacts, made)
        # Lost with the machine, the inputs are seeded again into the next sandbox: their blobs are
        # already on disk, and nothing has run on them yet.
        await self.attempt.record([checkpoint], subagent=sub.name, durable=False)
        await self.attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.RESTORED,
                    attempt=self.attempt.number,
                    subagent=sub.name,
                    checkpoint_id=checkpoint_id,
                    detail=f"{len(entries)} declared input files, revision {revision.revision[:12]}"
                    + "".join(f"; {item.target} from {origin}" for item, origin in input_origins(sub)),
                )
            ],
            subagent=sub.name,
        )

    async def restore_files(self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint) -> str:
        """Write the checkpoint's declared state into a clean sandbox; returns how. Through its
        repository revision and patch when it has them (rebuilding the inputs commit first),
        else file by file; either way every declared file's hash is checked."""
        state = await self.attempt.state()
        inputs = inputs_checkpoint(state, sub.name)
        usable = (
            checkpoint.repository_revision is not None
            and checkpoint.patch is not None
            and inputs is not None
            and inputs.repository_revision is not None
        )
        if not usable or inputs is None:
            files = await declared_of(self.artifacts, checkpoint)
            await restore_declared(handle.client, self.artifacts, files)
            return f"{len(files)} declared files"
        input_files = await declared_of(self.artifacts, inputs)
        await restore_declared(handle.client, self.artifacts, input_files)
        try:
            base, _ = await make_revision(handle.client, [e.name for e in input_files], inputs.checkpoint_id)
            await self.check_revision(sub, inputs, base.revision)
            if checkpoint.checkpoint_id == inputs.checkpoint_id:
                return f"{len(input_files)} declared input files at revision {base.revision[:12]}"
            assert checkpoint.patch is not None
            patch = await asyncio.to_thread(self.artifacts.get, checkpoint.patch.sha256)
            if patch:  # git refuses to apply an empty patch; nothing changed since the inputs
                await handle.client.put_file(RESTORE_PATCH_PATH, patch, checkpoint.patch.sha256)
            files = await declared_of(self.artifacts, checkpoint)
            restored, _ = await make_revision(
                handle.client,
                [e.name for e in files],
                checkpoint.checkpoint_id,
                parent=base.revision,
                apply=RESTORE_PATCH_PATH if patch else None,
            )
        except RevisionError as error:
            await self.fail(sub, checkpoint, REVISION_MISMATCH, f"{sub.name}: {error}")
        await self.check_revision(sub, checkpoint, restored.revision)
        await verify_restored(handle.client, files)
        return (
            f"{len(files)} declared files: the inputs' revision {base.revision[:12]} "
            f"and a {checkpoint.patch.size}-byte patch, at revision {restored.revision[:12]}"
        )

    async def check_revision(self, sub: SubagentSpec, checkpoint: Checkpoint, revision: str) -> None:
        if revision != checkpoint.repository_revision:
            detail = (
                f"{sub.name}: rebuilding checkpoint {checkpoint.checkpoint_id} gave revision {revision}, the "
                f"checkpoint recorded {checkpoint.repository_revision}: the workspace is not what it declared"
            )
            await self.fail(sub, checkpoint, REVISION_MISMATCH, detail)

    async def input_unavailable(self, sub: SubagentSpec, error: str) -> NoReturn:
        """The subagent's inputs cannot be had: not an attempt that a next one may get past on its
        own (the same input fails the same way), so a recovery failure; nothing has run yet."""
        detail = (
            f"{sub.name}: {error}; correct the input in the spec (the operator then starts the next "
            "attempt), or make the repository serve it and resume the session"
        )
        await self.fail_at(
            sub, inputs_checkpoint_id(sub.name), INPUT_UNAVAILABLE, detail, finished_detail=detail
        )

    async def fail(self, sub: SubagentSpec, checkpoint: Checkpoint, reason: str, detail: str) -> NoReturn:
        await self.fail_at(sub, checkpoint.checkpoint_id, reason, detail)

    async def fail_at(
        self, sub: SubagentSpec, checkpoint_id: str, reason: str, detail: str, finished_detail: str = ""
    ) -> NoReturn:
        """Record that recovery failed for this subagent (from that checkpoint) and the attempt
        finished with it, then stop the attempt."""
        attempt = self.attempt
        await attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.RECOVERY_FAILED,
                    attempt=attempt.number,
                    reason=reason,
                    detail=detail,
                    subagent=sub.name,
                    checkpoint_id=checkpoint_id,
                ),
                Lifecycle(
                    kind=LifecycleKind.HARNESS_FINISHED,
                    attempt=attempt.number,
                    reason=reason,
                    detail=finished_detail,
                ),
            ],
            subagent=sub.name,
        )
        raise RecoveryFailed(reason, detail)

    async def restore(
        self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint, why: str = ""
    ) -> None:
        attempt = self.attempt
        how = why + await self.restore_files(sub, handle, checkpoint)
        verification = checkpoint.verification
        if verification is not None and verification.status != "not_run":
            check = await verify(handle.client, verification.command, verification.exit_code or 0)
            if check.exit_code != verification.exit_code:
                detail = (
                    f"{sub.name}: re-running `{verification.command}` after restoring checkpoint "
                    f"{checkpoint.checkpoint_id} exited {check.exit_code}, the checkpoint recorded "
                    f"{verification.exit_code}: the workspace needed state that was never declared"
                )
                await self.fail(sub, checkpoint, UNDECLARED_STATE, detail)
        replayed = await self.replay_after(sub, handle, checkpoint)
        detail = how
        if verification is not None and verification.status != "not_run":
            detail += f", verification `{verification.command}` gave exit {verification.exit_code} again"
        if replayed:
            detail += f", replayed {replayed} idempotent operations recorded after it"
        await attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.RESTORED,
                    attempt=attempt.number,
                    subagent=sub.name,
                    checkpoint_id=checkpoint.checkpoint_id,
                    detail=detail,
                )
            ],
            subagent=sub.name,
        )

    async def replay_after(self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint) -> int:
        """Re-apply the sandbox operations of the unfinished step: they ran after the checkpoint, the
        clean workspace lost their effect, and being idempotent they may run again."""
        state = await self.attempt.state()
        operations = sorted(
            (
                op
                for op in state.operations.values()
                if op.subagent == sub.name
                and op.request_seq > checkpoint.covers_seq
                and op.has_result
                and op.ok
                and op.effect == EffectClass.IDEMPOTENT
                and tool_spec(op.tool).where == "sandbox"
                # Work a scope change or a rejection made invalid is done again, not replayed.
                and (
                    op.result_id is None
                    or op.result_id not in state.results
                    or state.results[op.result_id].valid
                )
            ),
            key=lambda op: op.request_seq,
        )
        for op in operations:
            request = await self.attempt.request_of(op.operation_id)
            await handle.client.call(request.tool, await resolve_arguments(self.artifacts, request.arguments))
        return len(operations)


async def answers(handle: SandboxHandle) -> bool:
    """Whether the very instance the handle is bound to still answers."""
    try:
        await handle.client.health()
    except SandboxError:
        return False
    return True


def input_origins(sub: SubagentSpec) -> list[tuple[SubagentInput, str]]:
    """Where each input that is not a directory of the machine came from, as the record says it."""
    origins = []
    for item in sub.inputs:
        if item.git is not None:
            origins.append((item, f"{item.git.url} at {item.git.revision}"))
        elif item.artifact is not None:
            origins.append((item, f"{item.artifact.shown()}, sha256 {item.artifact.sha256}"))
    return origins
