"""Recovery: every subagent's sandbox, clean and restored from the record, and the requests an
earlier attempt left without a result.

An attempt gives each subagent a clean sandbox restored from its last verified checkpoint
(declared files only, every hash checked, the verification re-run: a different result means
recovery needed something undeclared, and the attempt stops visibly), then settles the requests
the previous attempt left open by their effect class (`belay.journal.recovery.recovery_plan`).

A sandbox lost while the attempt runs (its pod deleted, its process dead) does not end the
attempt: the call that found it gone waits for a replacement, restores it from the last verified
checkpoint as a new attempt would, and the request runs again by its effect class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from belay.api.agentsession import SubagentSpec
from belay.harness.attempt import Attempt, RecoveryFailed
from belay.harness.tools import tool_spec
from belay.journal.events import (
    Checkpoint,
    CheckpointEvent,
    DeclaredArtifact,
    EffectClass,
    Event,
    Lifecycle,
    LifecycleKind,
    Verification,
    sha256_of,
)
from belay.journal.recovery import RecoveryActionKind, recovery_plan
from belay.sandbox.client import SandboxError, SandboxReplaced, SandboxUnavailable
from belay.stores.base import ArtifactStore

if TYPE_CHECKING:
    from belay.harness.runtime import ToolRuntime

UNDECLARED_STATE = "UndeclaredState"


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
        )
        checkpoint = latest_checkpoint_of(await attempt.events(), sub.name)
        if checkpoint is None:
            checkpoint = await self.record_inputs(sub)
        await self.restore(sub, handle, checkpoint)

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

    async def record_inputs(self, sub: SubagentSpec) -> Checkpoint:
        """The subagent's declared inputs, as its first checkpoint (nothing completed yet)."""
        entries = []
        for name, data in self.inputs.get(sub.name, []):
            ref = await asyncio.to_thread(self.artifacts.put, data)
            entries.append(DeclaredArtifact(name=name, sha256=ref.sha256, size=ref.size, uri=ref.uri))
        state = await self.attempt.state()
        checkpoint = Checkpoint(
            checkpoint_id=f"{sub.name}/inputs",
            covers_seq=state.last_seq,
            runtime_image=sub.image or self.runtime_image,
            declared_artifacts=tuple(entries),
            subagent=sub.name,
        )
        await self.attempt.record([checkpoint], subagent=sub.name)
        return checkpoint

    async def restore(self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint) -> None:
        from belay.sandbox.restore import restore as restore_declared

        attempt = self.attempt
        await restore_declared(handle.client, self.artifacts, list(checkpoint.declared_artifacts))
        verification = checkpoint.verification
        if verification is not None:
            check = await verify(handle, verification.command, verification.exit_code or 0)
            if check.exit_code != verification.exit_code:
                detail = (
                    f"{sub.name}: re-running `{verification.command}` after restoring checkpoint "
                    f"{checkpoint.checkpoint_id} exited {check.exit_code}, the checkpoint recorded "
                    f"{verification.exit_code}: the workspace needed state that was never declared"
                )
                await attempt.record(
                    [
                        Lifecycle(
                            kind=LifecycleKind.RECOVERY_FAILED,
                            attempt=attempt.number,
                            reason=UNDECLARED_STATE,
                            detail=detail,
                            subagent=sub.name,
                            checkpoint_id=checkpoint.checkpoint_id,
                        ),
                        Lifecycle(
                            kind=LifecycleKind.HARNESS_FINISHED,
                            attempt=attempt.number,
                            reason=UNDECLARED_STATE,
                        ),
                    ],
                    subagent=sub.name,
                )
                raise RecoveryFailed(UNDECLARED_STATE, detail)
        replayed = await self.replay_after(sub, handle, checkpoint)
        detail = f"{len(checkpoint.declared_artifacts)} declared files"
        if verification is not None:
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
            ),
            key=lambda op: op.request_seq,
        )
        requests = await self.attempt.requests_by_operation()
        for op in operations:
            request = requests[op.operation_id]
            await handle.client.call(request.tool, await resolve_arguments(self.artifacts, request.arguments))
        return len(operations)

    # ---------------------------------------------------------------------------------------------
    # Requests a previous attempt left without a result

    async def settle_open_operations(self, sub: SubagentSpec) -> None:
        """The effect table, as the recovery plan of the record states it for this subagent."""
        runtime = self.runtime
        assert runtime is not None, "the tool runtime settles open requests"
        plan = recovery_plan(await self.attempt.state())
        requests = await self.attempt.requests_by_operation()
        for action in plan.actions:
            if action.subagent != sub.name:
                continue
            request = requests[action.operation_id]
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
                await runtime.execute(sub, op.request_seq, requests[op.operation_id])


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


def latest_checkpoint_of(events: Sequence[Event], subagent: str) -> Checkpoint | None:
    """The newest verified checkpoint of a subagent, else its inputs checkpoint, else None."""
    latest_verified = None
    inputs = None
    for event in events:
        if isinstance(event, CheckpointEvent) and event.payload.subagent == subagent:
            if event.payload.verified:
                latest_verified = event.payload
            elif event.payload.checkpoint_id == f"{subagent}/inputs":
                inputs = event.payload
    return latest_verified or inputs
