"""Who keeps a session's stand-in alive: its holder, the `belay` process that last used it.

A session's stand-in outlives a kill of `belay` on purpose (as a provider's service keeps its
sessions, so `belay resume` settles against the same remote session), but no longer than that:
every `belay` command that uses it writes itself into the holder file beside its ready file
(`{"pid", "start"}`: the start time tells the process from a later one given its pid), and the
stand-in stops once that process has been gone, with no request, for its grace period. With its
holder file removed (the session's directory deleted) it stops at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from belay.lifetime import process_alive, process_start

POLL_S = 0.5


class Holder(BaseModel):
    pid: int
    start: int | None


def write_holder(path: Path) -> None:
    """This process is the holder now (atomically: the stand-in never reads half a file)."""
    pid = os.getpid()
    temporary = path.with_name(f".{path.name}.{pid}.tmp")
    temporary.write_text(Holder(pid=pid, start=process_start(pid)).model_dump_json())
    os.replace(temporary, path)


def holder_alive(path: Path) -> bool | None:
    """Whether the holder the file names still runs; None when there is no holder file."""
    try:
        holder = Holder.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError):
        return False
    return process_alive(holder.pid, holder.start)


async def until_abandoned(path: Path, grace_s: float, idle_s: Callable[[], float]) -> None:
    """Returns once the holder file is gone, or its holder has been gone and no request has come
    for `grace_s`."""
    gone_since: float | None = None
    while True:
        alive = holder_alive(path)
        if alive is None:
            return
        if alive:
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        if gone_since is not None and min(time.monotonic() - gone_since, idle_s()) >= grace_s:
            return
        await asyncio.sleep(POLL_S)
