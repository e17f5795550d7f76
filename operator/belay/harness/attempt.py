"""One harness attempt: its fencing lease, the events it records, and the state it folds.

An attempt takes the next lease on the session; every append it makes carries that lease, so a
newer attempt's lease refuses the writes of an older one that is still running (frozen, or cut off
and not dead). While it runs it renews the lease every few seconds (`EventStore.renew_lease`, one
record per session, never an event): that renewal is how every view tells a live attempt from a
dead one (`belay.journal.phase.phase_of`).

The attempt folds the record incrementally and keeps nothing the record does not also hold: a
harness killed at any point is replaced by a new attempt that reads the record and continues. It
starts from the latest usable state snapshot and folds only the events after it, and writes a new
snapshot every `SNAPSHOT_EVERY` events, sooner after a verified checkpoint
(`belay.journal.snapshots`), so the next attempt's start costs the same at any history length.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from belay import __version__
from belay.api.agentsession import AgentSession
from belay.journal.events import (
    Actor,
    CheckpointEvent,
    Event,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    Remote,
    StateSnapshot,
    StateSnapshotEvent,
    Task,
    TaskStatus,
    ToolRequest,
    ToolRequestEvent,
)
from belay.journal.handover import executor_label
from belay.journal.phase import HEARTBEAT_INTERVAL_S, failed_delegations_text
from belay.journal.snapshots import FOLD_VERSION, load_state, snapshot_due, write_snapshot
from belay.journal.state import EMPTY, ExecutorChangeRecord, SessionState, apply
from belay.stores.base import (
    ArtifactStore,
    EventStore,
    RecordCorrupt,
    StaleLease,
    StoreError,
    StoreUnavailable,
)

HARNESS_VERSION = f"belay-harness/{__version__}"
# Fault injection for the interruption tests and the drill: a comma-separated list of
# `<event type>:<key>`; the harness stops itself (SIGSTOP) right after recording the first event
# matching each, so the caller can kill it at exactly that point. Once per point: a key can recur
# (`model_output:`, a subagent's `lifecycle:sandbox_started`), and a caller that lets the harness
# go on (a signal sent while it is stopped) must not find it stopped again with no one to wake it.
FAULT_ENV = "BELAY_FAULT_STOP_AFTER"
# How long a read of the record waits for a store that does not answer (an etcd cluster without its
# quorum for a while) before the attempt gives up; between tries, this long.
STORE_WAIT_S = 300.0
STORE_RETRY_S = 1.0


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
    # The signal the attempt was told to stop with, when it stopped on one (belay.harness.stopping).
    stopped_by: signal.Signals | None = None


@dataclass
class Attempt:
    session: AgentSession
    store: EventStore
    holder: str = "local"
    model_id: str = ""
    on_event: Callable[[Event], None] | None = None
    # Where state snapshots are read from and written to; without one the attempt folds the
    # whole record and writes none.
    artifacts: ArtifactStore | None = None

    number: int = 0  # the attempt's number is its lease number
    lease: int = 0
    _state: SessionState = EMPTY
    _state_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _append_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _fault_points: frozenset[str] = field(default_factory=frozenset)
    _heartbeat: asyncio.Task[None] | None = None
    _loaded: bool = False
    _snapshot_seq: int | None = None  # the latest snapshot event this attempt knows of
    _snapshot_covers: int = 0  # the seq that snapshot covers
    # The seq of this attempt's harness_started; 0 until it is recorded.
    started_seq: int = 0
    # What this attempt recorded since the state was last brought up to date (`known_state`).
    _own: list[Event] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    async def acquire(self) -> None:
        """Take the next lease: from here on, every earlier attempt's appends are refused."""
        self._fault_points = frozenset(p for p in os.environ.get(FAULT_ENV, "").split(",") if p)
        lease = await self.store.acquire_lease(self.session_id, self.holder)
        self.lease = lease.number
        self.number = lease.number
        await self.store.renew_lease(self.session_id, self.lease)
        self._heartbeat = asyncio.create_task(self._keep_renewing(), name=f"heartbeat-{self.session_id}")

    async def _keep_renewing(self, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.store.renew_lease(self.session_id, self.lease)
            except StaleLease:
                return  # superseded: the attempt learns it at its next append or lease check
            except StoreError:
                continue  # unreachable for now: readers see the renewal age, the next beat retries

    async def release(self) -> None:
        """Stop renewing the lease: from now on nothing proves this attempt alive."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    async def check_lease(self) -> None:
        """Raise StaleLease when a newer attempt holds the session. Starting a sandbox stops what
        runs in its place (locally the recorded server, in a cluster the pod's process), so an
        attempt that was only frozen must learn it was superseded before it starts one, not at
        its next append."""
        current = await self.store.current_lease(self.session_id)
        if current is None or current.number != self.lease:
            held = "no lease" if current is None else f"lease {current.number}"
            raise StaleLease(f"attempt {self.number} holds lease {self.lease}, the session has {held}")

    # ---------------------------------------------------------------------------------------------
    # The record

    def actor(self, subagent: str | None = None) -> Actor:
        return Actor(
            kind="harness",
            attempt=self.number,
            harness_version=HARNESS_VERSION,
            model_id=self.model_id or None,
            subagent=subagent,
        )

    async def record(
        self,
        payloads: Sequence[Payload],
        *,
        subagent: str | None = None,
        parent_seq: int | None = None,
        claim: str | None = None,
        durable: bool = True,
        unless_newer: tuple[str, int] | None = None,
    ) -> list[Event]:
        """Append under the attempt's lease. `durable=False` for what nothing outside the record
        acts on before the next durable append (`EventStore.append`): it survives the process
        being killed, and only a machine crash can take it off the end of the record. With
        `unless_newer`, refused (Superseded) once the record holds a newer event of that type."""
        drafts = [EventDraft(payload=p, actor=self.actor(subagent), parent_seq=parent_seq) for p in payloads]
        # One append at a time from this attempt, so a fault stop never freezes the process in the
        # middle of another subagent's write (and with the store's write lock held).
        async with self._append_lock:
            appending = asyncio.ensure_future(
                self.store.append(
                    self.session_id,
                    drafts,
                    lease=self.lease,
                    claim=claim,
                    durable=durable,
                    unless_newer=unless_newer,
                )
            )
            try:
                events = await asyncio.shield(appending)
            except asyncio.CancelledError:
                # Cut short (a stop cancels the attempt's work), the append may land all the same:
                # the store writes from a thread of its own, or over the network. It is waited
                # for with the lock held, so that what reads the record next (the stop, recording
                # which calls were never dispatched) sees it.
                with contextlib.suppress(Exception):
                    await appending
                raise
            self._own.extend(events)
            for event in events:
                if self.on_event is not None:
                    self.on_event(event)
            reached = self._fault_points and self._fault_points.intersection(fault_key(e) for e in events)
            if reached:
                self._fault_points -= reached
                os.kill(os.getpid(), signal.SIGSTOP)
        return events

    async def appends_settled(self) -> None:
        """Returns once no append of this attempt is under way, a cancelled one included."""
        async with self._append_lock:
            pass

    async def state(self) -> SessionState:
        """The fold of the record, brought up to date incrementally: the first call starts from
        the latest usable snapshot, every later one folds only the events recorded since."""
        async with self._state_lock:
            return await self._read_state()

    async def known_state(self) -> SessionState:
        """The state as of the last read of the record plus what this attempt recorded since,
        without reading the record again: for what depends only on the attempt's own writes (a
        result's provenance, which results went out). What a person or another process recorded
        meanwhile is seen at the next `state()`; if another writer's event lies between this
        attempt's own, the record is read."""
        async with self._state_lock:
            own, self._own = sorted(self._own, key=lambda e: e.seq), []
            state = self._state
            if self._loaded:
                for event in own:
                    if event.seq <= state.last_seq:
                        continue
                    if event.seq != state.last_seq + 1:
                        return await self._read_state()  # someone else wrote in between
                    state = apply(state, event)
                    if isinstance(event, StateSnapshotEvent):
                        self._snapshot_seq, self._snapshot_covers = event.seq, event.payload.covers_seq
                self._state = state
                return state
            return await self._read_state()

    async def _read_state(self) -> SessionState:
        """`state()`, with the state lock held."""
        self._own = []
        if not self._loaded:
            loaded = await load_state(self.store, self.artifacts, self.session_id)
            self._loaded = True
            state = loaded.state
            self._snapshot_seq, self._snapshot_covers = loaded.snapshot_seq, loaded.snapshot_covers
        else:
            state = self._state
            checkpointed = False
            for event in await self._read_when_answered(state.last_seq + 1):
                state = apply(state, event)
                if isinstance(event, StateSnapshotEvent):
                    self._snapshot_seq, self._snapshot_covers = event.seq, event.payload.covers_seq
                checkpointed = checkpointed or (isinstance(event, CheckpointEvent) and event.payload.verified)
            if (
                self.artifacts is not None
                and self.lease
                and snapshot_due(state, self._snapshot_covers, checkpointed)
            ):
                state = await self._write_snapshot(state, self.artifacts)
        self._state = state
        return state

    async def _read_when_answered(self, from_seq: int) -> list[Event]:
        """The record from `from_seq`. A store that does not answer is waited for, up to
        STORE_WAIT_S: a read changes nothing, so it is tried again and the attempt goes on where it
        was (its lease renewals resume with the store). An append is not retried so: one that
        fails ends the attempt, and the next restores from the record."""
        deadline = asyncio.get_running_loop().time() + STORE_WAIT_S
        while True:
            try:
                return list(await self.store.read(self.session_id, from_seq=from_seq))
            except StoreUnavailable:
                if asyncio.get_running_loop().time() + STORE_RETRY_S > deadline:
                    raise
            await asyncio.sleep(STORE_RETRY_S)

    async def _write_snapshot(self, state: SessionState, artifacts: ArtifactStore) -> SessionState:
        """Store a snapshot of `state` and record the event that names it. A snapshot only saves
        later readers work, so one that cannot be written is left for the next chance."""
        try:
            ref, rebased = await asyncio.to_thread(write_snapshot, state, artifacts)
            [event] = await self.record(
                [
                    StateSnapshot(
                        ref=ref,
                        covers_seq=state.last_seq,
                        fold_version=FOLD_VERSION,
                        previous_seq=self._snapshot_seq,
                    )
                ],
                durable=False,  # a snapshot lost in a machine crash only makes the next fold longer
            )
        except StaleLease:
            raise
        except (StoreError, OSError):
            return state
        self._snapshot_seq, self._snapshot_covers = event.seq, state.last_seq
        # Go on from the state the snapshot was taken of, rebuilt on what was written, so the next
        # snapshot writes only what changes from here; the next read folds the snapshot event and
        # whatever another subagent recorded meanwhile.
        return rebased

    async def events(self) -> list[Event]:
        """The whole record: only for what the state does not keep (a stop that cut off the code
        noting the attempt's start)."""
        return await self.store.read(self.session_id)

    async def request_of(self, operation_id: str) -> ToolRequest:
        """An operation's recorded request, read at the seq the state keeps for it: recovery never
        reads the whole record."""
        seq = (await self.state()).operations[operation_id].request_seq
        found = await self.store.read(self.session_id, seq, seq)
        if (
            not found
            or not isinstance(found[0], ToolRequestEvent)
            or found[0].payload.operation_id != operation_id
        ):
            raise RecordCorrupt(self.session_id, seq, f"the request of {operation_id} is not at this seq")
        return found[0].payload

    # ---------------------------------------------------------------------------------------------
    # Beginning and end

    async def record_start(self, state: SessionState) -> None:
        payloads: list[Payload] = []
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
                attempt=self.number,
                lease=self.lease,
                detail=f"{HARNESS_VERSION}, model {self.model_id or 'unknown'}",
            )
        )
        if state.lifecycle.harness_starts == 0:
            for sub in self.session.spec.subagents:
                payloads.append(
                    Task(
                        task_id=sub.name,
                        title=sub.role or sub.name,
                        status=TaskStatus.PLANNED,
                        owner=sub.name,
                        deliverable=sub.deliverable,
                    )
                )
        recorded = await self.record(payloads)
        self.started_seq = next(
            e.seq
            for e in recorded
            if isinstance(e.payload, Lifecycle) and e.payload.kind == LifecycleKind.HARNESS_STARTED
        )

    async def fail_session(self, reason: str, detail: str) -> HarnessResult:
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.SESSION_FAILED, attempt=self.number, reason=reason, detail=detail
                ),
                Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=self.number, reason=reason),
            ]
        )
        return HarnessResult(False, detail, self.number)

    async def stop(self, reason: str, detail: str) -> HarnessResult:
        """End this attempt without ending the session: a later attempt goes on from the record."""
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.HARNESS_FINISHED, attempt=self.number, reason=reason, detail=detail
                )
            ]
        )
        return HarnessResult(False, detail, self.number)

    async def stop_for_move(self, move: ExecutorChangeRecord) -> HarnessResult:
        """End this attempt cleanly at a step boundary because the session moved to another
        executor: not a lost attempt (it counts as a clean stop), and the next runs there."""
        to = executor_label(move.to_type, move.to_model)
        detail = f"every subagent at a step boundary; the next attempt runs on {to}"
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.HARNESS_STOPPED,
                    attempt=self.number,
                    reason="ExecutorChanged",
                    detail=detail,
                )
            ]
        )
        return HarnessResult(False, detail, self.number)

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
                [Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=self.number, detail=detail)]
            )
            return HarnessResult(False, detail, self.number)
        if state.failed_delegations:
            # A part handed to a child session that could not be started or awaited is not done.
            return await self.fail_session("DelegationFailed", failed_delegations_text(state))
        names = ", ".join(sorted(state.deliverables))
        await self.record(
            [
                Lifecycle(
                    kind=LifecycleKind.SESSION_COMPLETED,
                    attempt=self.number,
                    reason="DeliverablesPublished",
                    detail=f"every subtask done; deliverables: {names}",
                ),
                Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=self.number),
            ]
        )
        return HarnessResult(True, f"completed; deliverables: {names}", self.number)


def fault_key(event: Event) -> str:
    """`<type>:<identity>`: names an event the same way in every run, whatever its seq."""
    payload = event.payload
    if isinstance(payload, Remote):  # several kinds name one operation: the kind tells them apart
        return f"{event.type}:{payload.kind}:{payload.operation_id or payload.subagent}"
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
