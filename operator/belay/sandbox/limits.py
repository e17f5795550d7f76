"""The resource walls a sandbox server keeps around its commands, and how it sees one trip.

The figures come from the manifest (`belay.api.resources.SandboxResources`) as the server's
options. What makes each wall (docs/security.md, "Resource walls"):

- processes and memory: the kernel, through a cgroup of the sandbox's own when there is one (the
  harness makes it locally, the kubelet in a pod); its counters (`pids.events`, `memory.events` or
  v1's `memory.oom_control`) tell the server a command ran into it. Without one, a local sandbox's
  commands get `RLIMIT_NPROC` and `RLIMIT_AS` (`--rlimits`), and the server counts the tasks and
  resident memory of its descendants and stops a command that passes the figure;
- disk: a local sandbox's writable paths are one filesystem of the figure's size
  (belay.sandbox.walls.set_up_disk), which stops any write past it; `RLIMIT_FSIZE` caps every file
  a command writes at the figure, and the server measures the workspace (and its other writable
  directories) while a command runs and after it, counting each file at its apparent size (a
  sparse file costs its whole size in a checkpoint and a restore);
- time: the command's timeout, never above the figure.

Whichever trips, the command is stopped (its process group; for processes every process the
sandbox's commands started, which would otherwise keep the sandbox at its limit) and the call
fails with a `Trip`'s message, naming the wall and its figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from belay import lifetime

if TYPE_CHECKING:
    from belay.api.resources import SandboxResources

MIB = 1024 * 1024
# How often the kernel's counters (and, without them, the process table) are read while a command
# runs; the disk is measured at most once a second, and never more than a fifth of the time.
POLL_S = 0.1
DISK_POLL_MIN_S = 1.0
DISK_POLL_SHARE = 5
# A command's processes are the first the kernel's out-of-memory killer takes, never the server.
OOM_SCORE_ADJ = b"1000"
# A cgroup's memory figure is rounded to pages; one this close to the manifest's is the same wall.
MEMORY_SLACK_BYTES = MIB
# Without a cgroup the server sees no refused fork: a sandbox this close to its process figure has
# run into it (the kernel refuses the fork that would pass it, so the count itself stays below).
PROCESS_SLACK = 4
# How common tools say an rlimit refused them a process (EAGAIN from fork) or memory (ENOMEM).
FORK_REFUSED = re.compile(r"Cannot fork|fork: (retry: )?Resource temporarily unavailable|BlockingIOError")
ALLOCATION_REFUSED = re.compile(r"MemoryError|Cannot allocate memory|[Oo]ut of memory|bad_alloc")


@dataclass(frozen=True)
class Limits:
    processes: int | None = None
    memory_bytes: int | None = None
    disk_bytes: int | None = None
    command_s: int | None = None
    # Where no cgroup enforces processes or memory: RLIMIT_NPROC and RLIMIT_AS on every command.
    rlimits: bool = False
    cgroups: tuple[str, ...] = ()
    disk_paths: tuple[str, ...] = ()  # besides the workspace

    @property
    def any(self) -> bool:
        return any(
            v is not None for v in (self.processes, self.memory_bytes, self.disk_bytes, self.command_s)
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-processes", type=int, help="processes and threads of the sandbox")
    parser.add_argument("--max-memory-mib", type=int, help="memory of the sandbox")
    parser.add_argument("--max-disk-mib", type=int, help="what the workspace may hold on disk")
    parser.add_argument("--max-command-s", type=int, help="the longest one command may run")
    parser.add_argument("--rlimits", action="store_true", help="rlimits where no cgroup enforces a figure")
    parser.add_argument(
        "--cgroup", action="append", default=[], help="a directory of the sandbox's cgroup (repeatable)"
    )
    parser.add_argument(
        "--disk-path",
        action="append",
        default=[],
        help="a writable directory counted with the workspace against --max-disk-mib (repeatable)",
    )


def from_options(options: argparse.Namespace) -> Limits:
    return Limits(
        processes=options.max_processes,
        memory_bytes=options.max_memory_mib * MIB if options.max_memory_mib else None,
        disk_bytes=options.max_disk_mib * MIB if options.max_disk_mib else None,
        command_s=options.max_command_s,
        rlimits=options.rlimits,
        cgroups=tuple(options.cgroup),
        disk_paths=tuple(options.disk_path),
    )


def server_arguments(
    resources: SandboxResources, *, rlimits: bool, cgroups: Sequence[str], disk_paths: Sequence[str]
) -> list[str]:
    """The server's options for these figures: a local sandbox and a sandbox pod pass the same."""
    arguments = [
        "--max-processes",
        str(resources.processes),
        "--max-memory-mib",
        str(resources.memory_mib),
        "--max-disk-mib",
        str(resources.disk_mib),
        "--max-command-s",
        str(resources.command_seconds),
    ]
    if rlimits:
        arguments.append("--rlimits")
    for directory in cgroups:
        arguments += ["--cgroup", directory]
    for directory in disk_paths:
        arguments += ["--disk-path", directory]
    return arguments


