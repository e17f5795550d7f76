"""The harness: one attempt at running a session, from recovery to completion.

An attempt takes the next fencing lease, records that it started, folds the record, gives every
subagent a clean sandbox restored from its last verified checkpoint (re-running the verification:
a different result means recovery needed something undeclared, and the attempt stops visibly),
settles the requests the previous attempt left without a result according to their effect class,
then runs every subagent's loop in parallel. Every tool request is recorded before it is
dispatched and its result after; a step finished with `update_plan` becomes a checkpoint.

A sandbox lost while the attempt runs (its pod deleted, its process dead) does not end the attempt:
the call that found it gone waits for a replacement, restores it from the last verified checkpoint
as a new attempt would, and the request runs again by its effect class.

Nothing here keeps progress in memory that the record does not also hold: a harness killed at any
point is replaced by a new attempt that reads the record and continues.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from belay import __version__
from belay.api.agentsession import AgentSession, ApprovalGrant, SubagentSpec, check_deliverable_name
from belay.harness.context import build_model_request
from belay.harness.declared import declared_paths
from belay.harness.models.base import ModelAdapter, ToolCall
from belay.harness.tools import ToolSpec, tool_spec
from belay.journal.approvals import ApprovalState, approval_state
from belay.journal.context import build_context
from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Actor,
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    CheckpointEvent,
    DeclaredArtifact,
    EffectClass,
    Event,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Note,
    NoteKind,
    OperationOutcome,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    ToolRequestEvent,
    ToolResult,
    Verification,
    Wait,
    WaitKind,
    canonical_json,
    now_utc,
    sha256_of,
)
from belay.journal.recovery import RecoveryActionKind, recovery_plan
from belay.journal.state import EMPTY, OperationRecord, SessionState, apply, operation_payload_sha256
from belay.sandbox.client import SandboxError, SandboxReplaced, SandboxUnavailable
from belay.stores.base import MAX_PAYLOAD_BYTES, ArtifactStore, EventStore, StaleLease

HARNESS_VERSION = f"belay-harness/{__version__}"
UNDECLARED_STATE = "UndeclaredState"
# Fault injection for the interruption tests and the drill: a comma-separated list of
# `<event type>:<key>`; the harness stops itself (SIGSTOP) right after recording a matching event,
# so the caller can kill it at exactly that point.
FAULT_ENV = "BELAY_FAULT_STOP_AFTER"
DONE_STATUSES = (TaskStatus.DONE, TaskStatus.VERIFIED)
CONTEXT_BUDGET_TOKENS = 8000
# A string argument above this size is stored as an artifact and referenced by hash.
LARGE_ARGUMENT_BYTES = 16 * 1024
CONTEXT_TAIL_EVENTS = 200


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


class TicketClient(Protocol):
    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]: ...

    async def find(self, client_ref: str) -> list[dict[str, Any]]: ...


class RecoveryFailed(Exception):
    """The session cannot go on from its record; the reason is recorded as an event too."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class BudgetExhausted(Exception):
    pass


@dataclass
class HarnessResult:
    completed: bool
    detail: str
    attempt: int


ModelFactory = Callable[[SubagentSpec, Callable[[], Awaitable[SessionState]]], ModelAdapter]


