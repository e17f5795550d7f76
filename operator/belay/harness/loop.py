"""The harness: one attempt at running a session, from recovery to completion.

It puts the rooms together, each a module of its own:

- `belay.harness.attempt`: the attempt and its fencing lease, the record it writes and folds;
- `belay.harness.recovery`: clean sandboxes restored from the last verified checkpoint
  (`belay.harness.checkpoints`);
- `belay.harness.runtime` (with `harness_tools`): the tool runtime, which runs what was decided
  under effect classes, approvals, deliverables, waits and checkpoints, and settles the requests
  an earlier attempt left without a result by their effect class;
- `belay.harness.stopping`: a graceful stop when the attempt is told to (SIGTERM, Ctrl-C);
- `belay.harness.executor`: the protocol of whoever decides each subagent's next action (its
  implementations are in `belay.executors`);
- `belay.harness.turn_ends`: a turn that ended without the subagent's deliverable, which waits on
  a person's message, an amend, or the end of the session.

Each subagent's loop asks its executor for the next calls, gives each the operation id the record
derives for it (`belay.journal.operations`: the same whichever executor decided it), records them
(with any approval they need) before anything runs, has the runtime run each one to a recorded
result, and hands the results back to the executor, until the executor has nothing more to do
and the subagent's deliverable exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from belay.api.agentsession import AgentSession, SubagentSpec
from belay.harness.attempt import Attempt, BudgetExhausted, HarnessResult, RecoveryFailed
from belay.harness.executor import (
    Executor,
    ExecutorContext,
    ExecutorFactory,
    ExecutorFailed,
    ExecutorUnavailable,
    ToolOutcome,
)
from belay.harness.harness_tools import DONE_STATUSES
from belay.harness.recovery import Recovery, SandboxProvider
from belay.harness.runtime import ToolRuntime
from belay.harness.stopping import InFlight, StopRequest, stop_payloads, until_stopped
from belay.harness.tickets import TicketClient
from belay.harness.turn_ends import go_on_when_answered, owed, record_turn_end
from belay.journal.events import (
    Event,
    ExecutorChange,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Payload,
    Task,
    TaskStatus,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.operations import ProposedCall, current_step_of, operation_ids
from belay.journal.recovery import RUN_AGAIN_BLINDLY
from belay.journal.state import MAX_ATTEMPTS, ExecutorChangeRecord, SessionState, attempts_counted
from belay.stores.base import ArtifactStore, EventStore, StaleLease, Superseded

# The reason an attempt's end is recorded with when it stopped on an error nothing else answers.
HARNESS_ERROR = "HarnessError"


@dataclass
class Harness:
    session: AgentSession
    store: EventStore
    artifacts: ArtifactStore
    sandboxes: SandboxProvider
    executors: ExecutorFactory
    tickets: TicketClient | None = None
    # The key of the marks on external effects' references (belay.harness.effect_marks): a file
    # in the home, or derived from the record key; never in a sandbox.
    effect_key: bytes = b""
    # subagent -> (workspace path, bytes): declared inputs, recorded on the first attempt only
    inputs: Mapping[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    holder: str = "local"
    model_id: str = ""
    runtime_image: str = "local"
    poll_interval_s: float = 0.05
    # Someone starts the child sessions this attempt records (`belay.local.children`, locally).
    children_followed: bool = False
    on_event: Any = None  # Callable[[Event], None]: every event this attempt records, as recorded
    # Set by a signal handler to stop the attempt cleanly (belay.harness.stopping); None: never.
    stop: StopRequest | None = None

    attempt: Attempt = field(init=False)
    recovery: Recovery = field(init=False)
    runtime: ToolRuntime = field(init=False)
    _model_calls: int = 0  # this session's model calls so far, counted from the record at start

    def __post_init__(self) -> None:
        self.attempt = Attempt(
            session=self.session,
            store=self.store,
            holder=self.holder,
            model_id=self.model_id,
            on_event=self.on_event,
            artifacts=self.artifacts,
        )
        self.recovery = Recovery(
            attempt=self.attempt,
            artifacts=self.artifacts,
            provider=self.sandboxes,
            inputs=self.inputs,
            runtime_image=self.runtime_image,
        )
        self.runtime = ToolRuntime(
            attempt=self.attempt,
            artifacts=self.artifacts,
            recovery=self.recovery,
            tickets=self.tickets,
            effect_key=self.effect_key,
            poll_interval_s=self.poll_interval_s,
            children_followed=self.children_followed,
            in_flight=InFlight(self.stop),
        )

    @property
    def lease(self) -> int:
        return self.attempt.lease

    async def run(self) -> HarnessResult:
        if self.stop is not None and self.stop.requested:
            return HarnessResult(False, "told to stop before it started", 0, stopped_by=self.stop.received)
        await self.attempt.acquire()
        try:
            if self.stop is None:
                return await self.run_attempt()
            return await until_stopped(self.run_attempt(), self.stop, self.stopped)
        finally:
            await self.recovery.stop_all()
            await self.attempt.release()

    async def stopped(self) -> HarnessResult:
        """Told to stop: the calls in flight finish within the bound, and the attempt records what
        it leaves (belay.harness.stopping). An attempt that had not recorded its start records
        nothing: to the record it never ran."""
        stop, attempt = self.stop, self.attempt
        assert stop is not None and stop.received is not None
        in_flight = self.runtime.in_flight
        await in_flight.drain(stop)
        await attempt.appends_settled()  # a request its cancelled work was recording is in the state
        state = await attempt.state()
        result = HarnessResult(False, f"stopped on {stop.received.name}", attempt.number, stop.received)
        # The start may be recorded although the stop cut off the code that notes its seq.
        started_seq = attempt.started_seq or next(
            (
                e.seq
                for e in reversed(await attempt.events())
                if isinstance(e.payload, Lifecycle)
                and e.payload.kind == LifecycleKind.HARNESS_STARTED
                and e.payload.attempt == attempt.number
            ),
            0,
        )
        if not started_seq or state.lifecycle.completed or state.lifecycle.failed:
            return result
        payloads = stop_payloads(state, stop, in_flight, started_seq, attempt.number)
        try:
            recorded = await attempt.record(payloads)
        except StaleLease:
            result.detail += f"; attempt {attempt.number} was superseded by a newer attempt"
            return result
        result.detail = recorded[-1].payload.detail  # type: ignore[union-attr]
        return result

    async def run_attempt(self) -> HarnessResult:
        try:
            return await self.attempt_session()
        except RecoveryFailed as failure:
            return HarnessResult(False, str(failure), self.attempt.number)
        except BudgetExhausted as exhausted:
            return await self.attempt.fail_session("BudgetExhausted", str(exhausted))
        except ExecutorUnavailable as unavailable:
            return await self.attempt.stop(unavailable.reason, unavailable.detail)
        except ExecutorFailed as failure:
            return await self.attempt.fail_session(failure.reason, failure.detail)
        except StaleLease:
            # A newer attempt holds the lease: this one must not write another event.
            return HarnessResult(
                False, f"attempt {self.attempt.number} was superseded by a newer attempt", self.attempt.number
            )
        except Exception as error:
            # The end is recorded with its error, so an attempt after it that ends the same way is
            # counted (belay.journal.state.repeats); a store that cannot take it loses only that.
            with contextlib.suppress(Exception):
                await self.attempt.stop(HARNESS_ERROR, f"{type(error).__name__}: {error}")
            raise

    async def attempt_session(self) -> HarnessResult:
        attempt = self.attempt
        state = await attempt.state()
        if state.lifecycle.completed:
            return HarnessResult(True, "the session had already completed", attempt.number)
        if state.request.version == 0:
            # Whoever starts the harness records the request first (the operator, or `belay run`).
            return HarnessResult(False, "the record holds no request to work on", attempt.number)
        self._model_calls = state.model_calls
        await attempt.record_start(state)
        max_attempts = self.session.spec.recovery.max_attempts
        counted = attempts_counted(state.lifecycle)
        if counted > max_attempts:
            detail = f"attempt {counted} is beyond recovery.maxAttempts ({max_attempts})"
            return await attempt.fail_session(MAX_ATTEMPTS, detail)
        subagents = self.session.spec.subagents
        unfinished = [s for s in subagents if not is_finished(state, s)]
        built: dict[str, Executor] = {}
        try:
            await all_of(
                [
                    *(self.recovery.prepare_sandbox(s) for s in subagents),
                    *(self.build_executor(s, built) for s in unfinished),
                ]
            )
            await all_of(self.run_subagent(s, built.pop(s.name, None)) for s in subagents)
        finally:
            for executor in built.values():  # built, never handed to a loop
                await executor.close()
        move = self.move_since_start(await attempt.state())
        if move is not None:
            return await attempt.stop_for_move(move)
        return await attempt.finish()

    def move_since_start(self, state: SessionState) -> ExecutorChangeRecord | None:
        """The record's move to another executor since this attempt started (an edit of
        `spec.executor` in a cluster), which the next attempt runs on; None when there is none."""
        move = state.executor_changes[-1] if state.executor_changes else None
        if move is None or move.seq < self.attempt.started_seq:
            return None
        mine = self.session.spec.executor
        return None if (move.to_type, move.to_model) == (mine.type, mine.model) else move

    async def build_executor(self, sub: SubagentSpec, built: dict[str, Executor]) -> None:
        """The subagent's executor, built in a thread while the sandboxes are prepared: a
        provider's SDK reads its TLS trust store from disk, which takes a while."""
        # A failure is raised again by the subagent's loop, once its sandbox is ready.
        with contextlib.suppress(Exception):
            built[sub.name] = await asyncio.to_thread(self.executor_for, sub)

    # ---------------------------------------------------------------------------------------------
    # The subagent loop

    def executor_for(self, sub: SubagentSpec) -> Executor:
        attempt = self.attempt

        async def record(payloads: Any, *, durable: bool = True) -> list[Event]:
            return await attempt.record(payloads, subagent=sub.name, durable=durable)

        context = ExecutorContext(
            session=self.session,
            subagent=sub,
            store=self.store,
            artifacts=self.artifacts,
            read_state=attempt.state,
            known_state=attempt.known_state,
            record=record,
            server_tools=lambda: self.runtime.servers.schemas(sub),
        )
        return self.executors(context)

    async def run_subagent(self, sub: SubagentSpec, executor: Executor | None = None) -> None:
        """The subagent's loop, with its `executor` if `build_executor` built it already."""
        # One function on purpose: each turn reads the record, asks the executor, records the
        # decision with its requests in one append and runs them, and the order of those steps (and
        # where a move or a budget ends the loop) is the durability argument; split, it is no
        # longer visible in one place.
        attempt, runtime = self.attempt, self.runtime
        try:
            if sub.tool_servers and not is_finished(await attempt.state(), sub):
                await runtime.servers.list_servers(runtime, sub)  # before anything calls their tools
            await runtime.settle_open_operations(sub)
            state = await attempt.state()
            if is_finished(state, sub):
                return  # nothing to decide: what its executor holds remotely is left alone
            executor = executor or self.executor_for(sub)
            if state.lifecycle.harness_starts > 1:
                await executor.resume(state)
            else:
                await executor.start(state)
            while True:
                state = await attempt.state()
                if is_finished(state, sub):
                    return
                if self.move_since_start(state) is not None and current_step_of(state, sub.name) is None:
                    # Between two steps: the step to come runs on the executor the session moved to,
                    # in the next attempt, so that no step is split between two executors.
                    return
                subtask = state.tasks.get(sub.name)
                if subtask is not None and subtask.status == TaskStatus.BLOCKED:
                    # Its turn ended without its deliverable: a person's answer lets it go on.
                    await go_on_when_answered(attempt, sub, executor, self.poll_interval_s)
                    continue
                if subtask is not None and subtask.status == TaskStatus.PLANNED:
                    await attempt.record(
                        [Task(task_id=sub.name, status=TaskStatus.RUNNING, owner=sub.name)],
                        subagent=sub.name,
                        durable=False,  # lost with the machine, the next attempt records it again
                    )
                budget = self.session.spec.budgets.max_model_calls
                if budget is not None and self._model_calls >= budget:
                    raise BudgetExhausted(f"budgets.maxModelCalls ({budget}) used up")
                self._model_calls += 1
                decision = await executor.next_actions(state)
                if (
                    self.move_since_start(seen := await attempt.state()) is not None
                    and current_step_of(state, sub.name) is None
                ):
                    # Decided while the move was being recorded: the step it begins is left to the
                    # executor the session moved to (nothing of it is recorded, so nothing is split).
                    return
                if decision.model_id:  # the exact model snapshot the provider reports
                    attempt.model_id = decision.model_id
                said = {
                    "text": decision.text,
                    "input_tokens": decision.input_tokens,
                    "output_tokens": decision.output_tokens,
                    "cached_input_tokens": decision.cached_input_tokens,
                }
                owes = owed(await attempt.known_state(), sub) if not decision.tool_calls else None
                if owes is not None:  # a turn's end is no step's end while the deliverable is missing
                    await record_turn_end(attempt, sub, decision.records, ModelOutput(**said), owes)
                    continue
                if not decision.tool_calls:
                    await attempt.record(
                        [
                            *decision.records,
                            ModelOutput(**said),
                            Task(
                                task_id=sub.name, status=TaskStatus.DONE, owner=sub.name, detail=decision.text
                            ),
                        ],
                        subagent=sub.name,
                    )
                    return
                # Each call's operation id, from the record as it stands after the decision (with
                # whatever the executor recorded to reach it): the same on every executor.
                decided = await attempt.known_state()
                derived = operation_ids(
                    decided,
                    sub.name,
                    [ProposedCall(c.name, c.arguments, c.operation_id) for c in decision.tool_calls],
                )
                requests = [
                    await runtime.describe_call(sub, decided, call, ids)
                    for call, ids in zip(decision.tool_calls, derived, strict=True)
                ]
                payloads: list[Payload] = [
                    *decision.records,
                    ModelOutput(**said, tool_calls=tuple(r.operation_id for r in requests)),
                ]
                durable = False
                for tool_request in requests:
                    payloads.append(tool_request)
                    if runtime.needs_approval(sub, tool_request.tool):
                        payloads.append(await runtime.approval_request(sub, tool_request))
                        durable = True  # a person is asked: the question must not vanish
                    # A tool that may not simply run again must be on disk as requested before it
                    # runs, so that a lost attempt shows its outcome as unknown.
                    durable = durable or tool_request.effect not in RUN_AGAIN_BLINDLY
                recorded = await self.record_unless_moved(sub, state, seen, payloads, durable)
                if recorded is None:
                    return  # the move was recorded after the look above: the same end
                seq_of = {e.payload.operation_id: e.seq for e in recorded if isinstance(e, ToolRequestEvent)}
                outcomes = []
                for tool_request in requests:
                    events = await runtime.execute(sub, seq_of[tool_request.operation_id], tool_request)
                    outcomes += [
                        ToolOutcome(request=tool_request, result=e.payload, result_seq=e.seq)
                        for e in events
                        if isinstance(e, ToolResultEvent)
                        and e.payload.operation_id == tool_request.operation_id
                    ]
                await executor.deliver_results(outcomes)
        finally:
            if executor is not None:
                await executor.close()

    async def record_unless_moved(
        self,
        sub: SubagentSpec,
        decided_on: SessionState,
        seen: SessionState,
        payloads: list[Payload],
        durable: bool,
    ) -> list[Event] | None:
        """Record the batch the subagent decided on `decided_on`. One that begins a step (none is
        running) is written only if no executor change newer than those `seen` holds (the record
        when the loop last looked for a move) is recorded: the store checks it in the append's own
        transaction, so no move lands between the look and the step's start. None when a move
        landed: the step is left to the executor the session moved to, as when the look sees it."""
        attempt = self.attempt
        if current_step_of(decided_on, sub.name) is not None:
            return await attempt.record(payloads, subagent=sub.name, durable=durable)
        while True:
            changes = seen.executor_changes
            latest = (ExecutorChange.EVENT_TYPE, changes[-1].seq if changes else 0)
            try:
                return await attempt.record(payloads, subagent=sub.name, durable=durable, unless_newer=latest)
            except Superseded:
                seen = await attempt.state()
                if self.move_since_start(seen) is not None:
                    return None
                # A change that leaves this attempt's executor as it is: the decision stands.


def is_finished(state: SessionState, sub: SubagentSpec) -> bool:
    task = state.tasks.get(sub.name)
    return task is not None and task.status in DONE_STATUSES


async def all_of(coroutines: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; on the first failure cancel the others, wait for them, and raise it."""
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in coroutines:
                group.create_task(coroutine)
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None
