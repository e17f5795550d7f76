"""The resource walls of one subagent's sandbox (`spec.subagents[].resources`).

Each figure is a wall a command trips into: the tool call fails with an error naming the wall and
its figure ("process limit 1024 reached"), the command is stopped, and the session goes on. How
each wall is made, locally and in a pod, is in docs/security.md ("Resource walls").
"""

from __future__ import annotations

from pydantic import Field

from belay.api.base import ApiModel

DEFAULT_PROCESSES = 1024
DEFAULT_MEMORY_MIB = 2048
DEFAULT_DISK_MIB = 4096
# The harness's own commands in a sandbox (a step's verification) ask for 600 s.
DEFAULT_COMMAND_SECONDS = 600
DEFAULT_CPU_MILLICORES = 2000

# The sandbox server's own threads and a command's shell count among the processes, and the server
# lives within the memory figure too: below these, a sandbox could not run a command at all.
MIN_PROCESSES = 32
MIN_MEMORY_MIB = 128
MIN_DISK_MIB = 16


class SandboxResources(ApiModel):
    # Processes and threads of the sandbox, its server's included (a fork bomb stops at this).
    processes: int = Field(default=DEFAULT_PROCESSES, ge=MIN_PROCESSES, le=65536)
    # Memory of everything in the sandbox, its server and its /tmp (a tmpfs) included.
    memory_mib: int = Field(default=DEFAULT_MEMORY_MIB, ge=MIN_MEMORY_MIB, le=1024 * 1024)
    # What the workspace (and the sandbox's other writable directories) may hold on disk.
    disk_mib: int = Field(default=DEFAULT_DISK_MIB, ge=MIN_DISK_MIB, le=16 * 1024 * 1024)
    # The longest one command may run, whatever timeout its call asks for.
    command_seconds: int = Field(default=DEFAULT_COMMAND_SECONDS, ge=1, le=24 * 3600)
    # CPU time per second of wall time, in thousandths of a CPU.
    cpu_millicores: int = Field(default=DEFAULT_CPU_MILLICORES, ge=100, le=256 * 1000)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024

    @property
    def disk_bytes(self) -> int:
        return self.disk_mib * 1024 * 1024
