"""How a session's worker learns that there is something to do, without asking: one watch per
event store (`EventStore.watch_sessions`) names the sessions whose records moved and wakes their
workers, which make a pass when the record has events they have not folded (not for their own
writes); the cluster wakes them through the kopf handlers. A worker that nothing woke does
nothing and reads nothing. Slow timers remain as a safety net (`worker_step`): the resync pass
always, the periodic check of the record only while its store's watch is not in place (every
store's watch promises to miss no change, and says when it may have).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from belay.controller import names
from belay.controller.recovery import PENDING_FAILURES
from belay.stores.base import WATCH_CUT, EventStore, StoreUnavailable

log = logging.getLogger("belay.operator")

# How long a store's watch waits before it is opened again after it failed.
REOPEN_DELAY_S = 1.0
# Metadata that every write of an object changes, whatever it changed.
WRITE_METADATA = ("resourceVersion", "managedFields")


class Step(enum.Enum):
    PASS = "pass"  # a reconcile pass
    CHECK = "check"  # ask the store whether the record moved, then pass if it did
    WAIT = "wait"


@dataclass
class WorkerWake:
    """What woke one worker since it last looked."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    pass_asked: bool = False  # the cluster changed
    check_asked: bool = False  # the record moved, or may have (its store's watch started again)

    def ask_pass(self) -> None:
        self.pass_asked = True
        self.event.set()

    def ask_check(self) -> None:
        self.check_asked = True
        self.event.set()

    def nudge(self) -> None:
        """Wake the worker to look at its timers again, asking nothing."""
        self.event.set()

    def take(self) -> tuple[bool, bool]:
        """(pass asked, check asked), cleared for the next wake-up."""
        asked = (self.pass_asked, self.check_asked)
        self.pass_asked = self.check_asked = False
        self.event.clear()
        return asked

    async def wait(self, timeout: float) -> None:
        """Until woken, or the timeout passes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout=max(timeout, 0.0))


def changed_beyond_status(previous: Mapping[str, Any] | None, body: Mapping[str, Any]) -> bool:
    """Whether a change of an AgentSession is more than a new status. Only the operator writes the
    status, at the end of a pass, so the session's worker need not wake for it."""
    return previous is None or _beyond_status(previous) != _beyond_status(body)


