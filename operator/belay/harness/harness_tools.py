"""The tools that run in the harness rather than in a sandbox: deliverables, notes, plan steps and
their checkpoints, waits, tickets and explicit approvals.

Each turns one recorded request into the payloads recorded as its result (the runtime adds what
each was derived from). They read the sandbox only through the attempt's handle (a lost sandbox
raises `SandboxUnavailable`, which the runtime answers with a restored replacement) and write bytes
only to the artifact store. What they are given is `HarnessToolContext`, which the tool runtime
(`belay.harness.runtime`) is; finishing a step records its checkpoint (`belay.harness.checkpoints`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Protocol

from belay.api.agentsession import (
    DELIVERABLE_MESSAGE,
    SESSION_NAME_PATTERN,
    SubagentSpec,
    check_deliverable_name,
    is_plain_file_name,
)
from belay.harness.attempt import Attempt
from belay.harness.bounded import store_file
from belay.harness.checkpoints import (
    bounded,
    checkpoint_of,
    inputs_checkpoint,
    step_checkpoint_id,
    store_declared_files,
    verify,
)
from belay.harness.effect_marks import EffectMarks
from belay.harness.recovery import Recovery
from belay.harness.revision import RevisionError, make_revision
from belay.harness.tickets import TicketClient
from belay.journal import commands
from belay.journal.events import (
    CHILD_CONDITION_PREFIX,
    CHILD_WAIT_PREFIX,
    Artifact,
    ArtifactRef,
    Note,
    NoteKind,
    Payload,
    SessionLink,
    SessionLinkKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.state import SessionState
from belay.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable, WorkspaceRefused
from belay.stores.base import MAX_PAYLOAD_BYTES, ArtifactStore, PayloadTooLarge

DONE_STATUSES = (TaskStatus.DONE, TaskStatus.VERIFIED)
# The most a note may take in the record (its JSON), leaving room in one event's payload.
MAX_NOTE_BYTES = MAX_PAYLOAD_BYTES // 2
# A checkpoint's next step after the last step of a plan.
END_OF_PLAN = "(end of plan)"


class HarnessToolContext(Protocol):
    """What a harness tool is given: the attempt, the stores, the subagent's sandbox (through
    `recovery`), the ticket service, and how to speak to a person."""

    attempt: Attempt
    artifacts: ArtifactStore
    recovery: Recovery
    tickets: TicketClient | None
    poll_interval_s: float
    # Someone starts the child sessions this attempt records (`belay.local.children` beside a
    # local attempt); in a cluster the operator always does.
    children_followed: bool

    @property
    def session_id(self) -> str: ...

    @property
    def session_name(self) -> str: ...

    @property
    def marks(self) -> EffectMarks: ...

    @property
    def in_cluster(self) -> bool: ...

    def command(self, command: str) -> str: ...

    async def redacted_result(self, result: ToolResult) -> ToolResult: ...


HarnessTool = Callable[[HarnessToolContext, SubagentSpec, ToolRequest], Awaitable[list[Payload]]]


async def run_in_harness(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    handler = HARNESS_TOOLS[request.tool]
    try:
        payloads = await handler(runtime, sub, request)
    except (KeyError, ValueError, TypeError) as error:
        payloads = [ToolResult(operation_id=request.operation_id, ok=False, error=f"bad arguments: {error}")]
    except SandboxUnavailable:
        raise  # the runtime answers a lost sandbox with a restored one
    except PayloadTooLarge as error:
        # What the call asked to record (a wait's reason, ...) is content: the call's failure.
        error_text = f"too large to record: {error}"
        payloads = [ToolResult(operation_id=request.operation_id, ok=False, error=error_text)]
    except SandboxError as error:
        # The sandbox answered and refused: what is in a sandbox is the agent's, so its refusal is
        # this call's failure, never the harness's.
        payloads = [ToolResult(operation_id=request.operation_id, ok=False, error=str(error))]
    # What a sandbox or an external service answered (an error text, a ticket) is scanned like
    # every other tool's result.
    return [await runtime.redacted_result(p) if isinstance(p, ToolResult) else p for p in payloads]


async def approved(runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
    return [ToolResult(operation_id=request.operation_id, ok=True, output={"approved": True})]


async def publish_deliverable(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    path = request.arguments["path"]
    name = check_deliverable_name(request.arguments.get("name") or path.rsplit("/", 1)[-1])
    try:
        # Streamed into the store: a large deliverable is never held whole.
        ref = await store_file(runtime.recovery.handle(sub.name).client, runtime.artifacts, path)
    except SandboxUnavailable:
        raise
    except SandboxError as error:
        return [ToolResult(operation_id=request.operation_id, ok=False, error=str(error))]
    expected = request.arguments.get("content_sha256")
    if expected and ref.sha256 != expected:
        return [
            ToolResult(
                operation_id=request.operation_id,
                ok=False,
                error=f"{path} changed since it was requested ({ref.sha256}, requested {expected})",
            )
        ]
    location = await asyncio.to_thread(runtime.artifacts.location, ref.sha256)
    ref = ArtifactRef(sha256=ref.sha256, size=ref.size, media_type=ref.media_type, uri=ref.uri or location)
    download = runtime.command(commands.download(runtime.session_name, name))
    return [
        Artifact(
            name=name,
            ref=ref,
            deliverable=True,
            subagent=sub.name,
            description=request.arguments.get("description", f"{sub.name}: {path}"),
        ),
        Wait(
            wait_id=f"review-{name}",
            kind=WaitKind.READY_FOR_REVIEW,
            reason=f"{name} is ready for review: {download}",
            artifact=name,
        ),
        ToolResult(
            operation_id=request.operation_id,
            ok=True,
            output={"name": name, "sha256": ref.sha256, "size": ref.size},
        ),
    ]


async def record_note(runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
    args = request.arguments
    note = Note(
        note_id=args["note_id"],
        kind=NoteKind(args.get("kind", "finding")),
        text=args["text"],
        status=args.get("status", "open"),
        evidence=tuple(args.get("evidence", ())),
    )
    size = len(note.model_dump_json().encode())  # as the record's payload limit counts it
    if size > MAX_NOTE_BYTES:
        # A note is an event of its own, whole in the record; a longer text belongs in a file.
        error = (
            f"the note is {size} bytes as recorded, above the {MAX_NOTE_BYTES} a note may have: write "
            "the long text to a file with write_file and name the file in the note's evidence"
        )
        return [ToolResult(operation_id=request.operation_id, ok=False, error=error)]
    return [note, ToolResult(operation_id=request.operation_id, ok=True, output={"note_id": note.note_id})]


async def update_plan(runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
    args = request.arguments
    step = str(args["step"])
    task_id = f"{sub.name}/{step}"
    if args.get("status", "running") != "done":
        inputs = args.get("inputs")
        if inputs is not None and (
            not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs)
        ):
            raise ValueError("inputs must be a list of request part names (the goal is 'goal')")
        return [
            Task(
                task_id=task_id,
                title=args.get("title", ""),
                status=TaskStatus.RUNNING,
                owner=sub.name,
                request_parts=tuple(inputs) if inputs is not None else None,
            ),
            ToolResult(
                operation_id=request.operation_id, ok=True, output={"step": step, "status": "running"}
            ),
        ]
    return await checkpoint(runtime, sub, request, step)


async def checkpoint(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest, step: str
) -> list[Payload]:
    """A step boundary: declared files into the artifact store and committed in the sandbox, the
    patch since the inputs stored, the verification run. A checkpoint that cannot be made fails
    the step, saying why: a step is never left running without one."""
    client = runtime.recovery.handle(sub.name).client
    try:
        declared = await store_declared_files(client, runtime.artifacts, sub.declared)
        verification = await requested_verification(client, request)
        state = await runtime.attempt.state()
        checkpoint_id = step_checkpoint_id(state, sub.name, step)
        inputs = inputs_checkpoint(state, sub.name)
        revision, patch = await make_revision(
            client,
            [entry.name for entry in declared],
            checkpoint_id,
            parent=inputs.repository_revision if inputs is not None else None,
        )
    except WorkspaceRefused as refusal:
        return refused_checkpoint(sub.name, step, request, refusal)
    except SandboxUnavailable:
        raise  # the runtime answers a lost sandbox with a restored one, and the step is done again
    except (RevisionError, SandboxError) as error:
        return failed_checkpoint(sub.name, step, request, f"the checkpoint of step {step!r} failed: {error}")
    patch_ref = await asyncio.to_thread(runtime.artifacts.put, patch, media_type="text/x-diff")
    made = checkpoint_of(
        sub,
        checkpoint_id,
        revision,
        patch_ref,
        declared,
        covers_seq=state.last_seq,
        runtime_image=runtime.recovery.runtime_image,
        verification=verification or Verification(command="(none given)", status="not_run"),
        next_step=next_step_named(sub.name, request.arguments.get("next_step")),
        completed_steps=completed_steps(state, sub.name, step),
    )
    recorded = await bounded(runtime.artifacts, made)
    verified = recorded.verified
    return [
        step_finished(sub.name, step, verification),
        recorded,
        ToolResult(
            operation_id=request.operation_id,
            ok=True,
            output={"step": step, "status": "verified" if verified else "done", "declared": len(declared)},
        ),
    ]


def step_failed_by(sub: SubagentSpec, request: ToolRequest, why: str) -> list[Payload]:
    """The step a failed `update_plan` done would have finished, failed with the reason; nothing
    for any other call. A step is never left running because its checkpoint's call failed."""
    args = request.arguments
    if request.tool != "update_plan" or args.get("status") != "done" or not isinstance(args.get("step"), str):
        return []
    task_id = f"{sub.name}/{args['step']}"
    return [Task(task_id=task_id, status=TaskStatus.FAILED, owner=sub.name, detail=why)]


