"""What every managed executor shares: a provider's agent session decides, Belay runs every tool.

A managed executor holds one remote session per subagent at a provider (`openai_agents`,
`anthropic_managed`). The remote agent asks for calls; each is a function (custom) tool that Belay
records and runs through its own tool runtime, under its effect class, approvals and
reconciliation, in its own sandbox; the recorded result goes back to the provider. The record is
the truth and the provider is settled against it:

- The remote session is recorded (`remote` event, kind `session`) with its id. It is created once:
  before creating one, the executor looks for a session carrying this subagent's metadata
  (`belay_session`, `belay_subagent`, `belay_record`), since creation has no idempotency key.
- Each call the remote agent asks for is recorded (kind `call`: call id, turn id, tool) before its
  tool request, under the operation id derived from the record (`belay.journal.operations`: the
  subagent, its running step and round, the call's ordinal there), the id the same call gets on
  any other executor; a resumed attempt finds it recorded and gives it the same one.
- A call whose arguments do not fit its tool's schema is recorded as refused and answered with an
  error result; it never runs and never stops the session.
- A result goes back under a key derived from the record (session id, record tag, and the seq of
  the event that caused it: the result, the refusal or the reconciliation), and its acceptance is
  recorded (kind `result_delivered`). A resumed attempt delivers every recorded result the
  provider still waits for; a call the record never saw is recorded, then run.
- The record is authoritative, the remote session a cache. One that is gone (404), failed or was
  terminated is recorded (kind `failed`, its id kept) and replaced: a new remote session on the
  same executor, seeded with the record's projection (`belay.executors.seeding`), the old one
  closed where the provider allows it. The old one's calls stay as the record has them: a result
  stays settled, an unknown outcome in reconciliation; none is asked again. Once
  MAX_FRUITLESS_LOSSES remote sessions in a row were lost before any took a result, the session
  fails (`RemoteSessionsLost`). A cut event stream is reopened and the session read again (one
  that ends cleanly while the agent's turn is over is no interruption: a provider may end it); a
  request the provider may retry safely is retried; the rest is checked against the remote state
  before it is sent again. A provider that does not answer ends the attempt (not the session).
- A scope change or a rejection that reopened this subagent's work after its remote session
  began is told to the remote agent as its next user message (under a key derived from its seq,
  with the steps to do again) before the end of any turn counts; an end of turn read again, the
  one before the last message went (recorded with it), answers nothing.
- When the remote agent is done, its outputs (files, artifacts) are copied into the artifact store
  with their sha256 and recorded as deliverables, with the same fetch command as any other.

What names the remote session and every request to the provider are `belay.executors.remote_link`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

from belay.executors.call_arguments import check_arguments
from belay.executors.provider import (
    Delivery,
    ManagedProvider,
    RemoteCall,
    RemoteEnded,
    RemoteGone,
    RemoteRefused,
    RemoteStatus,
    RemoteTransient,
    ResultToDeliver,
    Snapshot,
    classify,
    translated,
)
from belay.executors.remote_link import BACKOFF_S, TRIES, RemoteLink, RemoteLost
from belay.executors.seeding import (
    not_run_text,
    plain_name,
    reopening_text,
    result_text,
    seed_text,
    steps_to_redo,
    task_brief,
)
from belay.executors.waking import Signal
from belay.harness.executor import (
    Decision,
    ExecutorContext,
    ExecutorFailed,
    RemoteResource,
    ToolOutcome,
)
from belay.harness.models.base import ToolCall
from belay.journal.events import (
    Artifact,
    ArtifactRef,
    Payload,
    Remote,
    RemoteKind,
    ToolResult,
    ToolResultEvent,
)
from belay.journal.handover import change_phrase
from belay.journal.operations import ProposedCall, operation_ids
from belay.journal.state import RemoteCallRecord, RemoteSessionRecord, SessionState

# A fresh look at the remote session even when its event stream says nothing.
POLL_S = 5.0
# How long a result's delivery may go unrecorded while the agent has not answered: long enough
# for a quick agent's next calls to take it into their append, short enough that a person never
# sees a delivered result as waiting.
DELIVERY_NOTE_WAIT_S = 0.5
# After a create whose answer was lost: how long to look for the session before creating again.
FIND_AFTER_LOST_CREATE_S = (0.2, 0.5, 1.0)
# Remote sessions of one subagent lost in a row before any took a result: then the session fails.
MAX_FRUITLESS_LOSSES = 3


class ManagedExecutor(RemoteLink):
    """The executor protocol over one provider's remote session, for one subagent."""

    def __init__(
        self,
        context: ExecutorContext,
        provider: ManagedProvider,
        connection_errors: tuple[type[BaseException], ...],
    ) -> None:
        super().__init__(context, provider, connection_errors)
        self.signal = Signal()
        self._watcher: asyncio.Task[None] | None = None
        # The calls the event stream last showed waiting, not yet looked at; whether its last
        # event said only that the remote agent is at work.
        self.heard: Snapshot | None = None
        self.busy = False
        # Results handed to the provider whose delivery is not recorded yet (by call id), and the
        # signal's generation when they went out. Their record goes with the next append (the
        # next calls taken in), or after DELIVERY_NOTE_WAIT_S of waiting on the provider.
        self.unrecorded: dict[str, Remote] = {}
        self.unrecorded_since = 0.0  # when the oldest of them went out (monotonic)
        self.delivered_at: int | None = None
        self.taken_here: set[str] = set()  # the call ids this attempt took in first
        # The turn whose end the executor last reported: the same end read again (before the
        # provider shows the turn a person's message started) is not news.
        self.ended_turn = ""

    # ---- the protocol

    async def start(self, state: SessionState) -> None:
        # The record's first attempt: no attempt before it can have created a remote session.
        await self.attach(state, look_first=False)

    async def resume(self, state: SessionState) -> None:
        await self.attach(state, look_first=True)
        try:
            await self.settle(await self.context.read_state(), await self.look())
        except RemoteLost as lost:
            await self.replace(lost)

    async def next_actions(self, state: SessionState) -> Decision:
        while True:
            try:
                return await self.decide(state)
            except RemoteLost as lost:
                await self.replace(lost)

    async def decide(self, state: SessionState) -> Decision:
        while True:
            generation = self.signal.generation
            heard, self.heard = self.heard, None
            # The stream may show a call twice (its item, then the session waiting on it): the
            # second time, after it was taken, says nothing new.
            stale = (
                heard is not None
                and heard.status == RemoteStatus.WAITING
                and all(c.call_id in self.taken_here for c in heard.pending)
            )
            if stale:
                heard = None
            # Results went out and the stream has not said what the provider did next: reading the
            # session now would only show the calls just answered. After POLL_S without news, it
            # is read all the same.
            unheard = self.delivered_at is not None and (
                self.delivered_at == generation or self.busy or stale
            )
            if heard is None and unheard and await self.wait(generation):
                continue
            self.delivered_at = None
            snapshot = heard if heard is not None else await self.look()
            if snapshot.status == RemoteStatus.FAILED:
                await self.fail("RemoteSessionFailed", snapshot.failure)
            # What this attempt knows: the loop read the record just before asking, and what a
            # person records (an approval, a reconciliation) is waited for by the tool runtime.
            state = await self.context.known_state()
            if await self.settle(state, snapshot):
                continue
            calls, taken = self.take_calls(state, snapshot)
            if calls:  # recorded with the decision, in one append
                return Decision(
                    tool_calls=calls, model_id=snapshot.model, records=self.unrecorded_deliveries() + taken
                )
            if taken:  # refused calls: recorded now, their error results go out first
                await self.context.record(self.unrecorded_deliveries() + taken)
                continue
            if heard is not None and heard.status != RemoteStatus.DONE:
                continue  # what the stream showed was taken already: read the session itself
            if snapshot.status == RemoteStatus.DONE and snapshot.turn in self.answered_turns(state):
                await self.wait(generation)
                continue
            if snapshot.status == RemoteStatus.DONE and await self.tell_reopening(state):
                continue
            if snapshot.status == RemoteStatus.DONE:
                self.ended_turn = snapshot.turn
                await self.record_deliveries()
                await self.copy_outputs(await self.context.known_state())
                return Decision(text=snapshot.text, model_id=snapshot.model)
            await self.wait(generation)

    async def wait(self, generation: int) -> bool:
        """Until the stream says something past `generation` (at most POLL_S), the deliveries
        recorded once the agent took more than DELIVERY_NOTE_WAIT_S. Whether it did."""
        if self.unrecorded:
            held = time.monotonic() - self.unrecorded_since
            await self.signal.wait_past(generation, max(0.0, DELIVERY_NOTE_WAIT_S - held))
            if self.signal.generation > generation:
                return True
            await self.record_deliveries()
        await self.signal.wait_past(generation, POLL_S)
        return self.signal.generation > generation

    async def deliver_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        try:
            await self.hand_back(outcomes)
        except RemoteLost as lost:  # the results stay in the record, settled: none runs again
            await self.replace(lost)

    async def hand_back(self, outcomes: Sequence[ToolOutcome]) -> None:
        state = await self.context.known_state()  # the calls and results were recorded by this attempt
        generation = self.signal.generation
        for outcome in outcomes:
            call = state.remote_calls.get(outcome.request.operation_id)
            if call is None or call.delivered or call.call_id in self.unrecorded:
                continue
            result = await self.result_for(call, outcome.result, outcome.result_seq)
            result = dataclasses.replace(result, first=call.call_id in self.taken_here)
            # Until its delivery is recorded, a lost attempt delivers the result again: under the
            # same key (OpenAI), or after a look at the history (Anthropic).
            if not self.unrecorded:
                self.unrecorded_since = time.monotonic()
            self.unrecorded[call.call_id] = await self.post(result)
            self.delivered_at = generation

    def unrecorded_deliveries(self) -> list[Payload]:
        delivered: list[Payload] = list(self.unrecorded.values())
        self.unrecorded = {}
        return delivered

    async def record_deliveries(self) -> None:
        if self.unrecorded:
            # Lost with the machine, a delivery is made again: under its key, or after a look.
            await self.context.record(self.unrecorded_deliveries(), durable=False)

    async def tell(self, text: str, seq: int) -> None:
        """A person's words for the remote agent, with the steps it has to do again, if any."""
        state = await self.context.known_state()
        known = state.remote_sessions.get(self.sub)
        redo = steps_to_redo(state, self.sub, known.seq if known is not None else 0)
        await self.say("\n".join([text, *(["Steps to do again:", *redo] if redo else [])]), seq)

    async def tell_reopening(self, state: SessionState) -> bool:
        """A scope change or a rejection that reopened this subagent's work after its remote
        session began, told to the remote agent as its next user message, once (`say`): the end of
        a turn before it is never the answer to the request as it stands. Whether it told one."""
        seq = self.untold_reopening(state)
        if seq is None:
            return False
        await self.say(reopening_text(state, self.sub, state.remote_sessions[self.sub].seq), seq)
        return True

    def untold_reopening(self, state: SessionState) -> int | None:
        """The seq of a scope change or a rejection that reopened this subagent's work after its
        remote session began and that the remote agent was not told yet; None when there is none."""
        known = state.remote_sessions.get(self.sub)
        subagent = state.subagents.get(self.sub)
        seq = subagent.reopened_seq if subagent is not None else None
        if known is None or seq is None or seq <= known.seq or self.key(seq) in known.message_keys:
            return None
        if known.remote_session_id != self.remote_id or not steps_to_redo(state, self.sub, known.seq):
            return None
        return seq

    def answered_turns(self, state: SessionState) -> set[str]:
        """The ends of turns that answer nothing now: the one this attempt reported last, and the
        one that had ended when the record's last message went to this remote session (whichever
        attempt sent it), until the provider shows the turn the message started."""
        known = state.remote_sessions.get(self.sub)
        told = known.message_turn if known is not None and known.remote_session_id == self.remote_id else ""
        return {turn for turn in (self.ended_turn, told) if turn}

    async def say(self, text: str, seq: int) -> None:
        """Words for the remote agent, once: under a key derived from `seq`, the event that holds
        them; their acceptance recorded (`message_delivered`, with the turn that had ended)."""
        key = self.key(seq)
        known = (await self.context.known_state()).remote_sessions.get(self.sub)
        if known is not None and key in known.message_keys and known.remote_session_id == self.remote_id:
            return
        try:
            before = await self.look()
            ended = before.turn if before.status == RemoteStatus.DONE else ""
            self.ended_turn = ended or self.ended_turn
            answer = await self.retrying(
                "send a message", lambda: self.provider.send_message(self.remote_id, text, key)
            )
        except RemoteLost as lost:  # the replacement is seeded with the message, from the record
            await self.replace(lost)
            return
        detail = "accepted" if answer == Delivery.ACCEPTED else "the provider held it already"
        delivered = self.remote(
            RemoteKind.MESSAGE_DELIVERED,
            idempotency_key=key,
            turn_id=ended or None,
            detail=f"seq {seq}: {detail}",
        )
        await self.context.record([delivered])

    async def interrupt(self) -> None:
        if not self.remote_id:
            return
        *_, event = await self.context.record(
            [
                *self.unrecorded_deliveries(),
                self.remote(RemoteKind.INTERRUPTED, detail="Belay interrupts the remote agent (cancel)"),
            ]
        )
        with contextlib.suppress(RemoteLost):  # recorded as lost: the next attempt replaces it
            await self.retrying("cancel", lambda: self.provider.cancel(self.remote_id, self.key(event.seq)))

    async def remote_resources(self) -> list[RemoteResource]:
        state = await self.context.read_state()
        held = [
            RemoteResource(kind=resource.split("/", 1)[1], id=remote_id, detail=self.provider.endpoint.label)
            for resource, remote_id in state.remote_resources.items()
            if resource.startswith(f"{self.sub}/")
        ]
        if self.remote_id:
            held.append(
                RemoteResource(kind="session", id=self.remote_id, detail=self.provider.endpoint.label)
            )
        return held

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # unrecorded, a later attempt delivers them again
            await self.record_deliveries()
        await self.stop_watching()
        await self.provider.close()

    async def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
            self._watcher = None

    # ---- the remote session

    async def attach(self, state: SessionState, *, look_first: bool) -> None:
        """Find the remote session in the record, else (`look_first`: an earlier attempt may have
        created it before recording it) at the provider by its metadata, else create it; then
        follow its events. One the record says was lost is replaced (`replace`)."""
        self.record_tag = await self.tag()
        self.moves = len(state.executor_changes)
        known = state.remote_sessions.get(self.sub)
        if known is not None and self.moved_away_since(state, known.seq, known.executor):
            await self.take_over(state, known)
            return
        if known is not None and known.failure:  # lost under an earlier attempt, not yet replaced
            self.remote_id = known.remote_session_id
            await self.replace(RemoteLost("RemoteSessionFailed", known.failure))
            return
        if known is not None:
            self.remote_id = known.remote_session_id
        else:
            metadata = self.metadata()
            resources = self.resources(state)
            found = None
            if look_first:
                found = await self.retrying("find", lambda: self.provider.find_session(metadata, resources))
            how = "found by its metadata: an earlier attempt created it before recording it"
            if found is None and self.moves:  # moved here: the record holds work done elsewhere
                seed = await seed_text(self.context, state, "", self.move_phrase(state))
                found, how = await self.create(metadata, state, seed)
                how += ", seeded from the record after the move to this executor"
            elif found is None:
                found, how = await self.create(metadata, state)
            self.remote_id = found
            # Lost with the machine, a resume finds the session by its metadata.
            await self.context.record([self.remote(RemoteKind.SESSION, detail=how)], durable=False)
        self.follow()

    def moved_away_since(self, state: SessionState, seq: int, executor: str) -> bool:
        """Whether the session was on another executor since the remote session recorded at `seq`
        (of `executor`) was made: its conversation is not the record's any more."""
        return executor != self.kind or any(c.seq > seq for c in state.executor_changes)

    def move_phrase(self, state: SessionState) -> str:
        move = state.executor_changes[-1]
        return change_phrase(move.from_type, move.from_model, move.to_type, move.to_model, at_seq=move.at_seq)

    async def take_over(self, state: SessionState, known: RemoteSessionRecord) -> None:
        """After a move to this executor: a new remote session seeded from the record, never the
        one from before the move (its conversation stops where the session left this executor);
        that one stays in the record, and is closed where this provider can close it."""
        old = known.remote_session_id
        closed = await self.close_lost(old) if known.executor == self.kind else f"held by {known.executor}"
        metadata = self.metadata()
        found = await self.retrying("find", functools.partial(self.find_replacement, metadata, state))
        how = "found by its metadata: an earlier attempt created it before recording it"
        if found is None:
            seed = await seed_text(self.context, state, "", self.move_phrase(state))
            found, how = await self.create(metadata, state, seed)
        self.remote_id = found
        detail = f"{how}, seeded from the record after the move to this executor, not {old} ({closed})"
        await self.context.record([self.remote(RemoteKind.SESSION, detail=detail)], durable=False)
        self.follow()

    def follow(self) -> None:
        self._watcher = asyncio.create_task(self.watch(), name=f"{self.kind}-{self.sub}-events")

    async def replace(self, lost: RemoteLost) -> None:
        """The record is authoritative, the remote session a cache: in place of the lost one
        (recorded `failed`), a new remote session on the same executor, seeded from the record
        (`belay.executors.seeding`), the old one closed where the provider allows it. The calls
        of the old one stay as the record has them. Bounded: once MAX_FRUITLESS_LOSSES remote
        sessions in a row were lost before any took a result, the session fails."""
        with contextlib.suppress(Exception):  # what the old session took, counted as its own
            await self.record_deliveries()
        state = await self.context.read_state()
        known = state.remote_sessions[self.sub]
        losses = known.lost_in_a_row + (0 if known.delivered else 1)
        if losses >= MAX_FRUITLESS_LOSSES:
            raise ExecutorFailed(
                "RemoteSessionsLost",
                f"{self.sub}: {losses} remote sessions in a row were lost before any took a result "
                f"(the last, {known.remote_session_id}: {known.failure or lost.detail}); the record "
                "holds the work so far: check the provider, then resume the session",
            )
        await self.stop_watching()
        old, why = known.remote_session_id, known.failure or lost.detail
        closed = await self.close_lost(old)
        metadata = self.metadata(generation=len(known.replaced) + 2)
        found = await self.retrying("find", functools.partial(self.find_replacement, metadata, state))
        how = "found by its metadata: an earlier attempt created it before recording it"
        if found is None:
            seed = await seed_text(self.context, state, old, why)
            found, how = await self.create(metadata, state, seed)
        self.remote_id = found
        self.heard, self.busy, self.delivered_at, self.taken_here = None, False, None, set()
        detail = f"{how}, seeded from the record in place of {old} (lost; {closed})"
        await self.context.record([self.remote(RemoteKind.SESSION, detail=detail)], durable=False)
        self.follow()

    async def create(self, metadata: dict[str, str], state: SessionState, seed: str = "") -> tuple[str, str]:
        """The new remote session's id, and how it was come by."""
        brief = task_brief(self.context, state, seed)
        gone: set[str] = set()  # recorded resources the provider no longer has: made again
        for attempt in range(TRIES):
            resources = self.resources(await self.context.read_state(), without=gone)
            try:
                created = await translated(
                    self.provider.create_session(metadata, brief, resources, self.record_resource),
                    self.connection_errors,
                )
                return created, "created"
            except RemoteTransient as lost:
                await self.note_interruption(
                    f"creating the remote session: {lost}; looking for it before creating it again"
                )
            except (RemoteRefused, RemoteGone) as refused:
                if isinstance(refused, RemoteGone) and resources:
                    gone |= set(resources.values())
                    await self.note_interruption(
                        f"creating the remote session: {refused}; its {', '.join(sorted(resources))} "
                        "no longer exist at the provider and are made again"
                    )
                    continue
                await self.unavailable(f"the provider refused to create the remote session: {refused}")
            # The create may have taken effect with its answer lost: it has no idempotency key.
            for delay in FIND_AFTER_LOST_CREATE_S:
                await asyncio.sleep(delay)
                resources = self.resources(await self.context.read_state(), without=gone)
                found = await self.retrying(
                    "find", functools.partial(self.provider.find_session, metadata, resources)
                )
                if found is not None:
                    return found, "found by its metadata after the answer to its creation was lost"
            await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
        await self.unavailable(f"the remote session could not be created in {TRIES} tries")
        raise AssertionError("unreachable")

    # ---- calls

    def take_calls(self, state: SessionState, snapshot: Snapshot) -> tuple[list[ToolCall], list[Payload]]:
        """The pending calls to run, and what must be recorded of the calls the record never saw
        (each call, and its refusal when its arguments do not fit the tool). A new call is
        recorded under the operation id the harness derives for it from the record
        (`belay.journal.operations`), the same as on any other executor."""
        by_call_id = {c.call_id: c for c in state.remote_calls.values() if c.subagent == self.sub}
        batch: list[tuple[RemoteCall, dict[str, Any], str | None]] = []
        proposed: list[ProposedCall] = []
        for call in snapshot.pending:
            arguments, problem = check_arguments(call.name, call.arguments)
            known = by_call_id.get(call.call_id)
            if any(taken.call_id == call.call_id for taken, _, _ in batch):
                continue  # shown twice: one call
            answered = known is not None and (
                known.refused_seq is not None or known.operation_id in state.operations
            )
            if answered:
                continue  # answered from the record (`settle`), never run again
            # Recorded, but its request is not (an attempt stopped in between): the same id again.
            batch.append((call, arguments, problem))
            proposed.append(ProposedCall(call.name, arguments, known.operation_id if known else None))
        decided: list[ToolCall] = []
        payloads: list[Payload] = []
        reopened_at = self.untold_reopening(state)
        if reopened_at is not None:
            # The turn began before a change reopened this work: what it asks for now answers the
            # old request (a step it believes done, a file the change rewound). Not run; the turn
            # ends, and the change is its next message, with the steps to do again.
            problem = not_run_text(reopened_at)
            batch = [(call, arguments, problem) for call, arguments, _ in batch]
        for (call, arguments, problem), (operation_id, _) in zip(
            batch, operation_ids(state, self.sub, proposed), strict=True
        ):
            if call.call_id not in by_call_id:
                self.taken_here.add(call.call_id)
                payloads.append(
                    self.remote(
                        RemoteKind.CALL,
                        call_id=call.call_id,
                        turn_id=call.turn_id,
                        operation_id=operation_id,
                        tool=call.name,
                    )
                )
                if problem is not None:
                    payloads.append(
                        self.remote(
                            RemoteKind.CALL_REFUSED,
                            call_id=call.call_id,
                            operation_id=operation_id,
                            tool=call.name,
                            detail=problem,
                        )
                    )
                    continue
            decided.append(
                ToolCall(call_id=call.call_id, name=call.name, arguments=arguments, operation_id=operation_id)
            )
        return decided, payloads

    async def settle(self, state: SessionState, snapshot: Snapshot) -> bool:
        """Deliver what the record holds for calls the provider still waits on: a result recorded
        but never delivered (or delivered and not acknowledged), a refusal, a reconciliation.
        Returns whether anything was delivered."""
        delivered = False
        for pending in snapshot.pending:
            call = next(
                (
                    c
                    for c in state.remote_calls.values()
                    if c.subagent == self.sub and c.call_id == pending.call_id
                ),
                None,
            )
            if call is None or call.delivered or call.call_id in self.unrecorded:
                continue
            result = await self.recorded_result(state, call)
            if result is not None:
                await self.deliver(result)
                delivered = True
        return delivered

    async def recorded_result(self, state: SessionState, call: RemoteCallRecord) -> ResultToDeliver | None:
        if call.refused_seq is not None:
            return ResultToDeliver(call, False, "", call.refusal, self.key(call.refused_seq))
        operation = state.operations.get(call.operation_id)
        if operation is None:
            return None
        if operation.result_seq is not None:
            [event] = await self.context.store.read(
                self.context.session.session_id, operation.result_seq, operation.result_seq
            )
            assert isinstance(event, ToolResultEvent)
            return await self.result_for(call, event.payload, event.seq)
        if operation.outcome == "reconciled" and operation.reconciled_succeeded and operation.outcome_seq:
            # Settled by a person (or a probe) as having taken effect, with no result recorded.
            output = {"reconciled": True, "detail": operation.outcome_detail}
            return ResultToDeliver(call, True, result_text(output), None, self.key(operation.outcome_seq))
        return None

    async def result_for(self, call: RemoteCallRecord, result: ToolResult, seq: int) -> ResultToDeliver:
        output: Any = result.output
        if result.output_ref is not None:
            data = await asyncio.to_thread(self.context.artifacts.get, result.output_ref.sha256)
            output = data.decode(errors="replace")
        if result.ok:
            return ResultToDeliver(call, True, result_text(output), None, self.key(seq))
        return ResultToDeliver(
            call, False, result_text(output) if output else "", result.error or "failed", self.key(seq)
        )

    async def deliver(self, result: ResultToDeliver) -> None:
        await self.context.record([await self.post(result)])

    async def post(self, result: ResultToDeliver) -> Remote:
        """Hand one result to the provider; returns the record of its delivery, to be written."""

        async def send() -> Delivery:
            try:
                return await translated(self.provider.deliver(self.remote_id, result), self.connection_errors)
            except (RemoteTransient, RemoteRefused) as refused:
                # A session that ended while the tool ran takes no result: say so, not "unavailable".
                try:
                    snapshot = await translated(
                        self.provider.snapshot(self.remote_id), self.connection_errors
                    )
                except (RemoteTransient, RemoteRefused):
                    raise refused from None
                if snapshot.status == RemoteStatus.FAILED:
                    raise RemoteEnded(snapshot.failure) from None
                raise

        try:
            answer = await self.retrying(f"deliver the result of {result.call.operation_id}", send)
        except RemoteEnded as ended:
            await self.fail("RemoteSessionFailed", str(ended))
            raise AssertionError("unreachable") from None
        detail = "accepted" if answer == Delivery.ACCEPTED else "the provider already held a result for it"
        return self.remote(
            RemoteKind.RESULT_DELIVERED,
            call_id=result.call.call_id,
            turn_id=result.call.turn_id,
            operation_id=result.call.operation_id,
            tool=result.call.tool,
            idempotency_key=result.key,
            detail=detail,
        )

    # ---- outputs

    async def copy_outputs(self, state: SessionState) -> None:
        """Every output of the remote session into the artifact store, once. Kept as the remote
        agent's own notes, never offered as a deliverable: what the person reviews is what a step
        published (`publish_deliverable`), which the record proves."""
        outputs = await self.retrying(
            "list the remote outputs", lambda: self.provider.outputs(self.remote_id)
        )
        for output in outputs:
            result_id = f"remote:{self.kind}:{output.output_id}"
            if result_id in state.results:
                continue
            data = await self.retrying(
                f"download {output.name}", functools.partial(self.provider.download, self.remote_id, output)
            )
            stored = await asyncio.to_thread(self.context.artifacts.put, data, media_type=output.media_type)
            location = await asyncio.to_thread(self.context.artifacts.location, stored.sha256)
            ref = ArtifactRef(
                sha256=stored.sha256,
                size=stored.size,
                media_type=stored.media_type,
                uri=stored.uri or location,
            )
            await self.context.record(
                [
                    Artifact(
                        name=plain_name(output.name),
                        ref=ref,
                        deliverable=False,
                        subagent=self.sub,
                        description=(
                            f"{self.sub}: the remote agent's own {output.name} from {self.kind} "
                            f"session {self.remote_id} (its notes, not a deliverable)"
                        ),
                        result_id=result_id,
                    )
                ]
            )

    # ---- following the remote session

    async def turn_over(self) -> bool:
        """Whether the remote agent's turn is over, read without recording anything: what the
        session says otherwise (gone, failed) is recorded by the next look, once."""
        try:
            snapshot = await translated(self.provider.snapshot(self.remote_id), self.connection_errors)
        except (RemoteGone, RemoteRefused, RemoteTransient):
            return False
        return snapshot.status == RemoteStatus.DONE

    async def watch(self) -> None:
        """Wake `next_actions` on every event that may matter; reopen a stream that ends, an
        interruption unless it ended cleanly while the remote agent's turn is over."""
        delay = BACKOFF_S[0]
        while True:
            try:
                async for news in self.provider.events(self.remote_id):
                    if news is not None and news.compaction:
                        await self.context.record([self.remote(RemoteKind.COMPACTED, detail=news.compaction)])
                        continue
                    self.busy = news is not None and news.busy
                    if news is not None and news.calls is not None:
                        self.heard = news.calls
                    self.signal.bump()
                    delay = BACKOFF_S[0]
                why = "ended"
            except asyncio.CancelledError:
                raise
            except Exception as error:
                mapped = classify(error, self.connection_errors)
                if isinstance(mapped, RemoteGone):
                    self.busy = False
                    self.signal.bump()  # the next look records why
                    return
                why = f"was cut ({mapped or f'{type(error).__name__}: {error}'})"
            self.busy = False
            self.signal.bump()
            with contextlib.suppress(Exception):
                # A provider may end the stream of a session whose turn is over: nothing is cut.
                if why != "ended" or not await self.turn_over():
                    await self.note_interruption(
                        f"the event stream {why}; it is reopened and the session read again"
                    )
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[-1])
