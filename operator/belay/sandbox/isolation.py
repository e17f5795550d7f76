"""What a sandbox server reports about its isolation: the network, and the walls around it.

A local sandbox's server runs inside walls bubblewrap built (`belay.sandbox.walls`): its own
network namespace came with them, and `walled_report` describes what the server observes there.

Without those walls (a sandbox pod, or a local sandbox whose subagent accepted weaker walls),
profile `none` is enforced with `unshare --net`. A server on a Unix socket (reachable from any
network namespace) re-executes itself under it: it and every command it runs then see only a
loopback interface of their own. A server on TCP (a sandbox pod) cannot leave the pod's namespace,
so each command runs under `unshare --net` instead.

Whatever happens, the report says what was observed (namespace ids, interfaces, uids), never what
was merely attempted.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from belay.sandbox import walls

NETWORK_PROFILES: tuple[str, ...] = ("none", "allowlist", "internet")

# Overridable so a test (or a machine with unshare elsewhere) can choose the binary.
UNSHARE_ENV = "BELAY_SANDBOX_UNSHARE"
# Set before re-executing, so the new process knows which namespace it left.
HOST_NETNS_ENV = "BELAY_SANDBOX_HOST_NETNS"

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


@dataclass(frozen=True)
class IsolationReport:
    network_isolated: bool
    detail: str
    # Prefix for every command: empty when the server itself is isolated or isolation is off.
    command_prefix: tuple[str, ...] = ()


def unshare_binary() -> str | None:
    return walls.configured_binary(UNSHARE_ENV, "unshare")


def current_netns() -> str:
    return os.readlink("/proc/self/ns/net")


def interfaces() -> list[str]:
    """Interface names visible in this process's network namespace."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines if ":" in line)


# Tried in order: plain `--net` needs root (or CAP_SYS_ADMIN); an unprivileged user gets a network
# namespace inside a user namespace of its own, where the kernel allows that.
UNSHARE_VARIANTS: tuple[tuple[str, ...], ...] = (("--net",), ("--user", "--map-root-user", "--net"))


NETNS_PROBE = "import os; print(os.readlink('/proc/self/ns/net'))"


