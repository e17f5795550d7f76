"""A watch of every session cancelled while its query runs on a reader thread: the connection it
polls is closed only after that query, never under it (which crashed the process in SQLite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Start a watch, cancel it a moment later, many times over: the cancel lands while
# `PRAGMA data_version` or the heads' read still runs on a reader thread in a good share of them.
CANCELLED_WATCHES = """
import asyncio, random, sys
from pathlib import Path
from belay.stores.sqlite.store import SqliteEventStore

async def main():
    store = SqliteEventStore(Path(sys.argv[1]))
    store.poll_interval = 0.0001
    for _ in range(1000):
        async def consume():
            async for _ in store.watch_sessions():
                pass
        task = asyncio.create_task(consume())
        await asyncio.sleep(random.random() * 0.002)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    await store.close()
    print("every watch ended")

asyncio.run(main())
"""


def test_cancelled_watches_of_every_session_never_close_the_connection_under_a_query(tmp_path: Path) -> None:
    # A process of its own: a crash there fails this test instead of taking the test run with it.
    ran = subprocess.run(
        [sys.executable, "-c", CANCELLED_WATCHES, str(tmp_path / "events.db")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0 and "every watch ended" in ran.stdout, (ran.returncode, ran.stderr[-2000:])
