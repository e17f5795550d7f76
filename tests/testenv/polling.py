"""Waiting for a condition in tests: poll it until it holds, or fail once a deadline passes.

    events = wait_until(lambda: read_events(home, SESSION), "the first event", timeout=120)
    members = wait_until(lambda: group_members(pid), "an empty group", until=lambda m: m == [], timeout=5)
    wait_until(lambda: is_stopped(run.pid), "the run to stop at its point", timeout=120, while_running=run)
    await wait_until_async(client.health, "the sandbox server", timeout=60, ignoring=(OSError,))

The probe's first value that `until` accepts (by default: the first truthy one) is returned. On
timeout the wait fails with `WaitFailed` (an `AssertionError`, so pytest reports it as a failed
check) saying what it waited for, for how long, and the last value the probe gave, followed by
`describe()` when given (a log tail, the state of what was waited on). With `while_running` (a
`subprocess.Popen`), it fails as soon as that process has ended without the condition holding.
A probe that raises ends the wait with its exception, which is how a probe gives up early, unless
the exception is of a type in `ignoring`: then it only means "not yet" and is the last value seen.

`settle` (and `settle_async`) waits the same way but never fails: it returns the last value once
`until` accepts it or the time is up, for a caller that looks at what is left itself (processes
that outlived a kill, which it names or kills before it asserts; a group to SIGKILL after SIGTERM).

    left = settle(lambda: still_alive(before), until=lambda left: not left, timeout=5, interval=0.05)
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

# A last value longer than this is cut in the failure message (a probe may return a whole record).
SHOWN_CHARACTERS = 1000


class WaitFailed(AssertionError):
    """The deadline passed, or the process the wait depended on ended, before the condition held."""


def wait_until(
    probe: Callable[[], T],
    what: str,
    *,
    timeout: float,
    interval: float = 0.1,
    until: Callable[[T], object] = bool,
    ignoring: tuple[type[BaseException], ...] = (),
    while_running: subprocess.Popen[Any] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """Call `probe` every `interval` seconds until `until` accepts what it returns, and return
    that; fail (`WaitFailed`) after `timeout` seconds or once `while_running` has ended."""
    wait = _Wait(what, timeout, while_running, describe)
    while True:
        wait.before_probe()
        try:
            value: Any = probe()
        except ignoring as error:
            wait.not_yet(error)
        else:
            if until(value):
                return value
            wait.not_yet(value)
        time.sleep(interval)


async def wait_until_async(
    probe: Callable[[], Awaitable[T]] | Callable[[], T],
    what: str,
    *,
    timeout: float,
    interval: float = 0.1,
    until: Callable[[T], object] = bool,
    ignoring: tuple[type[BaseException], ...] = (),
    while_running: subprocess.Popen[Any] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """`wait_until` in a coroutine: the probe may be a coroutine function or a plain one, and the
    wait sleeps with `asyncio.sleep`, so the event loop runs meanwhile."""
    wait = _Wait(what, timeout, while_running, describe)
    while True:
        wait.before_probe()
        try:
            value: Any = probe()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as error:
            wait.not_yet(error)
        else:
            if until(value):
                return value
            wait.not_yet(value)
        await asyncio.sleep(interval)


def settle(
    probe: Callable[[], T], *, until: Callable[[T], object], timeout: float, interval: float = 0.1
) -> T:
    """The probe's value once `until` accepts it, or its last one after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value) and time.monotonic() < deadline:
        time.sleep(interval)
        value = probe()
    return value


async def settle_async(
    probe: Callable[[], T], *, until: Callable[[T], object], timeout: float, interval: float = 0.1
) -> T:
    """`settle` in a coroutine: sleeps with `asyncio.sleep`."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value) and time.monotonic() < deadline:
        await asyncio.sleep(interval)
        value = probe()
    return value


class _Wait:
    """When a wait is lost, and what it says then."""

    def __init__(
        self,
        what: str,
        timeout: float,
        while_running: subprocess.Popen[Any] | None,
        describe: Callable[[], str] | None,
    ) -> None:
        self.what = what
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.process = while_running
        self.describe = describe
        self.ended = False

    def before_probe(self) -> None:
        # Looked at before the probe: a process that had ended by then cannot make it hold later.
        self.ended = self.process is not None and self.process.poll() is not None

    def not_yet(self, last: object) -> None:
        """The probe gave `last`, which does not end the wait: fail if it cannot end any more."""
        if self.ended:
            assert self.process is not None
            self.fail(
                f"{self.what}: pid {self.process.pid} ended first (exit {self.process.returncode})", last
            )
        if time.monotonic() >= self.deadline:
            self.fail(f"timed out after {self.timeout:g} s waiting for {self.what}", last)

    def fail(self, headline: str, last: object) -> None:
        shown = repr(last)
        if len(shown) > SHOWN_CHARACTERS:
            shown = shown[:SHOWN_CHARACTERS] + f"... ({len(shown)} characters)"
        message = f"{headline}; last seen: {shown}"
        raise WaitFailed(f"{message}\n{self.describe()}" if self.describe is not None else message)
