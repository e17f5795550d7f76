"""Walls around a local sandbox, made with bubblewrap (`bwrap`, Debian's `bubblewrap` package).

The whole sandbox server runs inside the walls, and its commands run beside it: every file
operation the harness asks for (restores, manifests, deliverables) then happens with the sandbox's
uid and mount view, so a command racing the server with symlinks reaches nothing it could not reach
itself. What the sandbox sees:

- `/workspace` and a private `/tmp`, the only writable paths, both on one tmpfs whose size is the
  sandbox's disk figure (a write past it is the writer's ENOSPC, whatever its speed); system
  directories read-only (`/usr` and the few `/etc` files programs need, never `/etc/shadow`), and
  the sandbox's root and `/dev` remounted read-only;
- its own PID namespace (the harness's `/proc` is invisible, and every process dies with the
  sandbox's first process, whatever its environment), mount, IPC and UTS namespaces; its own network
  namespace unless the profile is `internet`;
- uid 65532: when `belay` runs as root, bwrap sets the sandbox up as root, then the server drops to
  65532 on the host before it reads anything; otherwise bwrap maps 65532 inside to the caller's uid
  (an unprivileged user cannot become another uid) in a user namespace that may not nest another;
- a clean environment; the interpreter (at its own path) and the server's own code (under
  `/opt/belay`) read-only. The server's socket is made by the harness, outside the walls, and
  handed to it as a descriptor, with a pipe for its ready report: no path of the sandbox holds
  them.

Where bwrap is missing or the kernel refuses its namespaces, `availability()` says why: the sandbox
then refuses to start unless the subagent accepts weaker walls (`isolation: best-effort`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import belay

ISOLATION_LEVELS: tuple[str, ...] = ("required", "best-effort")

# Tests only: "off" starts the sandbox without walls, to show that each security test fails without
# them. Refused for a subagent whose isolation is `required`. Unset (or "on"): the walls.
WALLS_ENV = "BELAY_SANDBOX_WALLS"
# Which bwrap to run (tests point it at a missing file to play a machine without bubblewrap).
BWRAP_ENV = "BELAY_SANDBOX_BWRAP"
# Set inside the walls for the server alone (it removes it before serving): the namespaces the
# sandbox was started from, so it can report which walls it observes around itself.
HOST_NAMESPACES_ENV = "BELAY_SANDBOX_HOST_NAMESPACES"

SANDBOX_UID = 65532
SANDBOX_GID = 65532
WORKSPACE = "/workspace"
TMP = "/tmp"
# Where the sandbox's disk (one tmpfs, sized at the disk figure) is mounted while the server sets
# it up, as root of the sandbox, before it drops to SANDBOX_UID: its `workspace` and `tmp` are bound
# on WORKSPACE and TMP, and the mount itself is detached, leaving the binds as its only way in.
DISK_SETUP = "/run/belay-disk"
DISK_PARTS: tuple[tuple[str, str, int], ...] = (("workspace", WORKSPACE, 0o700), ("tmp", TMP, 0o1777))
CODE_DIR = "/opt/belay"
SANDBOX_BIN = f"{CODE_DIR}/bin"
# The server puts its interpreter's directory (SANDBOX_BIN) in front for commands.
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# The allowlist proxy's socket (bound in from the harness side) and the in-sandbox port that
# forwards to it. The server reads (and removes) both variables; commands see the proxy variables.
EGRESS_SOCKET = "/run/belay-egress.sock"
PROXY_PORT = 3128
EGRESS_SOCKET_ENV = "BELAY_SANDBOX_EGRESS_SOCKET"
EGRESS_RULES_ENV = "BELAY_SANDBOX_EGRESS_RULES"
# The token reaches the server through this inherited pipe, never as a file in the sandbox.
TOKEN_FD_PATH = "/proc/self/fd/{fd}"

NAMESPACES: tuple[str, ...] = ("pid", "mnt", "net", "ipc", "uts", "user")

# /etc entries programs need (dynamic linker, Debian alternatives, certificates, Python's config);
# nothing with credentials. `internet` adds name resolution.
ETC_ENTRIES: tuple[str, ...] = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
)
RESOLVER_ENTRIES: tuple[str, ...] = ("/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf")
TOP_LEVEL_SYSTEM_DIRS: tuple[str, ...] = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

PASSWD = (
    f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/tmp:/bin/sh\n"
)
GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\n"
HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n"

PROBE_TIMEOUT_S = 10.0
STOP_GRACE_S = 3.0


class WallsUnavailable(RuntimeError):
    """A sandbox cannot get the walls its subagent requires; the message says what to do."""


@dataclass(frozen=True)
class Availability:
    binary: str | None
    version: str
    reason: str  # empty when the walls can be built

    @property
    def available(self) -> bool:
        return not self.reason


def privileged() -> bool:
    """bwrap runs as real root: it sets up without a user namespace, and the server drops to
    SANDBOX_UID on the host. Otherwise a user namespace maps SANDBOX_UID to the caller's uid."""
    return os.geteuid() == 0


