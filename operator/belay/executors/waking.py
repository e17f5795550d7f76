"""Waking a managed executor when its remote session may have moved: a counter of "something may
have changed", bumped by the event stream, and a wait for it to move past a value."""

from __future__ import annotations

import asyncio
import contextlib


class Signal:
    """A counter of "something may have changed", and a wait for it to move past a value."""

    def __init__(self) -> None:
        self.generation = 0
        self._waiters: list[asyncio.Future[None]] = []

    def bump(self) -> None:
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_past(self, generation: int, timeout: float) -> None:
        if self.generation > generation:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, timeout)
