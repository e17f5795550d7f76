"""The tool runtime: runs what an executor decided, under effect classes and approvals.

Whoever decides the next action (an executor), the runtime does it: every tool request is recorded
before it is dispatched and its result after; a call that needs an approval waits for one bound to
its payload hash, and what that hash covers is in the artifact store before the approval is asked
for, so a person can read it; a sandbox call that finds its sandbox gone waits for a restored
replacement and runs again by its effect class; an `unsafe` call whose outcome is unknown is probed
or shown for reconciliation, never repeated blindly, and one that failed waits on a person (try it
again, or go on without it) instead of passing silently.

A new attempt settles the requests an earlier one left without a result the same way, by the
effect table of the record's recovery plan (`settle_open_operations`).

Every result, artifact, note and checkpoint is recorded with what it was derived from: the request
version the call was decided under, the request parts its step depends on, and the checkpoint its
step started from (by result id and patch hash). A scope change or a rejection invalidates exactly
what depended on it; the runtime then restores the subagent's sandbox from the last checkpoint
that is still valid before anything else runs there.

The tools that run in the harness itself (deliverables, notes, plan steps and their checkpoints,
waits, tickets) are in `belay.harness.harness_tools`.

Two guards stand between a tool and the record or the world: what a tool is asked and what it
answers pass through the redactor (`belay.harness.redaction`) before they are recorded, and a
`keyed` or `unsafe` call is made only after the attempt has checked, right then, that it still
holds the session's lease (`fence`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import Any

from belay.api.agentsession import SubagentSpec
from belay.harness.approval_terms import (
    approval_id_for,
    approval_request,
    declared_grant,
    latest_retry,
    not_run_withdrawn,
    retry_approval_id,
)
from belay.harness.arguments import externalize_arguments, resolve_arguments
from belay.harness.attempt import Attempt
from belay.harness.bounded import store_file, stored_when_too_large, with_caps
from belay.harness.effect_marks import EffectMarks
from belay.harness.harness_tools import run_in_harness, step_failed_by
from belay.harness.mcp_tools import OutcomeUnknown, ServerTools
from belay.harness.models.base import ToolCall
from belay.harness.recovery import Recovery
from belay.harness.redaction import Redactor, scanned
from belay.harness.stopping import InFlight
from belay.harness.tickets import TicketClient
from belay.journal import commands
from belay.journal.approvals import ApprovalState, approval_state
from belay.journal.claims import approval_claim
from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Approval,
    ApprovalRequest,
    Artifact,
    Checkpoint,
    DerivedFrom,
    EffectClass,
    Event,
    Note,
    OperationOutcome,
    Payload,
    ToolRequest,
    ToolResult,
    Wait,
    WaitKind,
    canonical_json,
    now_utc,
)
from belay.journal.operations import DerivedOperation
from belay.journal.recovery import RecoveryActionKind, recovery_plan
from belay.journal.state import (
    GOAL_PART,
    OperationRecord,
    SessionState,
    operation_payload_sha256,
)
from belay.journal.tools import (
    ToolSpec,
    argument_problem,
    call_arguments,
    effect_of,
    is_known_tool,
    tool_spec,
    unknown_tool,
)
from belay.sandbox.client import SandboxError, SandboxNotAnswering, SandboxUnavailable
from belay.stores.base import MAX_PAYLOAD_BYTES, ArtifactStore, ClaimTaken, PayloadTooLarge
from belay.views.escaping import one_line

# Test switch: `BELAY_EFFECT_FENCE=off` makes keyed and unsafe calls without checking the lease
# first, so the frozen-harness test can show that its check finds the duplicate without the fence.
FENCE_ENV = "BELAY_EFFECT_FENCE"
FENCED_EFFECTS = (EffectClass.KEYED, EffectClass.UNSAFE)
# How many unmarked findings a reason names: anyone can file many, the person needs a few.
SHOWN_UNMARKED = 5
# How many times one call may lose its sandbox (each time replaced, restored and the call run
# again) before the call fails with the reason instead of running once more.
SANDBOX_LOSSES_PER_CALL = 2


@dataclass
class ToolRuntime:
    attempt: Attempt
    artifacts: ArtifactStore
    recovery: Recovery
    tickets: TicketClient | None = None
    # The key of the marks on external effects' references, held outside every sandbox.
    effect_key: bytes = b""
    poll_interval_s: float = 0.05
    # Someone starts the child sessions this attempt records (HarnessToolContext.children_followed).
    children_followed: bool = False
    redactor: Redactor = field(default_factory=Redactor.from_environment)
    fenced: bool = field(default_factory=lambda: os.environ.get(FENCE_ENV) != "off")
    in_flight: InFlight = field(default_factory=InFlight)
    servers: ServerTools = field(default_factory=ServerTools)  # this attempt's MCP tool listings

    def __post_init__(self) -> None:
        if self.tickets is not None and self.tickets.token:
            self.redactor = self.redactor.holding(self.tickets.token, "ticket service credential")

    @property
    def session_id(self) -> str:
        return self.attempt.session_id

    @property
    def session_name(self) -> str:
        """The session's name, which the commands a person runs take (in a cluster its record's id
        also names its namespace: `belay.controller.names.record_id`)."""
        return self.attempt.session.metadata.name

    @property
    def marks(self) -> EffectMarks:
        return EffectMarks(self.effect_key, self.session_id)

    @property
    def in_cluster(self) -> bool:
        """Whether this attempt runs in a harness pod (its lease holder is the pod)."""
        return self.attempt.holder.startswith("pod:")

    def command(self, command: str) -> str:
        """A command for a person, spelled where they reach the session: `kubectl belay` in a
        cluster, `belay` on this machine."""
        return commands.in_cluster(command) if self.in_cluster else command

    # ---------------------------------------------------------------------------------------------
    # Requests

    async def describe_call(
        self, sub: SubagentSpec, state: SessionState, call: ToolCall, derived: DerivedOperation
    ) -> ToolRequest:
        """The request to record for one decided call: its operation id (derived from the record,
        `belay.journal.operations`) beside the executor's own id of the call, its effect class
        and the hash of its payload (what an approval binds)."""
        spec = tool_spec(call.name)
        effect = effect_of(spec.name, sub.network_profile, sub.command_effect)
        effect = self.servers.effect(sub, spec.name) if spec.where == "server" else effect
        operation_id = derived.operation_id
        if operation_id in state.operations:
            raise RuntimeError(f"the executor reused operation id {operation_id!r}")
        arguments = dict(call.arguments)
        for key in spec.harness_set:
            arguments.pop(key, None)  # the harness's to set, never a call's
        if spec.name == "publish_deliverable" and isinstance(arguments.get("path"), str):
            # The request (and any approval of it) binds the exact bytes that will leave the sandbox.
            # A path the sandbox refuses is left unbound here; its dispatch then fails visibly.
            while True:
                try:
                    [entry] = await self.recovery.handle(sub.name).client.manifest([arguments["path"]])
                    arguments["content_sha256"] = entry.sha256
                except SandboxUnavailable as lost:
                    await self.recovery.replace_sandbox(sub, lost)
                    continue
                except SandboxError:
                    pass
                break
        # The request runs as it is recorded: a secret in it is replaced before either.
        redacted = await scanned(self.redactor.arguments, arguments)
        arguments = await externalize_arguments(self.artifacts, redacted.value)
        return ToolRequest(
            operation_id=operation_id,
            tool=spec.name,
            arguments=arguments,
            effect=effect,
            step=derived.step,
            subagent=sub.name,
            idempotency_key=operation_id if effect == EffectClass.KEYED else None,
            payload_sha256=operation_payload_sha256(spec.name, arguments),
            redactions=redacted.count,
            provider_call_id=call.call_id if call.call_id != operation_id else None,
        )

    def needs_approval(self, sub: SubagentSpec, tool: str) -> bool:
        required = self.attempt.session.spec.approval_required
        return tool_spec(tool).needs_approval or tool in required or f"{sub.name}:{tool}" in required

    async def approval_request(
        self, sub: SubagentSpec, request: ToolRequest, *, kind: str = "dispatch", summary: str = ""
    ) -> ApprovalRequest:
        """The approval to ask for, after storing what it binds where a person can fetch it: the
        canonical payload (its sha256 is the one approved) and, for a deliverable, the bytes."""
        body = canonical_json({"tool": request.tool, "arguments": request.arguments})
        payload_ref = await asyncio.to_thread(self.artifacts.put, body, media_type="application/json")
        content_ref, content_name = None, None
        path, expected = request.arguments.get("path"), request.arguments.get("content_sha256")
        if request.tool == "publish_deliverable" and isinstance(path, str) and isinstance(expected, str):
            try:
                stored = await store_file(self.recovery.handle(sub.name).client, self.artifacts, path)
            except SandboxError:
                stored = None  # gone since it was described: the dispatch fails visibly
            if stored is not None and stored.sha256 == expected:
                content_ref = stored
                content_name = request.arguments.get("name") or path.rsplit("/", 1)[-1]
        base = approval_request(sub, request)
        return base.model_copy(
            update={
                "payload_ref": payload_ref,
                "content_ref": content_ref,
                "content_name": content_name,
                "kind": kind,
                **({"summary": summary} if summary else {}),
            }
        )

    # ---------------------------------------------------------------------------------------------
    # Dispatch

    async def execute(self, sub: SubagentSpec, request_seq: int, request: ToolRequest) -> list[Event]:
        """Run one recorded request to its recorded end; returns what was recorded for it."""
        try:
            await self.recovery.rewind_if_reopened(sub)
        except SandboxUnavailable as lost:
            await self.recovery.replace_sandbox(sub, lost)  # restored from the last valid checkpoint
        # Whether the call waits on a person: the rule, or an approval asked for it before (and
        # recorded by an attempt, so known); the wait itself reads the record for the answer.
        state = await self.attempt.known_state()
        if request.operation_id in state.approvals_by_operation or self.needs_approval(sub, request.tool):
            granted, why = await self.wait_for_approval(sub, request)
            if not granted:
                return await self.attempt.record(
                    [ToolResult(operation_id=request.operation_id, ok=False, error=why)],
                    subagent=sub.name,
                    parent_seq=request_seq,
                )
        return await self.run_to_result(sub, request_seq, request)

    async def run_to_result(self, sub: SubagentSpec, request_seq: int, request: ToolRequest) -> list[Event]:
        """Dispatch a request that may run and record its result, with what it was derived from.
        An unsafe operation that failed is recorded with a request to retry it, and waits."""
        if request.effect == EffectClass.UNSAFE:
            found = await self.found_before_call(sub, request_seq, request)
            if found is not None:
                return found
        replaced, last_loss, silent = 0, "", 0
        while True:
            try:
                recorded, retry_id = await self.in_flight.run(
                    request.operation_id, request.tool, self.dispatch(sub, request_seq, request)
                )
                break
            except OutcomeUnknown as unanswered:  # sent to a tool server, never answered
                op = (await self.attempt.state()).operations[request.operation_id]
                return await self.reconcile_unsafe(sub, op, request, str(unanswered))
            except SandboxUnavailable as lost:
                await self.recovery.replace_sandbox(sub, lost)
                replaced, last_loss = replaced + 1, str(lost)
                silent += isinstance(lost, SandboxNotAnswering)
            # The answer was lost with the sandbox: the effect table decides, as after a lost
            # harness. An unsafe operation may have taken effect and is never repeated blindly;
            # any other runs again, on the restored sandbox.
            if request.effect == EffectClass.UNSAFE:
                op = (await self.attempt.state()).operations[request.operation_id]
                return await self.reconcile_unsafe(sub, op, request)
            if replaced >= SANDBOX_LOSSES_PER_CALL:
                # Lost again under the same call: most likely the call itself kills its sandbox
                # (`kill -9 $PPID`, `pkill python`), and running it again would replace sandboxes
                # forever. The call fails; the step goes on with a sandbox restored once more.
                why = lost_its_sandbox(request.tool, replaced, silent, last_loss)
                return await self.record_refused(sub, request_seq, request, why)
        if retry_id is None:
            return recorded
        return recorded + await self.await_retry(sub, request_seq, request, retry_id)

    async def dispatch(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest
    ) -> tuple[list[Event], str | None]:
        """The call itself and its recorded result (with the id of a retry approval it asks for
        when an unsafe call failed): once begun, a stop lets it finish (within the stop's bound,
        belay.harness.stopping)."""
        spec = tool_spec(request.tool)
        # Large values come back from the artifact store for every tool, sandbox or harness, and
        # the schema is checked on what the tool would be given, before anything else reads it.
        arguments = await resolve_arguments(self.artifacts, request.arguments)
        if not is_known_tool(request.tool):
            problem: str | None = unknown_tool(request.tool)
        elif spec.where == "server":
            problem = self.servers.refusal(sub, request, arguments)
        else:
            problem = argument_problem(request.tool, call_arguments(request.tool, arguments))
        if problem is not None:
            # What was sent is the call's fault, never the harness's: its error result, and no
            # retry for an external effect (the same arguments would fail the same way).
            return await self.record_refused(sub, request_seq, request, problem), None
        await self.fence(request.effect)
        resolved = request.model_copy(update={"arguments": arguments})
        if spec.where == "sandbox":
            payloads = await self.run_in_sandbox(sub, resolved)
        elif spec.where == "server":
            ok, output, error = await self.servers.call(self, sub, resolved, arguments)
            payloads = [await self.tool_result(request.operation_id, ok, output, error, subagent=sub.name)]
        else:
            payloads = await run_in_harness(self, sub, resolved)
        state = await self.attempt.known_state()  # the request's provenance: recorded by this attempt
        payloads = with_provenance(payloads, provenance(state, sub.name, request), request)
        # A failure waits on a person only for a tool whose failure is known to have taken no
        # effect (the catalogue's unsafe tools); a command in a networked sandbox is unsafe for a
        # recovery, but its failure (a timeout, a wall) is its own answer to the model.
        # A server tool's failure is its own answer (whether it took effect only the server knows).
        failure = None if spec.where == "server" else failed_effect(spec.effect, request, payloads)
        retry = None
        if failure is not None:
            summary = (
                f"{request.tool} ({request.operation_id}) failed and took no effect: {failure}. Approve to "
                "try it once more; reject (with a reason) to go on without it"
            )
            retries = sum(a.kind == "retry" for a in state.approvals_for(request.operation_id))
            retry = await self.approval_request(sub, request, kind="retry", summary=summary)
            retry = retry.model_copy(
                update={"approval_id": retry_approval_id(request.operation_id, retries + 1)}
            )
            payloads.append(retry)
        try:
            recorded = await self.attempt.record(payloads, subagent=sub.name, parent_seq=request_seq)
        except PayloadTooLarge as error:
            if spec.effect == EffectClass.UNSAFE:
                raise  # it may have taken effect: its outcome is reconciled, never called failed
            why = f"what {request.tool} made is too large for the record: {error}"
            return await self.record_refused(sub, request_seq, request, why), None
        return recorded, retry.approval_id if retry is not None else None

    async def record_refused(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest, why: str
    ) -> list[Event]:
        """A call that is not run (or whose sandbox it killed), recorded as its failed result saying
        why; a step it would have finished fails with it."""
        state = await self.attempt.known_state()
        result = await self.tool_result(request.operation_id, False, None, why, subagent=sub.name)
        payloads = with_provenance(
            [*step_failed_by(sub, request, why), result], provenance(state, sub.name, request), request
        )
        return await self.attempt.record(payloads, subagent=sub.name, parent_seq=request_seq)

    async def record_not_run(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest, why: str
    ) -> None:
        """A call answered with a failed result saying why it is not run; its step goes on."""
        state = await self.attempt.known_state()
        result = await self.tool_result(request.operation_id, False, None, why, subagent=sub.name)
        payloads = with_provenance([result], provenance(state, sub.name, request), request)
        await self.attempt.record(payloads, subagent=sub.name, parent_seq=request_seq)

    async def await_retry(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest, approval_id: str
    ) -> list[Event]:
        """Wait for a person's answer on a failed external effect: granted, it runs once more;
        rejected, the session goes on without it (the failure and the reason stay in the record)."""
        while True:
            record = (await self.attempt.state()).approvals.get(approval_id)
            if record is not None and record.decision == "granted":
                return await self.run_to_result(sub, request_seq, request)
            if record is not None and (record.decision == "rejected" or record.withdrawn_seq is not None):
                return []  # rejected, or withdrawn by a change that reopened its step
            await asyncio.sleep(self.poll_interval_s)

    async def fence(self, effect: EffectClass) -> None:
        """Right before a keyed or unsafe call: raise StaleLease if a newer attempt holds the
        session. The store refuses a superseded attempt's appends, but not its calls to the world:
        an attempt that was frozen and woke up beside its replacement would otherwise create the
        ticket its replacement already created. What remains is the time between this read and
        the call (docs/security.md, "Fenced effects")."""
        if self.fenced and effect in FENCED_EFFECTS:
            await self.attempt.check_lease()

    async def run_in_sandbox(self, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
        """A sandbox tool's call (its arguments resolved and checked) and its result."""
        arguments = request.arguments
        client = self.recovery.handle(sub.name).client
        # The sandbox's token is a secret the harness holds: its output never records it.
        self.redactor = self.redactor.holding(client.token, "sandbox token")
        limits = self.attempt.session.spec.limits
        try:
            response = await client.call(request.tool, with_caps(request.tool, arguments, limits))
        except SandboxUnavailable:
            raise
        except SandboxError as refused:
            # A refusal by the sandbox (a request it will not take) is the call's failed result.
            response = {"ok": False, "output": None, "error": str(refused)}
        answer = await stored_when_too_large(client, self.artifacts, request.tool, response)
        response = answer.response
        ok, output, error = response.get("ok", False), response.get("output"), response.get("error")
        result = await self.tool_result(request.operation_id, ok, output, error, subagent=sub.name)
        return [result.model_copy(update={"output_ref": answer.stored}) if answer.stored else result]

    async def tool_result(
        self, operation_id: str, ok: bool, output: Any, error: str | None = None, subagent: str | None = None
    ) -> ToolResult:
        """The result to record, redacted; with `subagent`, also of a held value split between its
        previous output and this one."""
        redacted = await scanned(functools.partial(self.redactor.output, subagent=subagent), [output, error])
        output, error = redacted.value
        if isinstance(error, str):
            error = one_line(error)  # the model and the page read an error as one line
        result = ToolResult(
            operation_id=operation_id, ok=ok, output=output, error=error, redactions=redacted.count
        )
        return await self.stored_when_large(result)

    async def redacted_result(self, result: ToolResult) -> ToolResult:
        """A result a harness tool built, with the redaction and the size bound `tool_result` gives
        every other (a ticket echoes its body, which may be large)."""
        redacted = await scanned(self.redactor.output, [result.output, result.error])
        output, error = redacted.value
        if isinstance(error, str):
            error = one_line(error)
        update = {"output": output, "error": error, "redactions": result.redactions + redacted.count}
        return await self.stored_when_large(result.model_copy(update=update))

    async def stored_when_large(self, result: ToolResult) -> ToolResult:
        """A result whose output is too large for the record, its output stored as an artifact."""
        body = canonical_json(result.output)
        if len(body) <= MAX_PAYLOAD_BYTES // 2:
            return result
        ref = await asyncio.to_thread(self.artifacts.put, body, media_type="application/json")
        summary = {"stored_as_artifact": ref.sha256, "size": ref.size}
        return result.model_copy(update={"output": summary, "output_ref": ref})

    # ---------------------------------------------------------------------------------------------
    # Unsafe operations whose outcome is unknown

    async def reconcile_unsafe(
        self, sub: SubagentSpec, op: OperationRecord, request: ToolRequest, why: str = ""
    ) -> list[Event]:
        attempt = self.attempt
        spec = tool_spec(op.tool)
        recorded: list[Event] = []
        probe = await self.probe(spec, op.operation_id)
        # A tool server's probe is no evidence either way: what it found is shown to the person.
        found = await self.servers.probe(self, sub, op, request) if spec.where == "server" else ""
        if op.outcome != "unknown":
            detail = why or f"{op.tool} was requested; no result was recorded before the harness stopped"
            detail += f"; {found}" if found else ""
            if probe is not None and probe.unmarked and not probe.effects:
                # What the person reconciling it reads: the findings that are no evidence.
                detail += f"; {probe.describe_unmarked()}, so not taken as its effect"
            recorded += await attempt.record(
                [OperationOutcome(operation_id=op.operation_id, outcome="unknown", detail=detail)],
                subagent=sub.name,
                parent_seq=op.request_seq,
            )
        if probe is None:
            return recorded + await self.wait_for_reconciliation(sub, op, request, found=found)
        if probe.effects:
            return recorded + await attempt.record(
                await self.probe_found(op.operation_id, spec, probe),
                subagent=sub.name,
                parent_seq=op.request_seq,
            )
        if probe.unmarked:
            # Something names the operation but not as its harness does: no evidence either way.
            return recorded + await self.wait_for_reconciliation(sub, op, request, probe)
        recorded += await attempt.record(
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
        return recorded + await self.execute(sub, op.request_seq, request)

    async def found_before_call(
        self, sub: SubagentSpec, request_seq: int, request: ToolRequest
    ) -> list[Event] | None:
        """An unsafe call about to be made for the first time, whose effect the reconcile probe
        already finds in the world: a record put back behind what an earlier attempt did (its
        request and result lost with a WAL, an older copy restored) asks again for what was done.
        The effect found is its result, recorded as the probe's finding; None: make the call.
        Only after a first attempt: none before it can have made the call."""
        if self.attempt.number <= 1:
            return None
        op = (await self.attempt.known_state()).operations.get(request.operation_id)
        if op is None or op.has_result or op.outcome is not None:
            return None  # a retry, or settled by reconciliation just now
        spec = tool_spec(request.tool)
        probe = await self.probe(spec, request.operation_id)
        if probe is None or not probe.effects:
            return None
        before = "the record holds no earlier request of it, yet "
        payloads = await self.probe_found(request.operation_id, spec, probe, before=before)
        return await self.attempt.record(payloads, subagent=sub.name, parent_seq=request_seq)

    async def probe_found(
        self, operation_id: str, spec: ToolSpec, probe: ProbeFindings, before: str = ""
    ) -> list[Payload]:
        """What a probe that found the operation's effect records: the effect as its result. An
        operation that took effect more than once (a superseded attempt's call that got through
        between its lease check and the call) has every effect recorded, in the outcome and the
        result, and the briefing shows it for a person to undo the extra ones. What names the
        operation without its mark is only mentioned."""
        effects = probe.effects
        output = effects[0] if len(effects) == 1 else {"effects": effects}
        names = tuple(effect_name(effect, index) for index, effect in enumerate(effects))
        found = f"{len(effects)} effects" if len(effects) > 1 else "it"
        ignored = f"; {probe.describe_unmarked()}, not counted" if probe.unmarked else ""
        outcome = OperationOutcome(
            operation_id=operation_id,
            outcome="reconciled",
            succeeded=True,
            detail=f"{before}{spec.reconcile_probe} found {found}: {', '.join(names)}{ignored}",
            by="probe",
            effects=names,
        )
        result = await self.tool_result(operation_id, True, output)
        return [outcome, result]

    async def probe(self, spec: ToolSpec, operation_id: str) -> ProbeFindings | None:
        """What the reconcile probe finds, sorted by the mark on each finding's reference; None
        when there is no probe or it cannot answer."""
        if spec.reconcile_probe != "find_tickets" or self.tickets is None:
            return None
        try:
            found = await self.tickets.find(operation_id)
        except Exception:
            return None
        findings = ProbeFindings(spec.reconcile_probe)
        for effect in found:
            marked = self.marks.is_marked(effect.get("client_ref"), operation_id)
            (findings.effects if marked else findings.unmarked).append(effect)
        return findings

    async def wait_for_reconciliation(
        self,
        sub: SubagentSpec,
        op: OperationRecord,
        request: ToolRequest,
        probe: ProbeFindings | None = None,
        found: str = "",
    ) -> list[Event]:
        attempt = self.attempt
        wait_id = f"reconcile-{op.operation_id}"
        state = await attempt.state()
        if wait_id not in state.waits:
            unmarked = (
                f" ({probe.describe_unmarked()}: not made by this session's harness, so not taken as "
                "its effect)"
                if probe is not None and probe.unmarked
                else ""
            )
            reason = (
                f"did {op.tool} ({op.operation_id}) take effect? Its outcome is unknown{unmarked}"
                f"{f' ({found})' if found else ''} and it "
                f"is never repeated blindly: `{self.command(commands.approve(self.session_name, wait_id))}` "
                f"if it did, `{self.command(commands.reject(self.session_name, wait_id))}` if it did not"
            )
            await attempt.record(
                [Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason, condition=op.operation_id)],
                subagent=sub.name,
            )
        while True:
            current = (await attempt.state()).operations[op.operation_id]
            if current.outcome == "reconciled":
                break
            await asyncio.sleep(self.poll_interval_s)
        if current.reconciled_succeeded is False and not current.has_result:
            return await self.execute(sub, op.request_seq, request)
        return []

    # ---------------------------------------------------------------------------------------------
    # Requests a previous attempt left without a result

    async def settle_open_operations(self, sub: SubagentSpec) -> None:
        """The effect table, as the recovery plan of the record states it for this subagent: each
        request without a result runs again or is reconciled by its effect class; what a person
        reconciled as never having taken effect is issued; a failed external effect waits on a
        person's answer."""
        plan = recovery_plan(await self.attempt.state())
        for action in plan.actions:
            if action.subagent != sub.name:
                continue
            request = await self.attempt.request_of(action.operation_id)
            if action.action in (RecoveryActionKind.RERUN, RecoveryActionKind.RERUN_WITH_KEY):
                await self.execute(sub, action.request_seq, request)
            elif action.action == RecoveryActionKind.AWAIT_RECONCILIATION:
                op = (await self.attempt.state()).operations[action.operation_id]
                await self.reconcile_unsafe(sub, op, request)
            elif action.action == RecoveryActionKind.SKIP_SUPERSEDED:
                # Answered, never run: a provider still waiting on the call gets this answer
                # before the change as its next message; the step it was for is not failed.
                await self.record_not_run(sub, action.request_seq, request, f"not run: {action.reason}")
        # Reconciled as never having taken effect (by a person, while no harness ran): issue it now.
        state = await self.attempt.state()
        for op in sorted(state.operations.values(), key=lambda o: o.request_seq):
            if (
                op.subagent == sub.name
                and op.outcome == "reconciled"
                and op.reconciled_succeeded is False
                and not op.has_result
            ):
                await self.execute(sub, op.request_seq, await self.attempt.request_of(op.operation_id))
        # An external effect that failed waits on a person: try it again, or go on without it.
        state = await self.attempt.state()
        for op in state.external_operation_records():
            retry = latest_retry(state, op.operation_id)
            if op.subagent != sub.name or retry is None or op.ok:
                continue
            if retry.pending or (
                retry.decision == "granted" and (retry.decided_seq or 0) > (op.result_seq or 0)
            ):
                await self.await_retry(
                    sub, op.request_seq, await self.attempt.request_of(op.operation_id), retry.approval_id
                )

    # ---------------------------------------------------------------------------------------------
    # Approvals

    async def wait_for_approval(self, sub: SubagentSpec, request: ToolRequest) -> tuple[bool, str]:
        attempt = self.attempt
        approval_id = approval_id_for(request.operation_id)
        state = await attempt.state()
        if approval_id not in state.approvals:
            await attempt.record([await self.approval_request(sub, request)], subagent=sub.name)
        grant = declared_grant(attempt.session.spec.approvals, request, approval_id, now_utc())
        record = (await attempt.state()).approvals[approval_id]
        if grant is not None and record.decision is None:
            with contextlib.suppress(ClaimTaken):  # decided by someone else first: read below
                await attempt.record(
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
                    claim=approval_claim(approval_id),
                )
        while True:
            state = await attempt.state()
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
            withdrawn = state.approvals[approval_id]
            if withdrawn.withdrawn_seq is not None:
                return False, not_run_withdrawn(withdrawn)
            # Pending, or decided for another payload: that never dispatches this one.
            await asyncio.sleep(self.poll_interval_s)


