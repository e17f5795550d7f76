"""An archiver process that kills itself with SIGKILL at one point of `EtcdEventStore.archive`.

    python archiver_process.py '<store spec JSON>' <session id> <point> <segment number>

`point` is one of the points `archive` reports ("stored", "verified", "indexed"); the process dies
there while archiving the segment-th segment (from 1), as a process killed by the kernel would:
no cleanup, no flush. It exits 0 if the archive finishes first.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from belay.stores import open_event_store
from belay.stores.etcd import EtcdEventStore


async def archive_until_killed(spec: dict[str, object], session_id: str, point: str, segment: int) -> None:
    store = open_event_store(spec)
    assert isinstance(store, EtcdEventStore)
    reached: list[str] = []

    def fault(where: str) -> None:
        reached.append(where)
        if where == point and reached.count(point) == segment:
            os.kill(os.getpid(), signal.SIGKILL)

    await store.archive(session_id, fault=fault)
    await store.close()


if __name__ == "__main__":
    asyncio.run(archive_until_killed(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])))
