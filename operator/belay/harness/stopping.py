"""A graceful stop: what a harness attempt does when it is told to stop.

Kubernetes stops a pod with SIGTERM and waits for its grace period; a person stops `belay run` with
Ctrl-C. Told once (`StopRequest.request`, from a signal handler), the attempt:

1. dispatches no new tool call and asks its executors for nothing more: its work is cancelled, so
   a call waiting for an approval, an answer or a replacement sandbox stops waiting at once (it
   was never dispatched);
2. lets the calls in flight (dispatched, their results not yet recorded) finish and record their
   results, for at most `drain_s` seconds after the signal (`BELAY_STOP_DRAIN_S`, default 20 s;
   a pod's grace period is that plus `STOP_MARGIN_S`); whatever still runs then is cut off;
3. records `harness_stopped` (the signal, the calls that were in flight, and what became of them),
   and for each call it recorded but never dispatched that the next attempt would otherwise have to
   treat as an unknown outcome (unsafe, or keyed without a key), that it never took effect
   (`operation_outcome` reconciled, not succeeded, by the harness): the next attempt issues it;
4. returns a result naming the signal: the caller stops the sandboxes, and the process exits with
   the conventional status, 128 + the signal.

Told a second time, it stops at once: the calls still in flight are cut off. A stop signal that
comes once the process that started this one is gone is that process's death (a child session's
`belay`, tied to its coordinator by the parent-death signal), and the kernel sends that signal once
per thread of the dying parent: one death is one request, recorded as the parent's end, never as
"a second SIGTERM" (`StopRequest.parent`). A process that
installs the handlers with `hard_deadline` also exits by itself (without recording anything more)
if the stop is not done `STOP_MARGIN_S` after the drain, so it always ends within a pod's grace
period; the record then shows a lost attempt, as after a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from belay.journal.events import Lifecycle, LifecycleKind, OperationOutcome, Payload
from belay.journal.recovery import RecoveryActionKind, action_for
from belay.journal.state import SessionState

DRAIN_ENV = "BELAY_STOP_DRAIN_S"
DEFAULT_DRAIN_S = 20.0
# After the drain: cancelling, recording the stop, stopping the sandboxes, exiting. A pod's grace
# period is the drain plus this.
STOP_MARGIN_S = 10.0
# Harness tools whose dispatch is a wait on a person or a condition: nothing runs while they wait,
# so they are not in flight, and stop waiting at once.
WAITING_TOOLS = frozenset({"wait_on_user", "wait_on_external"})
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A repeated stop signal this soon after the first, once the parent is gone, is its death told again.
PARENT_DEATH_S = 1.0

T = TypeVar("T")


def drain_from_environment(environment: Mapping[str, str] = os.environ) -> float:
    raw = environment.get(DRAIN_ENV, "").strip()
    if not raw:
        return DEFAULT_DRAIN_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 24 * 3600:
        raise ValueError(f"{DRAIN_ENV}={raw!r} is not a number of seconds between 0 and 86400")
    return value


class Stopping(Exception):
    """A call was about to be dispatched after the attempt was told to stop: it is held back."""


@dataclass
class StopRequest:
    """Set by a signal handler; read by the attempt. `drain_s`: how long calls in flight may go on
    after the first signal."""

    drain_s: float = field(default_factory=drain_from_environment)
    # Called on each request, in the event loop (a person is told what happens next).
    on_request: Callable[[StopRequest, bool], None] | None = None
    received: signal.Signals | None = None
    told_at: float = 0.0  # time.monotonic() of the first request
    told: asyncio.Event = field(default_factory=asyncio.Event)
    at_once: asyncio.Event = field(default_factory=asyncio.Event)
    _deadline: threading.Timer | None = None
    _hard_deadline: bool = False
    # The process that started this one, when the request was made: a signal that comes once it is
    # gone came with its death.
    parent: int = field(default_factory=os.getppid)
    parent_gone: bool = False  # the first request came with the parent's death

    @property
    def requested(self) -> bool:
        return self.received is not None

    @property
    def exit_status(self) -> int:
        return 128 + int(self.received or signal.SIGTERM)

    @property
    def reason(self) -> str:
        """What told the attempt to stop, in words: the signal, and the parent's end if it came
        with it."""
        name = self.received.name if self.received is not None else "a signal"
        return (
            f"{name} (the process that started it, pid {self.parent}, is gone)" if self.parent_gone else name
        )

    def request(self, number: int) -> None:
        first = self.received is None
        orphaned = os.getppid() != self.parent
        if first:
            self.received = signal.Signals(number)
            self.told_at = time.monotonic()
            self.parent_gone = orphaned
            self.told.set()
        elif orphaned and (self.parent_gone or time.monotonic() - self.told_at < PARENT_DEATH_S):
            # The parent's death again, told once per thread it had (the first time maybe while
            # its last threads still ran): one request, which came with its end.
            self.parent_gone = True
            return
        else:
            self.at_once.set()
        if self._hard_deadline:
            self._arm(self.drain_s + STOP_MARGIN_S if first else STOP_MARGIN_S)
        if self.on_request is not None:
            self.on_request(self, first)

    def install(
        self,
        loop: asyncio.AbstractEventLoop,
        signals: Iterable[signal.Signals] = STOP_SIGNALS,
        *,
        hard_deadline: bool = False,
    ) -> None:
        """Handle the stop signals in `loop`. With `hard_deadline`, the process exits by itself
        when a stop takes longer than the drain and the margin after it."""
        self._hard_deadline = hard_deadline
        for number in signals:
            loop.add_signal_handler(number, self.request, number)

    def _arm(self, after_s: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = threading.Timer(after_s, self._exit_now)
        self._deadline.daemon = True
        self._deadline.start()

    def _exit_now(self) -> None:
        with contextlib.suppress(OSError):
            os.write(
                sys.stderr.fileno(),
                b"belay: the stop took longer than its bound; exiting without recording it\n",
            )
        os._exit(self.exit_status)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()


@dataclass
class InFlight:
    """The tool calls this attempt dispatched whose results are not recorded yet."""

    stop: StopRequest | None = None
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    dispatched: set[str] = field(default_factory=set)  # every call this attempt dispatched
    finished_while_stopping: list[str] = field(default_factory=list)
    at_stop: list[str] = field(default_factory=list)  # in flight when the drain began, or finished since

    async def run(self, operation_id: str, tool: str, work: Coroutine[Any, Any, T]) -> T:
        """Dispatch one call. It runs as a task of its own, so cancelling the attempt's work (a
        stop) leaves it running until the drain decides; a wait is not a call in flight."""
        if self.stop is not None and self.stop.requested:
            work.close()
            raise Stopping(f"{operation_id} is held back: the attempt is stopping")
        if tool in WAITING_TOOLS:
            return await work
        task = asyncio.create_task(work, name=f"call {operation_id}")
        self.tasks[operation_id] = task
        self.dispatched.add(operation_id)
        task.add_done_callback(lambda done: self._done(operation_id, done))
        return await asyncio.shield(task)

    def _done(self, operation_id: str, task: asyncio.Task[Any]) -> None:
        if self.tasks.get(operation_id) is task:
            del self.tasks[operation_id]
        failed = task.cancelled() or task.exception() is not None  # exception(): retrieved here
        if not failed and self.stop is not None and self.stop.requested:
            self.finished_while_stopping.append(operation_id)

    async def drain(self, stop: StopRequest) -> None:
        """Wait for the calls in flight until the stop's bound, or a second request; cut off what
        still runs then."""
        pending = dict(self.tasks)
        self.at_stop = sorted({*self.finished_while_stopping, *pending})
        remaining = stop.told_at + stop.drain_s - time.monotonic()
        if pending and remaining > 0 and not stop.at_once.is_set():
            all_done = asyncio.ensure_future(asyncio.wait(list(pending.values())))
            second = asyncio.ensure_future(stop.at_once.wait())
            await asyncio.wait({all_done, second}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            all_done.cancel()
            second.cancel()
        running = [task for task in pending.values() if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=STOP_MARGIN_S / 2)


async def until_stopped(
    work: Coroutine[Any, Any, T], stop: StopRequest, stopped: Callable[[], Awaitable[T]]
) -> T:
    """Run `work`; when told to stop before it ends, cancel it and return what `stopped` does."""
    task = asyncio.create_task(work)
    told = asyncio.create_task(stop.told.wait())
    try:
        await asyncio.wait({task, told}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        told.cancel()
    if not task.done():
        task.cancel()
        remaining = max(0.0, stop.told_at + stop.drain_s - time.monotonic()) + STOP_MARGIN_S / 2
        await asyncio.wait({task}, timeout=remaining)
        if task.done() and not task.cancelled() and task.exception() is not None:
            # Whatever the cancellation ran into (a call held back, Stopping) ends the work the
            # same way: what the stop records says what was left.
            return await stopped()
    if task.done() and not task.cancelled() and not isinstance(task.exception(), Stopping):
        return task.result()  # it ended by itself (or raises what it raised)
    return await stopped()


def stop_payloads(
    state: SessionState,
    stop: StopRequest,
    in_flight: InFlight,
    started_seq: int,
    attempt: int,
) -> list[Payload]:
    """What a stopped attempt records: the calls it never dispatched that would otherwise be
    unknown outcomes, as never having taken effect; then `harness_stopped`."""
    assert stop.received is not None
    name = stop.reason
    calls = in_flight.at_stop
    finished = [op for op in calls if op in state.operations and state.operations[op].has_result]
    left = [op for op in calls if op not in finished]
    held = [
        op
        for op in state.open_operation_records()
        if op.request_seq > started_seq and op.operation_id not in in_flight.dispatched
    ]
    never_ran = [
        op
        for op in held
        if action_for(op, frozenset(), False).action == RecoveryActionKind.AWAIT_RECONCILIATION
    ]
    payloads: list[Payload] = [
        OperationOutcome(
            operation_id=op.operation_id,
            outcome="reconciled",
            succeeded=False,
            detail=f"never dispatched: attempt {attempt} stopped on {name} before it ran it, so it "
            "did not take effect; the next attempt issues it",
            by="harness",
        )
        for op in never_ran
    ]
    parts = []
    if not calls:
        parts.append("no call was in flight")
    if finished:
        parts.append(f"{_calls(finished)} in flight finished ({', '.join(finished)})")
    if left:
        how = f"by a second {name}" if stop.at_once.is_set() else f"at the {stop.drain_s:g} s bound"
        parts.append(f"{_calls(left)} cut off {how}, without a result ({', '.join(left)})")
    if held:
        parts.append(f"{_calls(held)} never dispatched ({', '.join(op.operation_id for op in held)})")
    payloads.append(
        Lifecycle(
            kind=LifecycleKind.HARNESS_STOPPED,
            attempt=attempt,
            reason=name,
            detail="; ".join(parts),
            operations=tuple(calls),
        )
    )
    return payloads


def _calls(operations: list[Any]) -> str:
    return f"{len(operations)} call" + ("" if len(operations) == 1 else "s")
