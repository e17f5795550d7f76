"""One harness attempt: its fencing lease, the events it records, and the state it folds.

An attempt takes the next lease on the session; every append it makes carries that lease, so a
newer attempt's lease refuses the writes of an older one that is still running (frozen, or cut off
and not dead). While it runs it renews the lease every few seconds (`EventStore.renew_lease`, one
record per session, never an event): that renewal is how every view tells a live attempt from a
dead one (`belay.journal.status.phase_of`).

The attempt folds the record incrementally and keeps nothing the record does not also hold: a
harness killed at any point is replaced by a new attempt that reads the record and continues.
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
    Event,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    Remote,
    Task,
    TaskStatus,
    ToolRequest,
    ToolRequestEvent,
)
from belay.journal.state import EMPTY, SessionState, apply
from belay.journal.status import HEARTBEAT_INTERVAL_S
from belay.stores.base import EventStore, StaleLease, StoreError

HARNESS_VERSION = f"belay-harness/{__version__}"
# Fault injection for the interruption tests and the drill: a comma-separated list of
# `<event type>:<key>`; the harness stops itself (SIGSTOP) right after recording a matching event,
# so the caller can kill it at exactly that point.
FAULT_ENV = "BELAY_FAULT_STOP_AFTER"


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

    number: int = 0  # the attempt's number is its lease number
    lease: int = 0
    _state: SessionState = EMPTY
    _state_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _append_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _fault_points: frozenset[str] = field(default_factory=frozenset)
    _heartbeat: asyncio.Task[None] | None = None
    # The seq of this attempt's harness_started; 0 until it is recorded.
    started_seq: int = 0

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
    ) -> list[Event]:
        drafts = [EventDraft(payload=p, actor=self.actor(subagent), parent_seq=parent_seq) for p in payloads]
        # One append at a time from this attempt, so a fault stop never freezes the process in the
        # middle of another subagent's write (and with the store's write lock held).
        async with self._append_lock:
            events = await self.store.append(self.session_id, drafts, lease=self.lease, claim=claim)
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

    async def requests_by_operation(self) -> dict[str, ToolRequest]:
        return {
            e.payload.operation_id: e.payload for e in await self.events() if isinstance(e, ToolRequestEvent)
        }

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