def failed_checkpoint(subagent: str, step: str, request: ToolRequest, why: str) -> list[Payload]:
    """The step's checkpoint could not be made: the step failed with the reason, and the call's
    error says it (the step is done once a later `update_plan` done is checkpointed)."""
    return [
        Task(task_id=f"{subagent}/{step}", status=TaskStatus.FAILED, owner=subagent, detail=why),
        ToolResult(
            operation_id=request.operation_id,
            ok=False,
            error=why,
            output={"step": step, "status": "failed"},
        ),
    ]


def refused_checkpoint(
    subagent: str, step: str, request: ToolRequest, refusal: WorkspaceRefused
) -> list[Payload]:
    """The step's checkpoint refused over the workspace's content: the step failed, saying which
    path broke which rule, and the call's error tells the agent how to put it right (the step is
    done once a later `update_plan` done is checkpointed)."""
    why = f"the checkpoint of step {step!r} was refused: {refusal}"
    return [
        Task(task_id=f"{subagent}/{step}", status=TaskStatus.FAILED, owner=subagent, detail=why),
        ToolResult(
            operation_id=request.operation_id,
            ok=False,
            error=f"{why}. Replace {refusal.path!r} with a regular file of its own, or remove it, "
            "then mark the step done again",
            output={"step": step, "status": "failed", "path": refusal.path, "rule": refusal.rule},
        ),
    ]


