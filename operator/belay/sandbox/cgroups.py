"""A cgroup of its own for each local sandbox, where the machine lets the harness make one.

Without one, a local sandbox's process wall is `RLIMIT_NPROC`, which the kernel counts per user:
as root every walled sandbox runs as the same uid (65532), so the processes of every sandbox on
the machine count against each one's figure, and a sandbox holding many processes leaves the
others none. A cgroup counts only its own tasks and memory, as a pod's does.

So, run as root on a host whose cgroup v1 pids and memory controllers the harness may write, each
sandbox gets, under the harness's own cgroup of each controller:

- `belay-sandbox-<instance>`: the whole sandbox (bwrap, its server, and below it the commands), at
  the manifest's figures plus the server's own headroom. bwrap enters it between fork and exec, so
  everything the sandbox ever starts is inside, and no sandbox can take another's share.
- `belay-sandbox-<instance>/commands`: at the manifest's figures exactly. The server moves each
  command there between fork and exec (its `cgroup.procs`, alone, belongs to the sandbox's uid, and
  the server sees the directory at /run/belay-cgroup/<n>), so a fork bomb or a memory bomb runs out
  in `commands` while the server still has the threads and memory to stop it and say so. The server
  reads that cgroup's counters (`pids.events`, v1's `memory.oom_control`) to name the wall a command
  ran into (belay.sandbox.limits).

Both are removed once the sandbox is stopped; a harness killed before that leaves them in the
sandbox's record, and the next start of that sandbox removes them. A sandbox that is never started
again (its session never resumed) leaves them empty: every new sandbox's start removes the empty
ones older than STALE_AFTER_S (a cgroup is entered within a second of being made).

Anywhere else (not root, controllers not writable, a host with cgroup v2 only, where delegating
both levels to the sandbox's uid is not done yet), `make_cgroup` answers None and the sandbox keeps
rlimits and the server's own count.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from belay.api.resources import SandboxResources

MIB = 1024 * 1024
PREFIX = "belay-sandbox-"
COMMANDS = "commands"
# Where the sandbox's server finds its commands' cgroup directories inside the walls.
INSIDE = "/run/belay-cgroup"
CONTROLLERS = ("pids", "memory")
# What the sandbox as a whole may use beyond its commands' figures: bwrap and the server (its
# threads, one more for each running command, and its memory).
SERVER_TASKS = 64
SERVER_MEMORY_MIB = 256
REMOVE_GRACE_S = 3.0
STALE_AFTER_S = 60.0


@dataclass(frozen=True)
class SandboxCgroup:
    """The sandbox's cgroup of each controller, with its commands' cgroup under each."""

    directories: tuple[Path, ...]

    @property
    def command_directories(self) -> tuple[Path, ...]:
        return tuple(directory / COMMANDS for directory in self.directories)

    @property
    def every_directory(self) -> list[str]:
        """Deepest first: the order they are removed in."""
        return [str(d) for d in self.command_directories] + [str(d) for d in self.directories]

    def inside(self) -> list[tuple[Path, str]]:
        """Each commands' directory and where the server sees it inside the walls."""
        return [(directory, f"{INSIDE}/{index}") for index, directory in enumerate(self.command_directories)]

    def enter(self) -> Callable[[], None]:
        """For between fork and exec: moves the new process into the sandbox's cgroups."""
        return entering(str(directory) for directory in self.directories)

    def remove(self, grace_s: float = REMOVE_GRACE_S) -> None:
        remove_directories(self.every_directory, grace_s)


def entering(directories: Iterable[str]) -> Callable[[], None]:
    """For between fork and exec (only calls that take no lock: an open and a write each): moves
    the new process into each cgroup directory."""
    procs = [os.path.join(directory, "cgroup.procs").encode() for directory in directories]

    def enter() -> None:
        pid = str(os.getpid()).encode()
        for path in procs:
            descriptor = os.open(path, os.O_WRONLY)
            try:
                os.write(descriptor, pid)
            finally:
                os.close(descriptor)

    return enter


def remove_directories(directories: Sequence[str], grace_s: float = REMOVE_GRACE_S) -> None:
    """Remove the cgroup directories once their last task has gone (a killed sandbox's tasks take a
    moment to leave); one still busy after `grace_s` is left for the next start to remove."""
    deadline = time.monotonic() + grace_s
    for directory in directories:
        while True:
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.02)


def remove_stale(parent: Path) -> None:
    """Remove the sandboxes' cgroups under `parent` that no task is in and that are older than
    STALE_AFTER_S: what sandboxes stopped by a harness's death, and never started again, left."""
    for sandbox in parent.glob(f"{PREFIX}*"):
        try:
            if time.time() - sandbox.stat().st_mtime < STALE_AFTER_S:
                continue
            directories = [sandbox / COMMANDS, sandbox]
            if any((d / "cgroup.procs").read_text().strip() for d in directories if d.exists()):
                continue
        except OSError:
            continue
        remove_directories([str(d) for d in directories], grace_s=0)


def make_cgroup(instance: str, resources: SandboxResources, commands_uid: int) -> SandboxCgroup | None:
    """The sandbox's cgroups with their figures, the commands' one movable into by `commands_uid`
    (the uid the server runs as), or None where none can be made here."""
    if os.geteuid() != 0:
        return None
    parents = v1_parents()
    if not parents:
        return None
    created: list[Path] = []
    try:
        for parent, controller in parents:
            remove_stale(parent)
            sandbox = parent / f"{PREFIX}{instance}"
            sandbox.mkdir()
            created.insert(0, sandbox)
            commands = sandbox / COMMANDS
            commands.mkdir()
            created.insert(0, commands)
            # Open to the sandbox's uid whatever the umask (`belay` keeps its home private with 077).
            for directory in (sandbox, commands):
                directory.chmod(0o755)
            if controller == "pids":
                (sandbox / "pids.max").write_text(str(resources.processes + SERVER_TASKS))
                (commands / "pids.max").write_text(str(resources.processes))
            else:
                memory = resources.memory_mib * MIB
                (sandbox / "memory.limit_in_bytes").write_text(str(memory + SERVER_MEMORY_MIB * MIB))
                (commands / "memory.limit_in_bytes").write_text(str(memory))
            os.chown(commands / "cgroup.procs", commands_uid, -1)
    except OSError:
        remove_directories([str(directory) for directory in created], grace_s=0)
        return None
    return SandboxCgroup(tuple(parent / f"{PREFIX}{instance}" for parent, _ in parents))


def own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def cgroup_mounts() -> dict[str, Path]:
    """Mount points by controller (v1)."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    mounts.setdefault(controller, Path(fields[4]))
    return mounts


def v1_parents() -> list[tuple[Path, str]]:
    """The harness's own cgroup of each v1 controller, when both are mounted and writable."""
    try:
        mounts, own = cgroup_mounts(), own_cgroups()
    except (OSError, ValueError):
        return []
    parents: list[tuple[Path, str]] = []
    for controller in CONTROLLERS:
        if controller not in mounts or controller not in own:
            return []
        parent = mounts[controller] / own[controller].lstrip("/")
        if not os.access(parent, os.W_OK):
            return []
        parents.append((parent, controller))
    return parents