def configured_binary(variable: str, name: str) -> str | None:
    """The executable the variable names (None when it names nothing runnable), else `name` on PATH."""
    configured = os.environ.get(variable)
    if configured is not None:
        return configured if Path(configured).is_file() and os.access(configured, os.X_OK) else None
    return shutil.which(name)


def bubblewrap_binary() -> str | None:
    return configured_binary(BWRAP_ENV, "bwrap")


def availability() -> Availability:
    """Whether this machine can build the walls, from a real trial (a bwrap that exists may still be
    refused its namespaces by the kernel)."""
    return _probe(bubblewrap_binary(), os.geteuid())


@functools.lru_cache(maxsize=8)
def _probe(binary: str | None, euid: int) -> Availability:
    if binary is None:
        where = os.environ.get(BWRAP_ENV) or "PATH"
        return Availability(None, "", f"bubblewrap (bwrap) is not installed (looked in {where})")
    try:
        version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        ).stdout.strip()
        trial = subprocess.run(
            [binary, *namespace_arguments("none"), *system_mounts("none"), "--", "/usr/bin/true"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Availability(binary, "", f"cannot run {binary}: {error}")
    if trial.returncode != 0:
        why = trial.stderr.strip() or f"exit status {trial.returncode}"
        return Availability(binary, version, f"{binary} cannot build the walls here: {why}")
    return Availability(binary, version or "bubblewrap", "")


def namespace_arguments(profile: str) -> list[str]:
    arguments = [
        "--new-session",  # no controlling terminal to inject keystrokes into
        # The sandbox dies with the thread that started it (the harness's event loop).
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "sandbox",
        "--unshare-cgroup-try",
    ]
    if profile != "internet":
        arguments.append("--unshare-net")
    if privileged():
        # Only what the server needs to mount its disk and drop to SANDBOX_UID; it drops them all
        # (belay.sandbox.walls.set_up_disk, drop_capabilities) before it reads anything.
        arguments += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SYS_ADMIN"]
    else:
        arguments += [
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_GID),
            "--disable-userns",
            # In the sandbox's own user namespace only: to mount its disk, then dropped.
            "--cap-add",
            "CAP_SYS_ADMIN",
        ]
    return arguments


def system_mounts(profile: str, *, tmp: bool = True) -> list[str]:
    arguments = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LEVEL_SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            arguments += ["--ro-bind", name, name]
    # Debian's Python reads its site configuration there.
    python_config = tuple(str(path) for path in sorted(Path("/etc").glob("python3*")))
    entries = ETC_ENTRIES + python_config + (RESOLVER_ENTRIES if profile == "internet" else ())
    # bwrap would create the directories leading to them as 0700, closed to the sandbox's uid.
    arguments += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/etc/ssl"]
    for entry in entries:
        arguments += ["--ro-bind-try", entry, entry]
    arguments += ["--proc", "/proc", "--dev", "/dev"]
    if tmp:
        arguments += ["--perms", "1777", "--tmpfs", TMP]
    return arguments


def directories_leading_to(path: Path, created: set[Path]) -> list[str]:
    """`--dir` for each missing ancestor, traversable by SANDBOX_UID (bwrap makes them 0700 as root)."""
    arguments: list[str] = []
    for ancestor in reversed(path.parents):
        if ancestor == Path("/") or ancestor in created:
            continue
        created.add(ancestor)
        arguments += ["--perms", "0755", "--dir", str(ancestor)]
    return arguments


def is_under(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


@dataclass(frozen=True)
class ServerCode:
    """Where the interpreter and the server's code come from on the host, and where they appear."""

    interpreter: Path  # the real executable, visible at its own path inside
    prefixes: tuple[Path, ...]  # interpreter trees outside /usr, bound at their own paths
    libraries: tuple[tuple[Path, str], ...]  # (host dir, path inside) of the server's imports
    search_path: tuple[str, ...]  # what the server puts in front of sys.path


def server_code() -> ServerCode:
    interpreter = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    prefixes = []
    for prefix in dict.fromkeys(Path(p).resolve() for p in (sys.base_prefix, sys.base_exec_prefix)):
        if not is_under(prefix, Path("/usr")):
            prefixes.append(prefix)
    site_dirs = [Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")]
    libraries = [(site, f"{CODE_DIR}/lib/{index}") for index, site in enumerate(dict.fromkeys(site_dirs))]
    search_path = [inside for _, inside in libraries]
    package = Path(belay.__file__).resolve().parent
    if not any(is_under(package, site) for site in site_dirs):
        # An editable install: the package alone, not the checkout around it.
        libraries.insert(0, (package, f"{CODE_DIR}/src/belay"))
        search_path.insert(0, f"{CODE_DIR}/src")
    return ServerCode(interpreter, tuple(prefixes), tuple(libraries), tuple(search_path))


def code_mounts(code: ServerCode) -> list[str]:
    created: set[Path] = set()
    arguments: list[str] = []
    for prefix in code.prefixes:
        arguments += [*directories_leading_to(prefix, created), "--ro-bind", str(prefix), str(prefix)]
    for host, inside in code.libraries:
        arguments += [*directories_leading_to(Path(inside), created), "--ro-bind", str(host), inside]
    arguments += ["--perms", "0755", "--dir", SANDBOX_BIN]
    for name in ("python", "python3"):
        arguments += ["--symlink", str(code.interpreter), f"{SANDBOX_BIN}/{name}"]
    return arguments


BOOTSTRAP = (
    "import os, sys\n"
    "uid, gid = {uid}, {gid}\n"
    "sys.path[:0] = {path!r}\n"
    "from belay.sandbox.walls import set_up_disk, drop_capabilities\n"
    "set_up_disk({disk_bytes})\n"
    "if os.getuid() == 0:\n"
    "    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n"
    "drop_capabilities()\n"
    "if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):\n"
    "    raise SystemExit(f'sandbox: still uid {{os.getresuid()}}, expected {{uid}}')\n"
    "from belay.sandbox.server import main\n"
    "main()\n"
)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    pass_fds: tuple[int, ...]
    status_fd: int  # read end: bwrap's JSON status (the sandbox's first pid and namespaces)
    ready_fd: int  # read end: the server's ReadyFile, once it accepts requests


def data_fd(text: str, owner: int | None = None) -> int:
    """A pipe's read end holding `text` (all of it fits in the pipe's buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, text.encode())
    finally:
        os.close(write_end)
    if owner is not None:
        os.fchown(read_end, owner, owner)
    return read_end


def build_launch(
    *,
    bwrap: str,
    profile: str,
    listener: int,
    disk_bytes: int,
    token: str,
    instance_env: dict[str, str],
    egress_socket: Path | None,
    egress_environment: dict[str, str],
    server_options: Sequence[str] = (),
) -> Launch:
    """The bwrap command line for one sandbox server, and the descriptors it inherits: `listener`
    is the server's listening Unix socket (made outside the walls), `disk_bytes` the size of the
    sandbox's disk and `server_options` the server's resource walls (belay.sandbox.limits). The
    caller closes the pass_fds once bwrap is spawned."""
    code = server_code()
    # The server reopens this pipe through /proc/self/fd after dropping to SANDBOX_UID.
    token_fd = data_fd(token, owner=SANDBOX_UID if privileged() else None)
    files = {"/etc/passwd": PASSWD, "/etc/group": GROUP}
    if profile != "internet":
        files["/etc/hosts"] = HOSTS  # internet uses the host's, with its resolver configuration
    file_fds = {destination: data_fd(text) for destination, text in files.items()}
    status_read, status_write = os.pipe()
    ready_read, ready_write = os.pipe()
    arguments = [bwrap, *namespace_arguments(profile), *system_mounts(profile, tmp=False)]
    for destination, descriptor in file_fds.items():
        arguments += ["--perms", "0644", "--ro-bind-data", str(descriptor), destination]
    arguments += code_mounts(code)
    # Mount points only: the server binds its disk on them (set_up_disk).
    arguments += ["--perms", "0755", "--dir", "/run", "--perms", "0700", "--dir", DISK_SETUP]
    for _part, path, _mode in DISK_PARTS:
        arguments += ["--perms", "0755", "--dir", path]
    if egress_socket is not None:
        arguments += ["--ro-bind", str(egress_socket), EGRESS_SOCKET]
    environment = {
        "PATH": SANDBOX_PATH,
        "HOME": TMP,
        "TMPDIR": TMP,
        "LANG": "C.UTF-8",
        **instance_env,
        **egress_environment,
        HOST_NAMESPACES_ENV: " ".join(f"{name}={own_namespace(name)}" for name in NAMESPACES),
    }
    arguments += ["--chdir", "/", "--clearenv"]
    for name, value in environment.items():
        arguments += ["--setenv", name, value]
    bootstrap = BOOTSTRAP.format(
        uid=SANDBOX_UID, gid=SANDBOX_GID, path=list(code.search_path), disk_bytes=disk_bytes
    )
    arguments += [
        "--json-status-fd",
        str(status_write),
        "--",
        f"{SANDBOX_BIN}/python",
        "-I",
        "-S",
        "-c",
        bootstrap,
        "--workspace",
        WORKSPACE,
        "--socket-fd",
        str(listener),
        "--token-file",
        TOKEN_FD_PATH.format(fd=token_fd),
        "--network-profile",
        profile,
        "--ready-fd",
        str(ready_write),
        *server_options,
    ]
    pass_fds = (token_fd, *file_fds.values(), status_write, ready_write, listener)
    return Launch(arguments, pass_fds, status_read, ready_read)


# ------------------------------------------------------------------------------------------------
# Inside the walls, before the server drops to SANDBOX_UID: the sandbox's disk

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096
_MNT_DETACH = 2
_CLONE_NEWNS = 0x00020000
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    import ctypes

    kind = fstype.encode() if fstype else None
    result = _libc().mount(source.encode(), target.encode(), kind, flags, data.encode() if data else None)
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def set_up_disk(size_bytes: int) -> None:
    """One tmpfs of `size_bytes` holds every path the sandbox can write (DISK_PARTS): a burst of
    writes stops at its size with ENOSPC, in the writer, whichever path it writes. The mount it was
    set up at is detached, and the sandbox's root and /dev are made read-only, so nothing else of
    the sandbox is writable. Needs CAP_SYS_ADMIN in the sandbox's namespaces (granted to bwrap's
    child for this alone); a failure stops the sandbox before it serves."""
    if not privileged():
        # bwrap maps SANDBOX_UID in a user namespace nested in the one that owns the sandbox's
        # mounts: a mount namespace of the server's own (its commands inherit it) is one it may
        # mount in.
        import ctypes

        if _libc().unshare(_CLONE_NEWNS) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"unshare(CLONE_NEWNS): {os.strerror(number)}")
    _mount("tmpfs", DISK_SETUP, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size_bytes},mode=0755")
    for part, path, mode in DISK_PARTS:
        directory = f"{DISK_SETUP}/{part}"
        os.mkdir(directory)
        os.chmod(directory, mode)
        if os.getuid() == 0:
            os.chown(directory, SANDBOX_UID, SANDBOX_GID)
        _mount(directory, path, None, _MS_BIND)
    if _libc().umount2(DISK_SETUP.encode(), _MNT_DETACH) != 0:
        raise OSError(f"cannot detach {DISK_SETUP}")
    for path in ("/", "/dev"):
        _mount("none", path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def drop_capabilities() -> None:
    """No capability left, in any set: what set_up_disk needed is not the server's, nor its
    commands'. Raises when the kernel still reports one."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

    libc = _libc()
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = Header(_LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    status = Path("/proc/self/status").read_text()
    held = [line for line in status.splitlines() if line.startswith(("CapPrm:", "CapEff:", "CapAmb:"))]
    if any(int(line.split()[1], 16) for line in held):
        raise SystemExit(f"sandbox: capabilities still held: {held}")


def give_to_sandbox_user(path: Path) -> None:
    """A directory the sandbox writes in (its workspace, its socket's directory) belongs to it."""
    if privileged():
        os.chown(path, SANDBOX_UID, SANDBOX_GID)


# ------------------------------------------------------------------------------------------------
# Namespaces, seen from outside


def own_namespace(kind: str) -> int:
    return namespace_of("self", kind) or 0


def namespace_of(pid: int | str, kind: str) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
    match = re.fullmatch(r"\w+:\[(\d+)\]", link)
    return int(match.group(1)) if match else None


def process_stat(pid: int | str) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks since boot) of a process, None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[19])


def start_ticks(pid: int) -> int | None:
    """When the process started: with the pid, names one process for good."""
    stat = process_stat(pid)
    return stat[2] if stat is not None else None


def host_uid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def children_in_namespace(namespace: int, parent: int) -> list[int]:
    return [
        pid for pid in processes_in_pid_namespace(namespace) if (process_stat(pid) or ("", 0, 0))[1] == parent
    ]


def processes_in_pid_namespace(namespace: int) -> list[int]:
    """Host pids of every live process in the PID namespace with this inode number. The kernel
    reuses the number of a namespace that ended: see PidNamespace for one that cannot be mistaken."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and namespace_of(entry.name, "pid") == namespace:
            found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class PidNamespace:
    """A sandbox's PID namespace, named by its inode and its first process (host pid and start
    time). It lives exactly as long as that process: when it dies, the kernel kills every other
    process in the namespace, and the first process is gone only once they all are."""

    inode: int
    first_pid: int
    first_start: int | None

    def alive(self) -> bool:
        # A first process that is a zombie already took the rest of the namespace with it.
        stat = process_stat(self.first_pid)
        return (
            stat is not None
            and stat[0] != "Z"
            and stat[2] == self.first_start
            and namespace_of(self.first_pid, "pid") == self.inode
        )

    def processes(self) -> list[int]:
        """Host pids of the processes still in it (none once it ended, whatever reused its inode)."""
        return processes_in_pid_namespace(self.inode) if self.alive() else []

    def kill(self) -> None:
        if self.alive():
            _kill(self.first_pid)

    def wait_until_gone(self, grace_s: float = STOP_GRACE_S) -> bool:
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.alive()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------------
# Inside the walls: what the server observes around itself


def parse_host_namespaces(text: str) -> dict[str, int]:
    namespaces = {}
    for item in text.split():
        name, _, value = item.partition("=")
        if value.isdigit():
            namespaces[name] = int(value)
    return namespaces


def observe_walls(host_namespaces: dict[str, int]) -> str:
    """What this process sees of its walls: the namespaces it does not share with the process that
    started the sandbox, its uid, and whether the host's root is out of sight."""
    own = [
        name
        for name in NAMESPACES
        if name in host_namespaces and own_namespace(name) != host_namespaces[name]
    ]
    shared = [name for name in NAMESPACES if name in host_namespaces and name not in own]
    parts = [f"own {', '.join(own)} namespaces" if own else "no namespace of its own"]
    if shared:
        parts.append(f"shares the host's {', '.join(shared)}")
    parts.append(f"uid {os.getuid()}")
    parts.append(f"/ holds only {', '.join(sorted(os.listdir('/')))}")
    parts.append("/etc/shadow visible" if os.path.lexists("/etc/shadow") else "no /etc/shadow")
    return "; ".join(parts)


def make_undumpable() -> None:
    """Commands run with the server's uid: as a non-dumpable process, its memory, environment and
    descriptors (the token among them) are out of their reach through /proc and ptrace."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable = 4
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
