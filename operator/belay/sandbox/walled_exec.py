"""`python -m belay.sandbox.walled_exec LIMITS PROGRAM [ARGS...]`: take one command's resource
walls, then become PROGRAM.

The sandbox server sets a command's walls (`limits.command_preexec`: the file size, and where no
cgroup counts them, processes and memory) between fork and exec of the processes it starts itself.
An MCP tool server is started by the SDK's client instead, which takes no such hook: it is started
through this, so it runs under the same walls as any command of its sandbox. LIMITS is the JSON
`walled_argv` writes. Its stderr goes to a file of the sandbox's temporary directory.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from belay.sandbox.limits import Limits, Walls, command_preexec
from belay.sandbox.loopback_exec import become

# Where a tool server's stderr goes, in the sandbox's temporary directory.
STDERR_NAME = "belay-tool-servers.stderr"


def walled_argv(walls: Walls, argv: list[str]) -> list[str]:
    """`argv`, started under a command's walls."""
    limits = walls.limits
    figures = {
        "processes": limits.processes,
        "memory_bytes": limits.memory_bytes,
        "disk_bytes": limits.disk_bytes,
        "rlimits": limits.rlimits,
        "pids_by_cgroup": walls.pids is not None,
        "memory_by_cgroup": walls.memory is not None,
    }
    return [sys.executable, "-m", "belay.sandbox.walled_exec", json.dumps(figures), *argv]


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m belay.sandbox.walled_exec LIMITS PROGRAM [ARGS...]")
    figures = json.loads(sys.argv[1])
    limits = Limits(
        processes=figures["processes"],
        memory_bytes=figures["memory_bytes"],
        disk_bytes=figures["disk_bytes"],
        rlimits=figures["rlimits"],
    )
    command_preexec(limits, figures["pids_by_cgroup"], figures["memory_by_cgroup"])()
    # What it writes to stderr would otherwise go to the sandbox server's log, on the host and
    # outside the disk wall: it goes to the sandbox's own temporary directory, inside it.
    log = os.open(
        os.path.join(tempfile.gettempdir(), STDERR_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    os.dup2(log, 2)
    os.close(log)
    become(sys.argv[2:])


if __name__ == "__main__":
    main()