def _beyond_status(body: Mapping[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k not in WRITE_METADATA}
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": metadata}


@dataclass(frozen=True)
class PodView:
    """What a pass reads of a pod (`belay.controller.reconciler.harness_pods`, `sandbox_pods`,
    `pod_phase`), and the cause a Pending pod waits on when it does not pass on its own (an image
    pull, a missing Secret, no node: the session shows it); a change of anything else (other
    conditions, addresses, container states) needs no pass."""

    component: str
    attempt: str
    phase: str
    deleting: bool
    failing_wait: str = ""


def failing_wait(status: Mapping[str, Any]) -> str:
    """The reason a Pending pod waits, when it is one of `PENDING_FAILURES`; "" otherwise."""
    if (status.get("phase") or "Pending") != "Pending":
        return ""
    reasons = [
        ((c.get("state") or {}).get("waiting") or {}).get("reason", "")
        for c in status.get("containerStatuses") or []
    ]
    reasons += [
        c.get("reason", "")
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    return next((r for r in reasons if r in PENDING_FAILURES), "")


def pod_view(body: Mapping[str, Any]) -> PodView:
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return PodView(
        component=labels.get(names.LABEL_COMPONENT, ""),
        attempt=labels.get(names.LABEL_ATTEMPT, ""),
        phase=(body.get("status") or {}).get("phase") or "Pending",
        deleting=metadata.get("deletionTimestamp") is not None,
        failing_wait=failing_wait(body.get("status") or {}),
    )


def worker_step(
    *,
    pass_asked: bool,
    check_asked: bool,
    since_pass: float,
    since_check: float,
    resync_s: float,
    follow_s: float,
) -> Step:
    """What a worker does now: a pass when asked or when the resync interval passed; a check of
    the record when asked or when the follow interval passed; else wait."""
    if pass_asked or since_pass >= resync_s:
        return Step.PASS
    if check_asked or since_check >= follow_s:
        return Step.CHECK
    return Step.WAIT


def wait_for_next_step(*, since_pass: float, since_check: float, resync_s: float, follow_s: float) -> float:
    """How long a worker may sleep before one of its timers is due."""
    return min(resync_s - since_pass, follow_s - since_check)


class RecordWatches:
    """One watch per event store, shared by every session on it. A session named by the watch
    wakes its worker to check its record; a watch that (re)started without knowing what it missed
    asks every worker on that store to check. While a store's watch is in place, its workers need
    no periodic check (`watching`). A watch cut while its store does not answer has them check at
    once (`_probe`), so each session's status says so."""

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}
        # The stores whose watch is in place: it said so (None first) and has not failed since.
        self._live: set[int] = set()
        # store -> record id -> worker -> its wake; and each worker's place there.
        self._wakes: dict[int, dict[str, dict[str, WorkerWake]]] = {}
        self._following: dict[str, tuple[int, str]] = {}

    def follow(self, store: EventStore, session_id: str, worker: str, wake: WorkerWake) -> None:
        """Wake `worker` when the record `session_id` of `store` moves. Cheap when already so."""
        place = (id(store), session_id)
        if self._following.get(worker) == place:
            return
        self.unfollow(worker)
        self._following[worker] = place
        self._wakes.setdefault(id(store), {}).setdefault(session_id, {})[worker] = wake
        if id(store) not in self._tasks:
            self._tasks[id(store)] = asyncio.create_task(self._watch(store), name=f"record watch {id(store)}")

    def unfollow(self, worker: str) -> None:
        place = self._following.pop(worker, None)
        if place is None:
            return
        store, session_id = place
        sessions = self._wakes.get(store, {})
        workers = sessions.get(session_id, {})
        workers.pop(worker, None)
        if not workers:
            sessions.pop(session_id, None)

    def watching(self, worker: str) -> bool:
        """Whether the watch of the store `worker` follows is in place, so that no change of its
        record goes unannounced."""
        place = self._following.get(worker)
        return place is not None and place[0] in self._live

    def moved(self, store: int, session_id: str | None) -> None:
        """What the watch of `store` said: this record moved, or any may have. Either way its
        workers check (one read): the events may be the worker's own writes, already folded."""
        sessions = self._wakes.get(store, {})
        named = sessions.values() if session_id is None else [sessions.get(session_id, {})]
        for workers in named:
            for wake in workers.values():
                wake.ask_check()

    def _watch_stopped(self, store: int) -> None:
        """The watch of `store` is no longer in place: its workers look at their timers again, so
        that the periodic check covers them until it is (one wake per failure, not per retry)."""
        if store not in self._live:
            return
        self._live.discard(store)
        for workers in self._wakes.get(store, {}).values():
            for wake in workers.values():
                wake.nudge()

    async def _watch(self, store: EventStore) -> None:
        while True:
            try:
                async for session_id in store.watch_sessions():
                    if session_id == WATCH_CUT:
                        self._watch_stopped(id(store))
                        await self._probe(store)
                        continue
                    if session_id is None:
                        self._live.add(id(store))
                    self.moved(id(store), session_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the watch of an event store failed; opening it again")
            self._watch_stopped(id(store))
            await asyncio.sleep(REOPEN_DELAY_S)

    async def _probe(self, store: EventStore) -> None:
        """A cut watch may mean that the store went away, or only the member the watch went
        through. One read tells: a store that does not answer has every worker on it check its
        record now, which reports the store in its session's status; one that answers costs its
        workers nothing more than their timers."""
        sessions = self._wakes.get(id(store), {})
        some = next(iter(sessions), None)
        if some is None:
            return
        try:
            await store.last_seq(some)
        except StoreUnavailable:
            for workers in list(sessions.values()):
                for wake in workers.values():
                    wake.ask_check()
        except Exception:
            log.exception("reading the record %s after its store's watch was cut failed", some)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        self._live.clear()