async def requested_verification(client: SandboxClient, request: ToolRequest) -> Verification | None:
    """The verification the step's `verify` argument asks for, run; None when it asks for none."""
    command = request.arguments.get("verify")
    if not command:
        return None
    return await verify(client, str(command), int(request.arguments.get("expect_exit_code", 0)))


def next_step_named(subagent: str, following: object) -> str | None:
    """The checkpoint's next step, from the `next_step` argument (`end`: the plan's end)."""
    if not isinstance(following, str) or not following:
        return None
    return END_OF_PLAN if following == "end" else f"{subagent}/{following}"


def completed_steps(state: SessionState, subagent: str, step: str) -> tuple[str, ...]:
    """The subagent's steps done so far, this one included."""
    done = {
        t.task_id.split("/", 1)[1]
        for t in state.tasks.values()
        if t.owner == subagent and t.task_id.startswith(f"{subagent}/") and t.status in DONE_STATUSES
    }
    return tuple(sorted({*done, step}))


def step_finished(subagent: str, step: str, verification: Verification | None) -> Task:
    """The step's task, done; verified when its verification passed."""
    verified = verification is not None and verification.status == "passed"
    detail = (
        "" if verification is None else f"verification `{verification.command}` exit {verification.exit_code}"
    )
    return Task(
        task_id=f"{subagent}/{step}",
        status=TaskStatus.VERIFIED if verified else TaskStatus.DONE,
        owner=subagent,
        detail=detail,
    )


async def wait_on_user(runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest) -> list[Payload]:
    wait_id = f"wait-{request.operation_id}"
    reason = request.arguments.get("reason", "")
    return await _wait(runtime, sub, request, Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason))