# ------------------------------------------------------------------------------------------------
# Trips


@dataclass(frozen=True)
class Trip:
    wall: str  # processes, memory, disk, time
    message: str


def process_trip(limit: int) -> Trip:
    return Trip(
        "processes",
        f"process limit {limit} reached: the command started more processes (threads count too) than "
        "the sandbox allows; every process the sandbox's commands started was stopped",
    )


def memory_trip(limit_bytes: int) -> Trip:
    return Trip(
        "memory",
        f"memory limit {limit_bytes // MIB} MiB reached: the command needed more memory than the sandbox "
        "allows and was stopped",
    )


def disk_trip(limit_bytes: int, used_bytes: int) -> Trip:
    return Trip(
        "disk",
        f"workspace disk limit {limit_bytes // MIB} MiB reached: the sandbox's files hold "
        f"{used_bytes // MIB} MiB; the command was stopped and its files kept. Remove files to go on",
    )


def time_trip(limit_s: int) -> Trip:
    return Trip("time", f"command time limit {limit_s} s reached: the command was stopped")


# ------------------------------------------------------------------------------------------------
# The kernel's counters


@dataclass(frozen=True)
class Counter:
    """A line `key N` of a cgroup's events file: how often the cgroup refused a fork (`max`) or
    killed a process for want of memory (`oom_kill`)."""

    path: Path
    key: str

    def read(self) -> int:
        try:
            for line in self.path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == self.key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def find_counters(limits: Limits) -> tuple[Counter | None, Counter | None]:
    """The pids and memory counters of a cgroup that enforces the sandbox's figures (each directory
    given, and its `pids/` and `memory/` for cgroup v1). A cgroup whose limit is above the figure
    (or none) is not the wall, and is ignored."""
    pids = memory = None
    for given in limits.cgroups:
        for directory in (Path(given), Path(given) / "pids", Path(given) / "memory"):
            pids_max = _number(directory / "pids.max")
            enforces = limits.processes and pids_max is not None and pids_max <= limits.processes
            if pids is None and enforces and (directory / "pids.events").is_file():
                pids = Counter(directory / "pids.events", "max")
            memory = memory or _memory_counter(directory, limits.memory_bytes)
    return pids, memory


def _memory_counter(directory: Path, limit: int | None) -> Counter | None:
    if not limit:
        return None
    for limit_file, events in (
        ("memory.max", "memory.events"),
        ("memory.limit_in_bytes", "memory.oom_control"),
    ):
        found = _number(directory / limit_file)
        if found is not None and found <= limit + MEMORY_SLACK_BYTES and (directory / events).is_file():
            return Counter(directory / events, "oom_kill")
    return None


# ------------------------------------------------------------------------------------------------
# Without a cgroup: what the server counts itself


