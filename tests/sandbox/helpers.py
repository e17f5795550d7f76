from __future__ import annotations

import asyncio
from pathlib import Path


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


async def eventually_gone(pid: int, attempts: int = 250) -> bool:
    """Wait (up to a few seconds) for a killed process to disappear; the kill is asynchronous."""
    for _ in range(attempts):
        if not is_running(pid):
            return True
        await asyncio.sleep(0.02)
    return False