@dataclass
class ProbeFindings:
    """What a reconcile probe found for one operation: the effects whose reference carries the
    operation's mark (it took effect), and those that name the operation without it (forged,
    copied from elsewhere, or made by hand), which are no evidence."""

    probe: str
    effects: list[dict[str, Any]] = field(default_factory=list)
    unmarked: list[dict[str, Any]] = field(default_factory=list)

    def describe_unmarked(self) -> str:
        names = [effect_name(effect, index) for index, effect in enumerate(self.unmarked)]
        shown = ", ".join(names[:SHOWN_UNMARKED]) + (
            f" and {len(names) - SHOWN_UNMARKED} more" if len(names) > SHOWN_UNMARKED else ""
        )
        return f"{self.probe} found {shown} naming it without the harness's mark"


def effect_name(effect: dict[str, Any], index: int) -> str:
    """How a probe's finding is named in the outcome: the id the external system gave it, or its
    place in what the probe found. Never its content, which is recorded (redacted) in the result."""
    return str(effect.get("id") or f"effect {index + 1}")


# --------------------------------------------------------------------------------------------------
# Provenance


def request_parts_of(state: SessionState, step: str | None) -> tuple[str, ...]:
    """The request parts a step declared it depends on; all of them (and the goal) otherwise."""
    task = state.tasks.get(step) if step else None
    if task is not None and task.request_parts is not None:
        return task.request_parts
    return (GOAL_PART, *sorted(state.request.parts))