def _status_field(pid: int, name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tasks_in_use() -> int:
    """Tasks of this server and of every process its commands started, zombies included: what
    RLIMIT_NPROC counts (a zombie holds its place until it is reaped)."""
    threads: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            threads[int(entry.name)] = max(1, int(fields[17]))
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    total, frontier = threads.get(os.getpid(), 1), [os.getpid()]
    while frontier:
        for child in children.get(frontier.pop(), []):
            total += threads.get(child, 1)
            frontier.append(child)
    return total


def memory_in_use() -> int:
    """Resident bytes of every process the server's commands started."""
    return sum(_status_field(pid, "VmRSS:") * 1024 for pid in lifetime.descendants())


def file_cost(info: os.stat_result) -> int:
    """What a file counts against the disk figure: what it would cost to store and restore (its
    apparent size, which a sparse file holds in few blocks), or the blocks it holds when more
    (space reserved past its end)."""
    allocated = info.st_blocks * 512
    return max(info.st_size, allocated) if stat.S_ISREG(info.st_mode) else allocated


def disk_in_use(paths: Sequence[Path]) -> int:
    """Bytes the files under `paths` count against the disk figure (file_cost; a hard-linked
    file once), without following a symbolic link."""
    seen: set[tuple[int, int]] = set()
    total = 0
    pending = [str(path) for path in paths]
    while pending:
        directory = pending.pop()
        with contextlib.suppress(OSError):
            info = os.lstat(directory)
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
            with os.scandir(directory) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                            continue
                        info = entry.stat(follow_symlinks=False)
                        if (info.st_dev, info.st_ino) not in seen:
                            seen.add((info.st_dev, info.st_ino))
                            total += file_cost(info)
    return total


# ------------------------------------------------------------------------------------------------
# One command under the walls


def command_preexec(limits: Limits, pids_by_cgroup: bool, memory_by_cgroup: bool) -> Callable[[], None]:
    """Run in the command's process between fork and exec: only calls that take no lock."""
    caps = []
    if limits.disk_bytes:
        caps.append((resource.RLIMIT_FSIZE, limits.disk_bytes))
    if limits.rlimits and limits.processes and not pids_by_cgroup:
        caps.append((resource.RLIMIT_NPROC, limits.processes))
    if limits.rlimits and limits.memory_bytes and not memory_by_cgroup:
        caps.append((resource.RLIMIT_AS, limits.memory_bytes))

    def preexec() -> None:
        for kind, value in caps:
            _soft, hard = resource.getrlimit(kind)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value))
        with contextlib.suppress(OSError):
            descriptor = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            try:
                os.write(descriptor, OOM_SCORE_ADJ)
            finally:
                os.close(descriptor)

    return preexec


@dataclass(frozen=True)
class Reading:
    refused_forks: int
    oom_kills: int
    disk_bytes: int


