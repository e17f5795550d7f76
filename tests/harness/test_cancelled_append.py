"""An append cut short by a stop: the stop cancels the attempt's work, but the store may write all
the same (SQLite writes from a thread of its own, etcd over the network). The attempt waits for
that write before its work ends, so that the stop, which records the calls never dispatched, sees
a request recorded at the last moment (otherwise the next attempt finds it without a result and
treats it as an unknown outcome)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from belay.api.agentsession import parse_manifest
from belay.harness.attempt import Attempt
from belay.journal.events import EffectClass, ToolRequest
from belay.stores.sqlite import SqliteEventStore
from tests.api.invalid_manifests import valid_manifest
from tests.testenv.polling import wait_until_async

SESSION = "cut-short"
HANG_GUARD_S = 30


class HeldStore(SqliteEventStore):
    """A real store whose next append is held until released, and then lands whether or not its
    caller still waits for it, as a write already handed to a writer thread does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = False
        self.entered = asyncio.Event()
        self.release = threading.Event()
        self.landing: asyncio.Future[Any] | None = None

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        if not self.hold:
            return await super().append(*args, **kwargs)
        self.hold = False
        self.landing = asyncio.ensure_future(self._land_when_released(*args, **kwargs))
        return await asyncio.shield(self.landing)

    async def _land_when_released(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        await asyncio.to_thread(self.release.wait, HANG_GUARD_S)
        return await super().append(*args, **kwargs)


async def test_a_stop_sees_the_request_its_cancelled_work_was_recording(tmp_path: Path) -> None:
    store = HeldStore(tmp_path / "events.db")
    attempt = Attempt(session=parse_manifest(valid_manifest(SESSION)), store=store)
    await attempt.acquire()
    try:
        request = ToolRequest(
            operation_id="researcher.diagnose.4",
            tool="create_ticket",
            arguments={"title": "t"},
            effect=EffectClass.UNSAFE,
        )
        store.hold = True
        recording = asyncio.create_task(attempt.record([request], subagent="researcher"))
        await asyncio.wait_for(store.entered.wait(), HANG_GUARD_S)
        held_at = recording.get_coro().cr_await  # what the record awaits: its append, shielded
        recording.cancel()  # the stop cancels the work while its append is under way
        # Until the record has taken the cancellation: it awaits something else, or it has ended.
        await wait_until_async(
            lambda: recording.done() or recording.get_coro().cr_await is not held_at,
            "the cancellation to reach the record",
            timeout=HANG_GUARD_S,
            interval=0,
        )
        assert not recording.done(), "the cancelled record returned before its append landed"
        store.release.set()
        await asyncio.wait_for(asyncio.gather(recording, return_exceptions=True), HANG_GUARD_S)
        assert recording.cancelled()
        assert store.landing is not None and store.landing.done()  # ended only once it landed

        await attempt.appends_settled()
        state = await attempt.state()
        assert [op.operation_id for op in state.open_operation_records()] == ["researcher.diagnose.4"]
    finally:
        store.release.set()
        await attempt.release()
        await store.close()