def provenance(state: SessionState, subagent: str, request: ToolRequest) -> DerivedFrom:
    """What a call's results are derived from: the request version it was decided under, the
    request parts of its step, the workspace its step started from (the subagent's last valid
    checkpoint, by result id: a patch's hash alone could name another subagent's identical one),
    and the artifacts its arguments name."""
    operation = state.operations.get(request.operation_id)
    version = operation.request_version if operation is not None and operation.request_version else None
    base = state.last_valid_checkpoint(subagent)
    results: tuple[str, ...] = ()
    if base is not None and base.checkpoint.result_id:
        results = (base.checkpoint.result_id,)
    artifacts: list[str] = []
    for value in request.arguments.values():
        if isinstance(value, dict) and isinstance(value.get(ARTIFACT_ARGUMENT), str):
            artifacts.append(value[ARTIFACT_ARGUMENT])
    return DerivedFrom(
        request_version=version or state.request.version,
        request_parts=request_parts_of(state, request.step),
        artifacts=tuple(artifacts),
        results=results,
    )


# Framing calls: their checkpoint is the result, not the call's acknowledgement.
UNRECORDED_RESULTS = ("update_plan",)


def with_provenance(payloads: list[Payload], derived: DerivedFrom, request: ToolRequest) -> list[Payload]:
    """The payloads a call recorded, each result named after the call and given its inputs."""
    stamped: list[Payload] = []
    result_id = request.operation_id
    for payload in payloads:
        if isinstance(payload, ToolResult) and payload.operation_id == request.operation_id:
            named = payload.ok and request.tool not in UNRECORDED_RESULTS
            update: dict[str, Any] = {"derived_from": derived}
            if named:
                update["result_id"] = result_id
            payload = payload.model_copy(update=update)
        elif isinstance(payload, Artifact | Note):
            payload = payload.model_copy(update={"result_id": result_id, "derived_from": derived})
        elif isinstance(payload, Checkpoint):
            payload = payload.model_copy(update={"derived_from": derived})
        stamped.append(payload)
    return stamped


def failed_effect(effect: EffectClass, request: ToolRequest, payloads: list[Payload]) -> str | None:
    """Why an unsafe operation failed, from its own result; None when it did not."""
    if effect != EffectClass.UNSAFE:
        return None
    for payload in payloads:
        if (
            isinstance(payload, ToolResult)
            and payload.operation_id == request.operation_id
            and not payload.ok
        ):
            return payload.error or "it failed without saying why"
    return None


def lost_its_sandbox(tool: str, replaced: int, silent: int, last_loss: str) -> str:
    """Why a call that lost its sandbox `replaced` times (`silent` of them a server that stopped
    answering) is not run again: said as it happened, a stopped or hung server was not killed."""
    what = "the command" if tool == "run_command" else f"the call to {tool}"
    done, how = "killed its sandbox", "killed"
    if silent == replaced:
        done, how = "stopped its sandbox from answering", "stopped or hung, not killed"
    elif silent:
        done, how = "killed or stopped its sandbox", "killed or stopped"
    return (
        f"{what} {done}: the sandbox was lost {replaced} times while it ran (each time a clean one "
        f"was restored and the call run again), most likely by the call itself (its sandbox's server "
        f"process {how}), so it is not run again (last loss: {last_loss})"
    )