class Walls:
    """The server's view of its walls: what enforces each figure, and whether a command tripped one."""

    def __init__(self, limits: Limits, workspace: Path) -> None:
        self.limits = limits
        self.disk_paths = (workspace, *(Path(path) for path in limits.disk_paths))
        self.pids, self.memory = find_counters(limits)
        self.disk_poll_s = DISK_POLL_MIN_S
        self.last_disk = 0

    def preexec(self) -> Callable[[], None]:
        return command_preexec(self.limits, self.pids is not None, self.memory is not None)

    def timeout(self, requested: float) -> tuple[float, bool]:
        """The timeout a command gets, and whether it is the wall's (the call asked for more)."""
        limit = self.limits.command_s
        if limit is not None and requested >= limit:
            return float(limit), True
        return requested, False

    def measure_disk(self) -> int:
        started = time.monotonic()
        self.last_disk = disk_in_use(self.disk_paths) if self.limits.disk_bytes else 0
        # A workspace of many files takes long to walk: walk it less often, not for longer.
        self.disk_poll_s = max(DISK_POLL_MIN_S, DISK_POLL_SHARE * (time.monotonic() - started))
        return self.last_disk

    def reading(self) -> Reading:
        """The counters before a command. The disk as last measured (after the previous command,
        or since raised by the harness's writes): a walk before every command would double its cost."""
        return Reading(
            self.pids.read() if self.pids else 0, self.memory.read() if self.memory else 0, self.last_disk
        )

    def counted_trip(self, before: Reading) -> Trip | None:
        """A trip the kernel's counters (or, without them, the server's own count) show."""
        limits = self.limits
        if limits.processes:
            if self.pids is not None:
                if self.pids.read() > before.refused_forks:
                    return process_trip(limits.processes)
            elif tasks_in_use() >= limits.processes - PROCESS_SLACK:
                return process_trip(limits.processes)
        if limits.memory_bytes:
            if self.memory is not None:
                if self.memory.read() > before.oom_kills:
                    return memory_trip(limits.memory_bytes)
            elif memory_in_use() >= limits.memory_bytes:
                return memory_trip(limits.memory_bytes)
        return None

    def disk_trip(self, before: Reading, used: int, failed: bool = False) -> Trip | None:
        """Over the figure, and grown since the command began, or at it for a command that failed
        (a full disk refused its writes with ENOSPC, so nothing could grow): a command that only
        removes files from a full workspace is not stopped."""
        limit = self.limits.disk_bytes
        if limit and used >= limit and (used > before.disk_bytes or failed):
            return disk_trip(limit, used)
        return None

    async def watch(self, before: Reading) -> Trip:
        """Returns once the running command trips a wall; cancelled when it ends first."""
        next_disk = time.monotonic() + self.disk_poll_s
        while True:
            await asyncio.sleep(POLL_S)
            trip = self.counted_trip(before)
            if trip is None and self.limits.disk_bytes and time.monotonic() >= next_disk:
                trip = self.disk_trip(before, await asyncio.to_thread(self.measure_disk))
                next_disk = time.monotonic() + self.disk_poll_s
            if trip is not None:
                return trip

    async def after(self, before: Reading, failed: bool = False) -> Trip | None:
        """A trip found once the command ended (a refused fork between two polls, say)."""
        trip = self.counted_trip(before)
        if trip is None and self.limits.disk_bytes:
            trip = self.disk_trip(before, await asyncio.to_thread(self.measure_disk), failed)
        return trip

    def refused_by_rlimit(self, stderr: str) -> Trip | None:
        """A trip that only the failed command's own words show: an rlimit refuses a fork or an
        allocation without a counter the server could read, and the command fails at once, before
        any count of processes or resident memory reaches the figure."""
        limits = self.limits
        if not limits.rlimits:
            return None
        if limits.processes and self.pids is None and FORK_REFUSED.search(stderr):
            return process_trip(limits.processes)
        if limits.memory_bytes and self.memory is None and ALLOCATION_REFUSED.search(stderr):
            return memory_trip(limits.memory_bytes)
        return None

    async def admits(self, size: int) -> bool:
        """Whether a write of `size` bytes through the server's own calls still fits the disk
        figure: measured again only when the last measure and what was written since come near it."""
        limit = self.limits.disk_bytes
        if (
            limit
            and self.last_disk + size >= limit
            and await asyncio.to_thread(self.measure_disk) + size >= limit
        ):
            return False
        self.last_disk += size
        return True

    def full(self, size: int = 0) -> Trip:
        assert self.limits.disk_bytes
        return disk_trip(self.limits.disk_bytes, self.last_disk + size)

    def describe(self) -> str:
        limits = self.limits
        if not limits.any:
            return "limits: none"
        parts = []
        if limits.processes:
            by = (
                "cgroup"
                if self.pids
                else ("RLIMIT_NPROC and the server's count" if limits.rlimits else "the server's count")
            )
            parts.append(f"processes {limits.processes} ({by})")
        if limits.memory_bytes:
            by = (
                "cgroup"
                if self.memory
                else ("RLIMIT_AS and the server's count" if limits.rlimits else "the server's count")
            )
            parts.append(f"memory {limits.memory_bytes // MIB} MiB ({by})")
        if limits.disk_bytes:
            parts.append(
                f"disk {limits.disk_bytes // MIB} MiB (measured at apparent sizes; RLIMIT_FSIZE per file)"
            )
        if limits.command_s:
            parts.append(f"commands {limits.command_s} s")
        return "limits: " + ", ".join(parts)