async def wait_on_external(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    wait = Wait(
        wait_id=f"wait-{request.operation_id}",
        kind=WaitKind.ON_EXTERNAL,
        reason=request.arguments.get("reason", ""),
        condition=request.arguments.get("condition"),
    )
    return await _wait(runtime, sub, request, wait)


async def _wait(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest, wait: Wait
) -> list[Payload]:
    attempt = runtime.attempt
    if wait.wait_id not in (await attempt.state()).waits:
        await attempt.record([wait], subagent=sub.name)
    while wait.wait_id in (await attempt.state()).open_waits:
        await asyncio.sleep(runtime.poll_interval_s)
    return [
        ToolResult(
            operation_id=request.operation_id, ok=True, output={"wait_id": wait.wait_id, "resolved": True}
        )
    ]


async def start_session(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    """Record the child session this one starts for one part of its objective; whoever starts the
    children (the operator in a cluster, the embedded runtime on one machine) creates it from that
    record and brings its deliverables back when it ends (`belay.harness.children`)."""
    args = request.arguments
    name, part, goal = str(args["name"]), str(args["part"]), str(args["goal"])
    deliverable = str(args.get("deliverable") or "")
    error = ""
    if not re.fullmatch(SESSION_NAME_PATTERN, name) or name == runtime.session_name:
        error = f"{name!r} cannot name a child session: a DNS label other than this session's name"
    elif deliverable and not is_plain_file_name(deliverable):
        error = f"deliverable {deliverable!r}: {DELIVERABLE_MESSAGE}"
    elif not (runtime.in_cluster or runtime.children_followed):
        # Nobody would create it, and the coordinator would wait forever.
        error = (
            "start_session needs someone to start the child session: the operator in a cluster, or "
            "`belay run` / `belay resume` on one machine"
        )
    else:
        known = (await runtime.attempt.state()).children.get(name)
        if known is not None and known.operation_id not in ("", request.operation_id):
            if (known.part, known.goal, known.deliverable) != (part, goal, deliverable):
                error = f"a child session {name!r} was already started (by {known.operation_id})"
            else:  # the same child, asked again in the step's next round: it stands as it is
                output = {"session": name, "part": part, "started_by": known.operation_id}
                return [ToolResult(operation_id=request.operation_id, ok=True, output=output)]
    if error:
        return [ToolResult(operation_id=request.operation_id, ok=False, error=error)]
    link = SessionLink(
        kind=SessionLinkKind.CHILD,
        session=name,
        part=part,
        goal=goal,
        plan=str(args.get("plan") or ""),
        deliverable=deliverable,
        operation_id=request.operation_id,
    )
    output = {"session": name, "part": part, **({"deliverable": deliverable} if deliverable else {})}
    return [link, ToolResult(operation_id=request.operation_id, ok=True, output=output)]


async def await_session(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    """Wait until a child session ended (the operator records it, with its deliverables)."""
    name = str(request.arguments["name"])
    state = await runtime.attempt.state()
    link = state.children.get(name)
    if link is None:
        started = ", ".join(sorted(state.children)) or "none"
        return [
            ToolResult(
                operation_id=request.operation_id,
                ok=False,
                error=f"no child session {name!r} was started (started: {started})",
            )
        ]
    if not link.phase:
        wait = Wait(
            wait_id=f"{CHILD_WAIT_PREFIX}{name}",
            kind=WaitKind.ON_EXTERNAL,
            reason=f"child session {name} ({link.part}) runs",
            condition=f"{CHILD_CONDITION_PREFIX}{name}",
        )
        opened = state.waits.get(wait.wait_id)
        if opened is not None and opened.resolved:
            # The child was reopened (its part changed) after an earlier wait on it ended.
            await runtime.attempt.record([wait], subagent=sub.name)
        await _wait(runtime, sub, request, wait)
        link = (await runtime.attempt.state()).children[name]
    deliverables = {f"{name}/{n}": sha for n, sha in link.deliverables}
    output = {"session": name, "phase": link.phase, "deliverables": deliverables}
    # A child that needs attention ended without failing: the wait on it is over, and what it did
    # not prove is this session's too (belay.journal.proof), until the child is redone and
    # collected again. A child that failed fails the delegation.
    error = f"child session {name} ended {link.phase}" if link.phase == "Failed" else None
    if link.phase == "Succeeded" and link.deliverable and link.deliverable not in dict(link.deliverables):
        error = f"child session {name} ended without its deliverable {link.deliverable}"
    return [ToolResult(operation_id=request.operation_id, ok=error is None, output=output, error=error)]


async def create_ticket(
    runtime: HarnessToolContext, sub: SubagentSpec, request: ToolRequest
) -> list[Payload]:
    if runtime.tickets is None:
        return [
            ToolResult(operation_id=request.operation_id, ok=False, error="no ticket service is configured")
        ]
    # The reference carries the operation's mark, the only evidence a later attempt's probe takes.
    client_ref = runtime.marks.reference(request.operation_id)
    ticket = await runtime.tickets.create(
        request.arguments["title"], request.arguments.get("body", ""), client_ref=client_ref
    )
    return [ToolResult(operation_id=request.operation_id, ok=True, output=ticket)]


HARNESS_TOOLS: dict[str, HarnessTool] = {
    "publish_deliverable": publish_deliverable,
    "record_note": record_note,
    "update_plan": update_plan,
    "wait_on_user": wait_on_user,
    "wait_on_external": wait_on_external,
    "create_ticket": create_ticket,
    "start_session": start_session,
    "await_session": await_session,
    "request_approval": approved,
}