@dataclass
class Harness:
    session: AgentSession
    store: EventStore
    artifacts: ArtifactStore
    sandboxes: SandboxProvider
    model_factory: ModelFactory
    tickets: TicketClient | None = None
    # subagent -> (workspace path, bytes): declared inputs, recorded on the first attempt only
    inputs: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    holder: str = "local"
    model_id: str = ""
    runtime_image: str = "local"
    poll_interval_s: float = 0.05
    on_event: Callable[[Event], None] | None = None

    attempt: int = 0
    lease: int = 0
    _state: SessionState = EMPTY
    _state_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _append_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _handles: dict[str, SandboxHandle] = field(default_factory=dict)
    _fault_points: frozenset[str] = field(default_factory=frozenset)
    _model_calls: int = 0  # this session's model calls so far, counted from the record at start

    @property
    def session_id(self) -> str:
        return self.session.session_id

    # ---------------------------------------------------------------------------------------------
    # The record

    def actor(self, subagent: str | None = None) -> Actor:
        return Actor(
            kind="harness",
            attempt=self.attempt,
            harness_version=HARNESS_VERSION,
            model_id=self.model_id or None,
            subagent=subagent,
        )

    async def record(
        self, payloads: Sequence[Payload], *, subagent: str | None = None, parent_seq: int | None = None
    ) -> list[Event]:
        drafts = [EventDraft(payload=p, actor=self.actor(subagent), parent_seq=parent_seq) for p in payloads]
        # One append at a time from this attempt, so a fault stop never freezes the process in the
        # middle of another subagent's write (and with the store's write lock held).
        async with self._append_lock:
            events = await self.store.append(self.session_id, drafts, lease=self.lease)
            for event in events:
                if self.on_event is not None:
                    self.on_event(event)
            if self._fault_points and any(fault_key(e) in self._fault_points for e in events):
                os.kill(os.getpid(), signal.SIGSTOP)
        return events

    async def state(self) -> SessionState:
        """The fold of the record, brought up to date incrementally."""
        async with self._state_lock:
            fresh = await self.store.read(self.session_id, from_seq=self._state.last_seq + 1)
            state = self._state
            for event in fresh:
                state = apply(state, event)
            self._state = state
            return state

    async def events(self) -> list[Event]:
        return await self.store.read(self.session_id)

    # ---------------------------------------------------------------------------------------------
    # One attempt

    async def run(self) -> HarnessResult:
        self._fault_points = frozenset(p for p in os.environ.get(FAULT_ENV, "").split(",") if p)
        lease = await self.store.acquire_lease(self.session_id, self.holder)
        self.lease = lease.number
        self.attempt = lease.number
        try:
            return await self.attempt_session()
        except RecoveryFailed as failure:
            return HarnessResult(False, str(failure), self.attempt)
        except BudgetExhausted as exhausted:
            await self.record(
                [
                    Lifecycle(
                        kind=LifecycleKind.SESSION_FAILED,
                        attempt=self.attempt,
                        reason="BudgetExhausted",
                        detail=str(exhausted),
                    ),
                    Lifecycle(
                        kind=LifecycleKind.HARNESS_FINISHED, attempt=self.attempt, reason="BudgetExhausted"
                    ),
                ]
            )
            return HarnessResult(False, str(exhausted), self.attempt)
        except StaleLease:
            # A newer attempt holds the lease: this one must not write another event.
            return HarnessResult(
                False, f"attempt {self.attempt} was superseded by a newer attempt", self.attempt
            )
        finally:
            await asyncio.gather(*(h.stop() for h in self._handles.values()), return_exceptions=True)

    async def attempt_session(self) -> HarnessResult:
        state = await self.state()
        if state.lifecycle.completed:
            return HarnessResult(True, "the session had already completed", self.attempt)
        if state.request.version == 0:
            # Whoever starts the harness records the request first (the operator, or `belay run`).
            return HarnessResult(False, "the record holds no request to work on", self.attempt)
        self._model_calls = sum(1 for e in await self.events() if e.type == "model_output")
        await self.record_start(state)
        max_attempts = self.session.spec.recovery.max_attempts
        if self.attempt > max_attempts:
            detail = f"attempt {self.attempt} is beyond recovery.maxAttempts ({max_attempts})"
            await self.record(
                [
                    Lifecycle(
                        kind=LifecycleKind.SESSION_FAILED,
                        attempt=self.attempt,
                        reason="MaxAttempts",
                        detail=detail,
                    ),
                    Lifecycle(
                        kind=LifecycleKind.HARNESS_FINISHED, attempt=self.attempt, reason="MaxAttempts"
                    ),
                ]
            )
            return HarnessResult(False, detail, self.attempt)
        await all_of(self.prepare_sandbox(s) for s in self.session.spec.subagents)
        await all_of(self.run_subagent(s) for s in self.session.spec.subagents)
        return await self.finish()

    async def record_start(self, state: SessionState) -> None:
        spec = self.session.spec
        payloads: list[Payload] = []
        first = state.lifecycle.harness_starts == 0
        if state.lifecycle.harness_running:
            payloads.append(
                Lifecycle(
                    kind=LifecycleKind.HARNESS_LOST,
                    attempt=state.lifecycle.attempt,
                    reason="HarnessGone",
                    detail="the previous attempt stopped without recording an end",
                )
            )
        payloads.append(
            Lifecycle(
                kind=LifecycleKind.HARNESS_STARTED,
                attempt=self.attempt,
                lease=self.lease,
                detail=f"{HARNESS_VERSION}, model {self.model_id or 'unknown'}",
            )
        )
        if first:
            for sub in spec.subagents:
                payloads.append(
                    Task(
                        task_id=sub.name,
                        title=sub.role or sub.name,
                        status=TaskStatus.PLANNED,
                        owner=sub.name,
                        deliverable=sub.deliverable,
                    )
                )
        await self.record(payloads)

    async def finish(self) -> HarnessResult:
        state = await self.state()
        missing = [
            s.deliverable
            for s in self.session.spec.subagents
            if s.deliverable and s.deliverable not in state.deliverables
        ]
        if missing:
            detail = f"deliverables not published: {', '.join(missing)}"
            await self.record(
                [Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=self.attempt, detail=detail)]
            )
            return HarnessResult(False, detail, self.attempt)
        names = ", ".join(sorted(state.deliverables))
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.SESSION_COMPLETED,
                    attempt=self.attempt,
                    reason="DeliverablesPublished",
                    detail=f"every subtask done; deliverables: {names}",
                ),
                Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=self.attempt),
            ]
        )
        return HarnessResult(True, f"completed; deliverables: {names}", self.attempt)

    # ---------------------------------------------------------------------------------------------
    # Sandboxes and recovery

    async def prepare_sandbox(
        self, sub: SubagentSpec, lost: SandboxHandle | None = None, why: str = ""
    ) -> None:
        state = await self.state()
        known = state.subagents.get(sub.name)
        replacing = known is not None and known.sandbox_starts > 0
        await self.check_lease()
        handle = await self.sandboxes.start(sub, lost)
        self._handles[sub.name] = handle
        isolation = "network isolated" if handle.network_isolated else "network NOT isolated"
        detail = f"clean workspace, pid {handle.pid}, profile {sub.network_profile}, {isolation}"
        if lost is not None:
            detail = f"replaces instance {lost.instance}, lost under attempt {self.attempt} ({why}); {detail}"
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.SANDBOX_REPLACED if replacing else LifecycleKind.SANDBOX_STARTED,
                    attempt=self.attempt,
                    subagent=sub.name,
                    detail=detail,
                )
            ],
            subagent=sub.name,
        )
        checkpoint = latest_checkpoint_of(await self.events(), sub.name)
        if checkpoint is None:
            checkpoint = await self.record_inputs(sub)
        await self.restore(sub, handle, checkpoint)

    async def check_lease(self) -> None:
        """Raise StaleLease when a newer attempt holds the session. Starting a sandbox stops what
        runs in its place (locally the recorded server, in a cluster the pod's process), so an
        attempt that was only frozen must learn it was superseded before it starts one, not at
        its next append."""
        current = await self.store.current_lease(self.session_id)
        if current is None or current.number != self.lease:
            held = "no lease" if current is None else f"lease {current.number}"
            raise StaleLease(f"attempt {self.attempt} holds lease {self.lease}, the session has {held}")

    async def replace_sandbox(self, sub: SubagentSpec, lost: SandboxUnavailable) -> None:
        """The subagent's sandbox went away under this attempt: wait for a replacement and restore
        it from the last verified checkpoint exactly as a new attempt would (declared files, their
        hashes, the verification re-run, the idempotent operations after it replayed). A
        replacement lost during its own restore is replaced in turn, a bounded number of times."""
        tries = max(1, self.session.spec.recovery.max_attempts)
        for _ in range(tries):
            previous = self._handles[sub.name]
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
        state = await self.state()
        checkpoint = Checkpoint(
            checkpoint_id=f"{sub.name}/inputs",
            covers_seq=state.last_seq,
            runtime_image=sub.image or self.runtime_image,
            declared_artifacts=tuple(entries),
            subagent=sub.name,
        )
        await self.record([checkpoint], subagent=sub.name)
        return checkpoint

    async def restore(self, sub: SubagentSpec, handle: SandboxHandle, checkpoint: Checkpoint) -> None:
        from belay.sandbox.restore import restore as restore_declared

        await restore_declared(handle.client, self.artifacts, list(checkpoint.declared_artifacts))
        verification = checkpoint.verification
        if verification is not None:
            check = await self.verify(handle, verification.command, verification.exit_code or 0)
            if check.exit_code != verification.exit_code:
                detail = (
                    f"{sub.name}: re-running `{verification.command}` after restoring checkpoint "
                    f"{checkpoint.checkpoint_id} exited {check.exit_code}, the checkpoint recorded "
                    f"{verification.exit_code}: the workspace needed state that was never declared"
                )
                await self.record(
                    [
                        Lifecycle(
                            kind=LifecycleKind.RECOVERY_FAILED,
                            attempt=self.attempt,
                            reason=UNDECLARED_STATE,
                            detail=detail,
                            subagent=sub.name,
                            checkpoint_id=checkpoint.checkpoint_id,
                        ),
                        Lifecycle(
                            kind=LifecycleKind.HARNESS_FINISHED,
                            attempt=self.attempt,
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
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.RESTORED,
                    attempt=self.attempt,
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
        state = await self.state()
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
        requests = await self.requests_by_operation()
        for op in operations:
            request = requests[op.operation_id]
            await handle.client.call(request.tool, await self.resolve_arguments(request.arguments))
        return len(operations)

    async def requests_by_operation(self) -> dict[str, ToolRequest]:
        return {
            e.payload.operation_id: e.payload for e in await self.events() if isinstance(e, ToolRequestEvent)
        }

    async def verify(self, handle: SandboxHandle, command: str, expected_exit: int) -> Verification:
        response = await handle.client.call("run_command", {"command": command, "timeout_s": 600})
        output = response.get("output") or {}
        exit_code = int(output.get("exit_code", -1)) if response.get("ok") else -1
        return Verification(
            command=command,
            status="passed" if exit_code == expected_exit else "failed",
            exit_code=exit_code,
            output_sha256=sha256_of(output.get("stdout", "")),
        )

    # ---------------------------------------------------------------------------------------------
    # Requests a previous attempt left without a result

    async def settle_open_operations(self, sub: SubagentSpec) -> None:
        """The effect table, as the recovery plan of the record states it for this subagent."""
        plan = recovery_plan(await self.state())
        requests = await self.requests_by_operation()
        for action in plan.actions:
            if action.subagent != sub.name:
                continue
            request = requests[action.operation_id]
            if action.action in (RecoveryActionKind.RERUN, RecoveryActionKind.RERUN_WITH_KEY):
                await self.execute(sub, action.request_seq, request)
            elif action.action == RecoveryActionKind.AWAIT_RECONCILIATION:
                op = (await self.state()).operations[action.operation_id]
                await self.reconcile_unsafe(sub, op, request)
        # Reconciled as never having taken effect (by a person, while no harness ran): issue it now.
        state = await self.state()
        for op in sorted(state.operations.values(), key=lambda o: o.request_seq):
            if (
                op.subagent == sub.name
                and op.outcome == "reconciled"
                and op.reconciled_succeeded is False
                and not op.has_result
            ):
                await self.execute(sub, op.request_seq, requests[op.operation_id])

    async def reconcile_unsafe(self, sub: SubagentSpec, op: OperationRecord, request: ToolRequest) -> None:
        spec = tool_spec(op.tool)
        if op.outcome != "unknown":
            await self.record(
                [
                    OperationOutcome(
                        operation_id=op.operation_id,
                        outcome="unknown",
                        detail=f"{op.tool} was requested; no result was recorded before the harness stopped",
                    )
                ],
                subagent=sub.name,
                parent_seq=op.request_seq,
            )
        probe = await self.probe(spec, op.operation_id)
        if probe is None:
            await self.wait_for_reconciliation(sub, op, request)
            return
        if probe:
            await self.record(
                [
                    OperationOutcome(
                        operation_id=op.operation_id,
                        outcome="reconciled",
                        succeeded=True,
                        detail=f"{spec.reconcile_probe} found it: {probe[0]}",
                        by="probe",
                    ),
                    ToolResult(operation_id=op.operation_id, ok=True, output=probe[0]),
                ],
                subagent=sub.name,
                parent_seq=op.request_seq,
            )
            return
        await self.record(
            [
                OperationOutcome(
                    operation_id=op.operation_id,
                    outcome="reconciled",
                    succeeded=False,
                    detail=f"{spec.reconcile_probe} found nothing for {op.operation_id}: it never took "
                    "effect, so it is issued now",
                    by="probe",
                )
            ],
            subagent=sub.name,
            parent_seq=op.request_seq,
        )
        await self.execute(sub, op.request_seq, request)

    async def probe(self, spec: ToolSpec, operation_id: str) -> list[dict[str, Any]] | None:
        """What the reconcile probe finds, or None when there is no probe or it cannot answer."""
        if spec.reconcile_probe != "find_tickets" or self.tickets is None:
            return None
        try:
            return await self.tickets.find(operation_id)
        except Exception:
            return None

    async def wait_for_reconciliation(
        self, sub: SubagentSpec, op: OperationRecord, request: ToolRequest
    ) -> None:
        wait_id = f"reconcile-{op.operation_id}"
        state = await self.state()
        if wait_id not in state.waits:
            reason = (
                f"did {op.tool} ({op.operation_id}) take effect? Its outcome is unknown and it is never "
                f"repeated blindly: `belay approve {self.session_id} {wait_id}` if it did, "
                f"`belay reject {self.session_id} {wait_id}` if it did not"
            )
            await self.record(
                [Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason, condition=op.operation_id)],
                subagent=sub.name,
            )
        while True:
            current = (await self.state()).operations[op.operation_id]
            if current.outcome == "reconciled":
                break
            await asyncio.sleep(self.poll_interval_s)
        if current.reconciled_succeeded is False and not current.has_result:
            await self.execute(sub, op.request_seq, request)

    # ---------------------------------------------------------------------------------------------
    # The subagent loop

    async def run_subagent(self, sub: SubagentSpec) -> None:
        await self.settle_open_operations(sub)
        model = self.model_factory(sub, self.state)
        while True:
            state = await self.state()
            subtask = state.tasks.get(sub.name)
            if subtask is not None and subtask.status in DONE_STATUSES:
                return
            if subtask is not None and subtask.status == TaskStatus.PLANNED:
                await self.record(
                    [Task(task_id=sub.name, status=TaskStatus.RUNNING, owner=sub.name)], subagent=sub.name
                )
            budget = self.session.spec.budgets.max_model_calls
            if budget is not None and self._model_calls >= budget:
                raise BudgetExhausted(f"budgets.maxModelCalls ({budget}) used up")
            tail = await self.store.tail(self.session_id, CONTEXT_TAIL_EVENTS)
            shared = await build_context(self.store, self.session_id, state, CONTEXT_BUDGET_TOKENS)
            request = build_model_request(
                state, tail, sub.name, sub.role, sub.deliverable, record_context=shared.to_text()
            )
            self._model_calls += 1
            turn = await model.complete(request)
            if turn.model_id:  # the exact model snapshot the provider reports
                self.model_id = turn.model_id
            if not turn.tool_calls:
                await self.record(
                    [
                        ModelOutput(
                            text=turn.text, input_tokens=turn.input_tokens, output_tokens=turn.output_tokens
                        ),
                        Task(task_id=sub.name, status=TaskStatus.DONE, owner=sub.name, detail=turn.text),
                    ],
                    subagent=sub.name,
                )
                return
            requests = [await self.describe_call(sub, state, call) for call in turn.tool_calls]
            payloads: list[Payload] = [
                ModelOutput(
                    text=turn.text,
                    tool_calls=tuple(r.operation_id for r in requests),
                    input_tokens=turn.input_tokens,
                    output_tokens=turn.output_tokens,
                )
            ]
            for tool_request in requests:
                payloads.append(tool_request)
                if self.needs_approval(sub, tool_request.tool):
                    payloads.append(
                        ApprovalRequest(
                            approval_id=approval_id_for(tool_request.operation_id),
                            operation_id=tool_request.operation_id,
                            tool=tool_request.tool,
                            payload_sha256=tool_request.payload_sha256,
                            summary=f"{sub.name} wants to run {tool_request.tool} "
                            f"{_short(tool_request.arguments)}",
                        )
                    )
            recorded = await self.record(payloads, subagent=sub.name)
            seq_of = {e.payload.operation_id: e.seq for e in recorded if isinstance(e, ToolRequestEvent)}
            for tool_request in requests:
                await self.execute(sub, seq_of[tool_request.operation_id], tool_request)

    async def describe_call(self, sub: SubagentSpec, state: SessionState, call: ToolCall) -> ToolRequest:
        spec = tool_spec(call.name)
        operation_id = (
            call.call_id if call.call_id.startswith(f"{sub.name}.") else f"{sub.name}.{call.call_id}"
        )
        if operation_id in state.operations:
            raise RuntimeError(f"the model reused operation id {operation_id!r}")
        arguments = dict(call.arguments)
        if spec.name == "publish_deliverable" and isinstance(arguments.get("path"), str):
            # The request (and any approval of it) binds the exact bytes that will leave the sandbox.
            # A path the sandbox refuses is left unbound here; its dispatch then fails visibly.
            while True:
                try:
                    [entry] = await self._handles[sub.name].client.manifest([arguments["path"]])
                    arguments["content_sha256"] = entry.sha256
                except SandboxUnavailable as lost:
                    await self.replace_sandbox(sub, lost)
                    continue
                except SandboxError:
                    pass
                break
        arguments = await self.externalize_arguments(arguments)
        return ToolRequest(
            operation_id=operation_id,
            tool=spec.name,
            arguments=arguments,
            effect=spec.effect,
            step=current_step_of(state, sub.name),
            subagent=sub.name,
            idempotency_key=operation_id if spec.effect == EffectClass.KEYED else None,
            payload_sha256=operation_payload_sha256(spec.name, arguments),
        )

    async def externalize_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Large string arguments (a whole file to write) go to the artifact store; the request
        keeps their hash, so the record stays small and an approval still binds the exact bytes."""
        result = dict(arguments)
        for key, value in arguments.items():
            if isinstance(value, str) and len(value.encode()) > LARGE_ARGUMENT_BYTES:
                ref = await asyncio.to_thread(self.artifacts.put, value.encode(), media_type="text/plain")
                result[key] = {ARTIFACT_ARGUMENT: ref.sha256, "size": ref.size}
        return result

    async def resolve_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        result = dict(arguments)
        for key, value in arguments.items():
            if isinstance(value, dict) and set(value) == {ARTIFACT_ARGUMENT, "size"}:
                data = await asyncio.to_thread(self.artifacts.get, value[ARTIFACT_ARGUMENT])
                result[key] = data.decode()
        return result

    def needs_approval(self, sub: SubagentSpec, tool: str) -> bool:
        required = self.session.spec.approval_required
        return tool_spec(tool).needs_approval or tool in required or f"{sub.name}:{tool}" in required

    # ---------------------------------------------------------------------------------------------
    # Dispatch

    async def execute(self, sub: SubagentSpec, request_seq: int, request: ToolRequest) -> None:
        spec = tool_spec(request.tool)
        state = await self.state()
        if request.operation_id in state.approvals_by_operation or self.needs_approval(sub, request.tool):
            granted, why = await self.wait_for_approval(sub, request)
            if not granted:
                await self.record(
                    [ToolResult(operation_id=request.operation_id, ok=False, error=why)],
                    subagent=sub.name,
                    parent_seq=request_seq,
                )
                return
        while True:
            try:
                if spec.where == "sandbox":
                    payloads = await self.run_in_sandbox(sub, request)
                else:
                    payloads = await self.run_in_harness(sub, request_seq, request)
                break
            except SandboxUnavailable as lost:
                await self.replace_sandbox(sub, lost)
            # The answer was lost with the sandbox: the effect table decides, as after a lost
            # harness. An unsafe operation may have taken effect and is never repeated blindly;
            # any other runs again, on the restored sandbox.
            if spec.effect == EffectClass.UNSAFE:
                await self.reconcile_unsafe(
                    sub, (await self.state()).operations[request.operation_id], request
                )
                return
        await self.record(payloads, subagent=sub.name, parent_seq=request_seq)

    async def run_in_sandbox(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        arguments = await self.resolve_arguments(request.arguments)
        response = await self._handles[sub.name].client.call(request.tool, arguments)
        return [
            await self.tool_result(
                request.operation_id, response.get("ok", False), response.get("output"), response.get("error")
            )
        ]

    async def tool_result(
        self, operation_id: str, ok: bool, output: Any, error: str | None = None
    ) -> ToolResult:
        body = canonical_json(output)
        if len(body) > MAX_PAYLOAD_BYTES // 2:
            ref = await asyncio.to_thread(self.artifacts.put, body, media_type="application/json")
            summary = {"stored_as_artifact": ref.sha256, "size": ref.size}
            return ToolResult(operation_id=operation_id, ok=ok, output=summary, error=error, output_ref=ref)
        return ToolResult(operation_id=operation_id, ok=ok, output=output, error=error)

    async def run_in_harness(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest
    ) -> list[Payload]:
        handler = {
            "publish_deliverable": self.publish_deliverable,
            "record_note": self.record_note,
            "update_plan": self.update_plan,
            "wait_on_user": self.wait_on_user,
            "wait_on_external": self.wait_on_external,
            "create_ticket": self.create_ticket,
            "request_approval": self.approved,
        }[request.tool]
        try:
            return await handler(sub, request)
        except (KeyError, ValueError, TypeError) as error:
            return [ToolResult(operation_id=request.operation_id, ok=False, error=f"bad arguments: {error}")]

    async def approved(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        return [ToolResult(operation_id=request.operation_id, ok=True, output={"approved": True})]

    async def publish_deliverable(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        path = request.arguments["path"]
        name = check_deliverable_name(request.arguments.get("name") or path.rsplit("/", 1)[-1])
        try:
            data = await self._handles[sub.name].client.get_file(path)
        except SandboxUnavailable:
            raise
        except SandboxError as error:
            return [ToolResult(operation_id=request.operation_id, ok=False, error=str(error))]
        ref = await asyncio.to_thread(self.artifacts.put, data)
        expected = request.arguments.get("content_sha256")
        if expected and ref.sha256 != expected:
            return [
                ToolResult(
                    operation_id=request.operation_id,
                    ok=False,
                    error=f"{path} changed since it was requested ({ref.sha256}, requested {expected})",
                )
            ]
        location = await asyncio.to_thread(self.artifacts.location, ref.sha256)
        ref = ArtifactRef(
            sha256=ref.sha256, size=ref.size, media_type=ref.media_type, uri=ref.uri or location
        )
        return [
            Artifact(
                name=name,
                ref=ref,
                deliverable=True,
                subagent=sub.name,
                description=request.arguments.get("description", f"{sub.name}: {path}"),
                result_id=f"deliverable:{name}",
            ),
            Wait(
                wait_id=f"review-{name}",
                kind=WaitKind.READY_FOR_REVIEW,
                reason=f"{name} is ready for review: belay artifacts get {self.session_id} {name} -o {name}",
                artifact=name,
            ),
            ToolResult(
                operation_id=request.operation_id,
                ok=True,
                output={"name": name, "sha256": ref.sha256, "size": ref.size},
            ),
        ]

    async def record_note(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        args = request.arguments
        note = Note(
            note_id=args["note_id"],
            kind=NoteKind(args.get("kind", "finding")),
            text=args["text"],
            status=args.get("status", "open"),
            evidence=tuple(args.get("evidence", ())),
        )
        return [
            note,
            ToolResult(operation_id=request.operation_id, ok=True, output={"note_id": note.note_id}),
        ]

    async def update_plan(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        args = request.arguments
        step = str(args["step"])
        task_id = f"{sub.name}/{step}"
        if args.get("status", "running") != "done":
            return [
                Task(task_id=task_id, title=args.get("title", ""), status=TaskStatus.RUNNING, owner=sub.name),
                ToolResult(
                    operation_id=request.operation_id, ok=True, output={"step": step, "status": "running"}
                ),
            ]
        return await self.checkpoint(sub, request, step)

    async def checkpoint(self, sub: SubagentSpec, request: ToolRequest, step: str) -> list[Payload]:
        """A step boundary: declared files into the artifact store, the verification run."""
        client = self._handles[sub.name].client
        listing = await client.call("list_files", {"path": "."})
        files = (listing.get("output") or {}).get("files", [])
        paths = declared_paths(files, sub.declared)
        entries = await client.manifest(paths) if paths else []
        declared = []
        for entry in entries:
            data = await client.get_file(entry.name)
            ref = await asyncio.to_thread(self.artifacts.put, data)
            if ref.sha256 != entry.sha256:
                raise RuntimeError(f"{entry.name} changed while it was checkpointed")
            declared.append(entry.model_copy(update={"uri": ref.uri}))
        verification = None
        command = request.arguments.get("verify")
        if command:
            verification = await self.verify(
                self._handles[sub.name], str(command), int(request.arguments.get("expect_exit_code", 0))
            )
        state = await self.state()
        done = sorted(
            t.task_id.split("/", 1)[1]
            for t in state.tasks.values()
            if t.owner == sub.name and t.task_id.startswith(f"{sub.name}/") and t.status in DONE_STATUSES
        )
        verified = verification is not None and verification.status == "passed"
        detail = (
            ""
            if verification is None
            else f"verification `{verification.command}` exit {verification.exit_code}"
        )
        return [
            Task(
                task_id=f"{sub.name}/{step}",
                status=TaskStatus.VERIFIED if verified else TaskStatus.DONE,
                owner=sub.name,
                detail=detail,
            ),
            Checkpoint(
                checkpoint_id=f"{sub.name}/{step}",
                covers_seq=state.last_seq,
                runtime_image=sub.image or self.runtime_image,
                completed_steps=tuple(sorted({*done, step})),
                declared_artifacts=tuple(declared),
                verification=verification,
                subagent=sub.name,
            ),
            ToolResult(
                operation_id=request.operation_id,
                ok=True,
                output={
                    "step": step,
                    "status": "verified" if verified else "done",
                    "declared": len(declared),
                },
            ),
        ]

    async def wait_on_user(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        wait_id = f"wait-{request.operation_id}"
        reason = request.arguments.get("reason", "")
        return await self._wait(sub, request, Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason))

    async def wait_on_external(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        wait = Wait(
            wait_id=f"wait-{request.operation_id}",
            kind=WaitKind.ON_EXTERNAL,
            reason=request.arguments.get("reason", ""),
            condition=request.arguments.get("condition"),
        )
        return await self._wait(sub, request, wait)

    async def _wait(self, sub: SubagentSpec, request: ToolRequest, wait: Wait) -> list[Payload]:
        if wait.wait_id not in (await self.state()).waits:
            await self.record([wait], subagent=sub.name)
        while wait.wait_id in (await self.state()).open_waits:
            await asyncio.sleep(self.poll_interval_s)
        return [
            ToolResult(
                operation_id=request.operation_id, ok=True, output={"wait_id": wait.wait_id, "resolved": True}
            )
        ]

    async def create_ticket(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        if self.tickets is None:
            return [
                ToolResult(
                    operation_id=request.operation_id, ok=False, error="no ticket service is configured"
                )
            ]
        ticket = await self.tickets.create(
            request.arguments["title"], request.arguments.get("body", ""), client_ref=request.operation_id
        )
        return [ToolResult(operation_id=request.operation_id, ok=True, output=ticket)]

    # ---------------------------------------------------------------------------------------------
    # Approvals

    async def wait_for_approval(self, sub: SubagentSpec, request: ToolRequest) -> tuple[bool, str]:
        approval_id = approval_id_for(request.operation_id)
        state = await self.state()
        if approval_id not in state.approvals:
            await self.record(
                [
                    ApprovalRequest(
                        approval_id=approval_id,
                        operation_id=request.operation_id,
                        tool=request.tool,
                        payload_sha256=request.payload_sha256,
                        summary=f"{sub.name} wants to run {request.tool} {_short(request.arguments)}",
                    )
                ],
                subagent=sub.name,
            )
        grant = declared_grant(self.session.spec.approvals, request, approval_id, now_utc())
        record = (await self.state()).approvals[approval_id]
        if grant is not None and record.decision is None:
            await self.record(
                [
                    Approval(
                        approval_id=approval_id,
                        operation_id=request.operation_id,
                        payload_sha256=request.payload_sha256,
                        granted=True,
                        by="manifest",
                        reason="approved in the AgentSession spec",
                        expires_at=grant.expires_at,
                    )
                ],
                subagent=sub.name,
            )
        while True:
            state = await self.state()
            decision = approval_state(state, request.operation_id, request.payload_sha256, now_utc())
            if decision == ApprovalState.GRANTED:
                return True, ""
            if decision == ApprovalState.REJECTED:
                record = state.approvals[approval_id]
                return (
                    False,
                    f"rejected by {record.decided_by or 'the user'}: {record.decision_reason}".rstrip(": "),
                )
            if decision == ApprovalState.EXPIRED:
                return False, "the approval expired before the operation was dispatched"
            # Pending, or decided for another payload: that never dispatches this one.
            await asyncio.sleep(self.poll_interval_s)


async def answers(handle: SandboxHandle) -> bool:
    """Whether the very instance the handle is bound to still answers."""
    try:
        await handle.client.health()
    except SandboxError:
        return False
    return True


async def all_of(coroutines: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; on the first failure cancel the others, wait for them, and raise it."""
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in coroutines:
                group.create_task(coroutine)
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None


def declared_grant(
    grants: Sequence[ApprovalGrant], request: ToolRequest, approval_id: str, now: datetime
) -> ApprovalGrant | None:
    """An approval given in the spec for exactly this operation and payload, still in force."""
    for grant in grants:
        names_it = grant.operation_id == request.operation_id or grant.approval_id == approval_id
        if not names_it or grant.payload_sha256 != request.payload_sha256:
            continue
        if grant.expires_at is not None and grant.expires_at <= now:
            continue
        return grant
    return None


def approval_id_for(operation_id: str) -> str:
    return f"approve-{operation_id}"


def current_step_of(state: SessionState, subagent: str) -> str | None:
    running = [
        t
        for t in state.tasks.values()
        if t.owner == subagent and t.task_id.startswith(f"{subagent}/") and t.status == TaskStatus.RUNNING
    ]
    if not running:
        return None
    return max(running, key=lambda t: t.last_seq).task_id


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


def fault_key(event: Event) -> str:
    """`<type>:<identity>`: names an event the same way in every run, whatever its seq."""
    payload = event.payload
    for attribute in (
        "operation_id",
        "checkpoint_id",
        "wait_id",
        "task_id",
        "note_id",
        "approval_id",
        "name",
    ):
        key = getattr(payload, attribute, None)
        if key:
            return f"{event.type}:{key}"
    return f"{event.type}:{getattr(payload, 'kind', '')}"


def _short(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in sorted(arguments.items()) if k != "content")
    return text if len(text) <= 160 else text[:157] + "..."