def probe_unshare(binary: str) -> tuple[tuple[str, ...] | None, str]:
    """Run each unshare variant once and read the namespace the child got. Returns the first
    variant whose child really landed in another network namespace (and that namespace), or None
    and the reasons they failed."""
    failures = []
    for flags in UNSHARE_VARIANTS:
        try:
            completed = subprocess.run(
                # The probe execs this interpreter, as the re-executed server will: inside a user
                # namespace it may be unreachable (a home directory the mapped user cannot enter).
                [binary, *flags, sys.executable, "-I", "-S", "-c", NETNS_PROBE],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except OSError as error:
            return None, f"cannot run {binary}: {error}"
        label = " ".join(["unshare", *flags])
        if completed.returncode != 0:
            failures.append(f"{label}: {completed.stderr.strip() or f'exit status {completed.returncode}'}")
            continue
        child_netns = completed.stdout.strip()
        if child_netns == current_netns():
            failures.append(f"{label}: the child stayed in this network namespace")
            continue
        return flags, child_netns
    return None, "not permitted here (" + "; ".join(failures) + ")"


def bring_loopback_up() -> None:
    """A fresh namespace has `lo` down; bring it up so tools inside can use their own localhost."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(handle, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def reexec_argv(prefix: tuple[str, ...], python: str, module_args: list[str]) -> list[str]:
    # Without --fork, unshare execs the program itself, so the pid the launcher knows stays valid.
    return [*prefix, python, "-m", "belay.sandbox.server", *module_args]


def observe_own_isolation(host_netns: str) -> IsolationReport:
    """Called in the re-executed server: is this process really outside the host's namespace?"""
    own = current_netns()
    visible = interfaces()
    if own == host_netns:
        return IsolationReport(False, f"still in the host network namespace {own}")
    outside = [name for name in visible if name != "lo"]
    if outside:
        return IsolationReport(False, f"own namespace {own} but it has interfaces {outside}")
    return IsolationReport(True, f"server and commands run in their own network namespace {own} (only lo)")


def plan_isolation(profile: str, listens_on_tcp: bool) -> tuple[IsolationReport, tuple[str, ...] | None]:
    """Decide what to do before serving. Returns the report and, when the server should re-execute
    itself inside a new namespace, the unshare command to put in front of it, else None."""
    if profile != "none":
        return (
            IsolationReport(
                False,
                f"profile {profile}: outbound network is not restricted by the sandbox process itself "
                "(in a cluster, the session's NetworkPolicy enforces the profile)",
            ),
            None,
        )
    binary = unshare_binary()
    if binary is None:
        return IsolationReport(False, "profile none requested but unshare is not available here"), None
    flags, observed = probe_unshare(binary)
    if flags is None:
        detail = f"profile none requested but not enforced by the sandbox: unshare {observed}"
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            detail += (
                "; egress is restricted only by the session's NetworkPolicy, which this pod cannot verify"
            )
        return IsolationReport(False, detail), None
    prefix = (binary, *flags)
    if listens_on_tcp:
        return (
            IsolationReport(
                True,
                f"each command runs under `unshare {' '.join(flags)}` in its own network namespace "
                f"(e.g. {observed}); the server keeps the pod's namespace to accept TCP",
                command_prefix=(*prefix, sys.executable, "-m", "belay.sandbox.loopback_exec"),
            ),
            None,
        )
    return IsolationReport(False, "re-executing in a new network namespace"), prefix


def walled_report(
    profile: str, host_namespaces: dict[str, int], egress_socket: str | None, egress_rules: str
) -> IsolationReport:
    """Called by a server inside a local sandbox's walls: the network it observes, then the walls."""
    isolated, network = observe_walled_network(
        profile, host_namespaces.get("net"), egress_socket, egress_rules
    )
    return IsolationReport(isolated, f"{network}; walls: {walls.observe_walls(host_namespaces)}")


def observe_walled_network(
    profile: str, host_netns: int | None, egress_socket: str | None, egress_rules: str
) -> tuple[bool, str]:
    own = walls.own_namespace("net")
    if profile == "internet":
        return False, "profile internet: the host's network namespace, not restricted by the sandbox"
    if own == host_netns:
        return False, f"profile {profile} requested but the sandbox is still in the host's network namespace"
    outside = [name for name in interfaces() if name != "lo"]
    if outside:
        return False, f"profile {profile}: own network namespace {own} but it has interfaces {outside}"
    if profile == "none":
        return True, f"own network namespace {own} (only lo): no network"
    if egress_socket is None or not Path(egress_socket).exists():
        return False, "profile allowlist: own network namespace (only lo) but the harness's proxy is missing"
    return True, (
        f"profile allowlist: own network namespace {own} (only lo); HTTP and HTTPS go only through the "
        f"harness's filtering proxy at 127.0.0.1:{walls.PROXY_PORT} (HTTP_PROXY, HTTPS_PROXY), which "
        f"{egress_rules}; every other connection fails"
    )


def without_walls(
    report: IsolationReport, *, listens_on_tcp: bool, token_file: Path | None
) -> IsolationReport:
    """The report of a server that runs without walls of its own, saying what stands in for them.
    `token_file` None: a pool sandbox, whose token came with its claim and is in no file."""
    uid = os.getuid()
    where = f"can read its token file {token_file}" if token_file else "find its token in no file"
    if listens_on_tcp:
        text = (
            "no bubblewrap walls: commands run beside the server, with its uid "
            f"{uid}, and {where}; in a sandbox pod the container's "
            "security context (non-root, read-only root filesystem, no capabilities) and the "
            "session's NetworkPolicy are the walls"
        )
    else:
        text = (
            f"NONE: commands run as uid {uid} with the host's whole filesystem and processes "
            "visible, as the harness does"
        )
    return replace(report, detail=f"{report.detail}; walls: {text}")
