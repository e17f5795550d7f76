"""Recovery: every subagent's sandbox, clean and restored from the record, and the requests an
earlier attempt left without a result.

An attempt gives each subagent a clean sandbox restored from its last verified checkpoint that is
still valid (declared files only, every hash checked, the verification re-run: a different result
means recovery needed something undeclared, and the attempt stops visibly), then settles the
requests the previous attempt left open by their effect class (`belay.journal.recovery
.recovery_plan`), and the failed external effects that wait on a person.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from belay.api.agentsession import SubagentSpec
from belay.harness.attempt import Attempt, RecoveryFailed
from belay.harness.revision import RESTORE_PATCH_PATH, RevisionError, dependency_manifests, make_revision
from belay.journal.events import (
    Checkpoint,
    DeclaredArtifact,
    EffectClass,
    Lifecycle,
    LifecycleKind,
    Verification,
    sha256_of,
)
from belay.journal.recovery import RecoveryActionKind, recovery_plan
from belay.journal.state import SessionState
from belay.journal.tools import tool_spec
from belay.sandbox.client import SandboxError, SandboxReplaced, SandboxUnavailable
from belay.stores.base import ArtifactStore

if TYPE_CHECKING:
    from belay.harness.runtime import ToolRuntime

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
    inputs: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    runtime_image: str = "local"
    runtime: ToolRuntime | None = None  # settles open requests; set once both exist
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
        from belay.sandbox.restore import restore as restore_declared

        entries = []
        for name, data in self.inputs.get(sub.name, []):
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
        checkpoint = Checkpoint(
            checkpoint_id=checkpoint_id,
            covers_seq=state.last_seq,
            repository_revision=revision.revision,
            patch=patch_ref,
            runtime_image=sub.image or self.runtime_image,
            next_step=sub.name,  # the subagent's own task: its plan is not started yet
            declared_artifacts=tuple(entries),
            environment={**revision.environment, "network_profile": sub.network_profile},
            dependencies={
                **revision.dependencies,
                **dependency_manifests({e.name: e.sha256 for e in entries}),
            },
            # Nothing ran yet: the inputs are checked file by file (and by their commit) on restore.
            verification=Verification(command="(the inputs: each declared file's sha256)", status="not_run"),
            subagent=sub.name,
            result_id=f"checkpoint:{checkpoint_id}",
        )
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
                    detail=f"{len(entries)} declared input files, revision {revision.revision[:12]}",
                )
            ],
            subagent=sub.name,
        )

    async def restore_files(self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint) -> str:
        """Write the checkpoint's declared state into a clean sandbox; returns how. Through its
        repository revision and patch when it has them (rebuilding the inputs commit first),
        else file by file; either way every declared file's hash is checked."""
        from belay.sandbox.restore import restore as restore_declared
        from belay.sandbox.restore import verify_restored

        state = await self.attempt.state()
        inputs = inputs_checkpoint(state, sub.name)
        usable = (
            checkpoint.repository_revision is not None
            and checkpoint.patch is not None
            and inputs is not None
            and inputs.repository_revision is not None
        )
        if not usable or inputs is None:
            await restore_declared(handle.client, self.artifacts, list(checkpoint.declared_artifacts))
            return f"{len(checkpoint.declared_artifacts)} declared files"
        await restore_declared(handle.client, self.artifacts, list(inputs.declared_artifacts))
        try:
            base, _ = await make_revision(
                handle.client, [e.name for e in inputs.declared_artifacts], inputs.checkpoint_id
            )
            await self.check_revision(sub, inputs, base.revision)
            if checkpoint.checkpoint_id == inputs.checkpoint_id:
                return (
                    f"{len(inputs.declared_artifacts)} declared input files at revision {base.revision[:12]}"
                )
            assert checkpoint.patch is not None
            patch = await asyncio.to_thread(self.artifacts.get, checkpoint.patch.sha256)
            if patch:  # git refuses to apply an empty patch; nothing changed since the inputs
                await handle.client.put_file(RESTORE_PATCH_PATH, patch, checkpoint.patch.sha256)
            restored, _ = await make_revision(
                handle.client,
                [e.name for e in checkpoint.declared_artifacts],
                checkpoint.checkpoint_id,
                parent=base.revision,
                apply=RESTORE_PATCH_PATH if patch else None,
            )
        except RevisionError as error:
            await self.fail(sub, checkpoint, REVISION_MISMATCH, f"{sub.name}: {error}")
        await self.check_revision(sub, checkpoint, restored.revision)
        await verify_restored(handle.client, list(checkpoint.declared_artifacts))
        return (
            f"{len(checkpoint.declared_artifacts)} declared files: the inputs' revision {base.revision[:12]} "
            f"and a {checkpoint.patch.size}-byte patch, at revision {restored.revision[:12]}"
        )

    async def check_revision(self, sub: SubagentSpec, checkpoint: Checkpoint, revision: str) -> None:
        if revision != checkpoint.repository_revision:
            detail = (
                f"{sub.name}: rebuilding checkpoint {checkpoint.checkpoint_id} gave revision {revision}, the "
                f"checkpoint recorded {checkpoint.repository_revision}: the workspace is not what it declared"
            )
            await self.fail(sub, checkpoint, REVISION_MISMATCH, detail)

    async def fail(self, sub: SubagentSpec, checkpoint: Checkpoint, reason: str, detail: str) -> NoReturn:
        attempt = self.attempt
        await attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.RECOVERY_FAILED,
                    attempt=attempt.number,
                    reason=reason,
                    detail=detail,
                    subagent=sub.name,
                    checkpoint_id=checkpoint.checkpoint_id,
                ),
                Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=attempt.number, reason=reason),
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
            check = await verify(handle, verification.command, verification.exit_code or 0)
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
        from belay.harness.runtime import resolve_arguments

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

    # ---------------------------------------------------------------------------------------------
    # Requests a previous attempt left without a result

    async def settle_open_operations(self, sub: SubagentSpec) -> None:
        """The effect table, as the recovery plan of the record states it for this subagent."""
        runtime = self.runtime
        assert runtime is not None, "the tool runtime settles open requests"
        plan = recovery_plan(await self.attempt.state())
        for action in plan.actions:
            if action.subagent != sub.name:
                continue
            request = await self.attempt.request_of(action.operation_id)
            if action.action in (RecoveryActionKind.RERUN, RecoveryActionKind.RERUN_WITH_KEY):
                await runtime.execute(sub, action.request_seq, request)
            elif action.action == RecoveryActionKind.AWAIT_RECONCILIATION:
                op = (await self.attempt.state()).operations[action.operation_id]
                await runtime.reconcile_unsafe(sub, op, request)
        # Reconciled as never having taken effect (by a person, while no harness ran): issue it now.
        state = await self.attempt.state()
        for op in sorted(state.operations.values(), key=lambda o: o.request_seq):
            if (
                op.subagent == sub.name
                and op.outcome == "reconciled"
                and op.reconciled_succeeded is False
                and not op.has_result
            ):
                await runtime.execute(sub, op.request_seq, await self.attempt.request_of(op.operation_id))
        # An external effect that failed waits on a person: try it again, or go on without it.
        state = await self.attempt.state()
        for op in state.external_operation_records():
            retry = latest_retry(state, op.operation_id)
            if op.subagent != sub.name or retry is None or op.ok:
                continue
            if retry.pending or (
                retry.decision == "granted" and (retry.decided_seq or 0) > (op.result_seq or 0)
            ):
                await runtime.await_retry(
                    sub, op.request_seq, await self.attempt.request_of(op.operation_id), retry.approval_id
                )


async def verify(handle: SandboxHandle, command: str, expected_exit: int) -> Verification:
    response = await handle.client.call("run_command", {"command": command, "timeout_s": 600})
    output = response.get("output") or {}
    exit_code = int(output.get("exit_code", -1)) if response.get("ok") else -1
    return Verification(
        command=command,
        status="passed" if exit_code == expected_exit else "failed",
        exit_code=exit_code,
        output_sha256=sha256_of(output.get("stdout", "")),
    )


async def answers(handle: SandboxHandle) -> bool:
    """Whether the very instance the handle is bound to still answers."""
    try:
        await handle.client.health()
    except SandboxError:
        return False
    return True


def inputs_checkpoint_id(subagent: str) -> str:
    return f"{subagent}/inputs"


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


def latest_retry(state: SessionState, operation_id: str) -> Any:
    """The newest request to retry a failed external effect, if any."""
    retries = [a for a in state.approvals_for(operation_id) if a.kind == "retry"]
    return retries[-1] if retries else None
