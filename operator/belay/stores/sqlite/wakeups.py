"""The watches of a SQLite store that wait to be woken by its appends.

A watch registers before it reads, so an append that lands between its read and its wait still
wakes it. The writer thread wakes each watch on the watch's own event loop (a watch may live on
another loop, in another thread); watches also poll, for appends made by other processes.
"""

from __future__ import annotations

import asyncio
import threading

# Where a watch of every session waits to be woken (no session has the empty id).
ANY_SESSION = ""


class Wakeups:
    """The waiting watches of one store, by session (ANY_SESSION: the watches of every session)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        # The waiters of watches that read all there was and wait for the next append.
        self._caught_up: set[asyncio.Future[None]] = set()
        self._caught_up_changed = threading.Condition(self._lock)

    def add(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        with self._lock:
            self._waiters.setdefault(session_id, set()).add(waiter)

    def caught_up(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        """The watch that registered `waiter` read all there was and waits for more."""
        with self._lock:
            if waiter in self._waiters.get(session_id, ()):
                self._caught_up.add(waiter)
                self._caught_up_changed.notify_all()

    def wait_caught_up(self, session_id: str, timeout: float) -> bool:
        """Block until a watch of the session is caught up (True), or `timeout` seconds pass."""
        with self._caught_up_changed:
            return self._caught_up_changed.wait_for(
                lambda: not self._caught_up.isdisjoint(self._waiters.get(session_id, ())), timeout
            )

    def remove(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        """Called on the waiter's own loop."""
        self.forget(session_id, waiter)
        if not waiter.done():
            waiter.cancel()

    def forget(self, session_id: str, waiter: asyncio.Future[None]) -> None:
        with self._lock:
            self._caught_up.discard(waiter)
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[session_id]

    def wake(self, session_id: str) -> None:
        """Wake the watches of the session and those of every session."""
        with self._lock:
            waiters = [*self._waiters.get(session_id, ()), *self._waiters.get(ANY_SESSION, ())]
        for waiter in waiters:
            # A watcher may live on another event loop (another thread): wake it on its own loop.
            try:
                waiter.get_loop().call_soon_threadsafe(_resolve, waiter)
            except RuntimeError:
                # Its loop is closed (an abandoned watch); the append itself has succeeded.
                self.forget(session_id, waiter)
                self.forget(ANY_SESSION, waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
