"""The machine-wide state a node changes, read before it starts and put back after it stops.

A kubelet, containerd, kube-proxy, kube-router and the CNI plugins change more than their own
folders: global sysctls (kubelet sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops; the
bridge plugin net.ipv4.ip_forward), nftables tables and iptables chains, ipsets, a bridge and its
veths, network namespaces under /run/netns, bind mounts, cgroups, and a few fixed folders
(/var/lib/kubelet, /var/log/containers, /var/lib/cni). `HostSnapshot.take()` reads all of it;
`restore()` removes what was added and sets back what was changed; `differences()` says what is
still not as it was, which is what the lifecycle test asserts is empty.

Only what the node could have touched is compared, so that tests of other runs on the same machine
(a Docker engine starting, sandboxes in namespaces of their own) do not show up as differences.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel

# Sysctls a node changes and `restore` sets back. Each one is global on this kind of machine.
RESTORED_SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv4.conf.default.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv6.conf.all.forwarding",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.netfilter.nf_conntrack_tcp_be_liberal",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
# Compared whole (minus counters that move on their own): anything else a node changed shows up.
COMPARED_SYSCTL_TREES = ("kernel", "vm", "net/ipv4", "net/ipv6", "net/bridge", "net/netfilter", "net/core")
VOLATILE_SYSCTL_PREFIXES = (
    "kernel.random.",
    "kernel.ns_last_pid",
    "kernel.pty.nr",
    "kernel.tainted",
    "kernel.perf_event_max_sample_rate",
    "kernel.sched_domain.",
    "kernel.unknown_nmi_panic",
    "vm.stat_",
    "vm.drop_caches",
    "vm.compact_memory",
    "net.netfilter.nf_conntrack_count",
    "net.ipv4.route.flush",
    "net.ipv6.route.flush",
    "net.ipv4.tcp_fastopen_key",
    "net.ipv6.conf.all.stable_secret",
    "net.ipv6.conf.default.stable_secret",
)
# Folders a kubelet or containerd writes whatever their configuration says.
FIXED_FOLDERS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/opt/containerd",
    "/run/containerd",
    "/run/netns",
    "/var/lib/containerd",
    "/etc/kubernetes",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = Path("/run/netns")


def _run(*argv: str) -> str:
    """The command's output, or "" when the tool is missing or fails (then there is nothing of it
    to compare or restore)."""
    if shutil.which(argv[0]) is None:
        return ""
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return completed.stdout if completed.returncode == 0 else ""


def _sysctl_name(path: Path) -> str:
    return str(path.relative_to("/proc/sys")).replace("/", ".")


def read_sysctls(trees: tuple[str, ...] = COMPARED_SYSCTL_TREES) -> dict[str, str]:
    values: dict[str, str] = {}
    for tree in trees:
        for path in sorted(Path("/proc/sys", tree).rglob("*")):
            name = _sysctl_name(path)
            if name.startswith(VOLATILE_SYSCTL_PREFIXES) or not path.is_file():
                continue
            try:
                values[name] = " ".join(path.read_text().split())
            except OSError:  # write-only, or gone with its interface
                continue
    return values


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", name.replace(".", "/")).write_text(value + "\n")


def cgroup_hierarchies() -> list[Path]:
    """Each mounted cgroup hierarchy (v1 controllers and the unified one)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return sorted(set(found))


def top_cgroups() -> list[str]:
    names: set[str] = set()
    for hierarchy in cgroup_hierarchies():
        with contextlib.suppress(OSError):
            names.update(f"{hierarchy.name}/{p.name}" for p in hierarchy.iterdir() if p.is_dir())
    return sorted(names)


def mount_points() -> list[str]:
    return sorted(
        line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )


def links() -> list[str]:
    raw = _run("ip", "-j", "link", "show")
    return sorted(link["ifname"] for link in json.loads(raw)) if raw else []


def nft_tables() -> list[str]:
    """`family name` of every nftables table (iptables-nft's tables among them)."""
    return sorted(
        " ".join(line.split()[1:3]) for line in _run("nft", "list", "tables").splitlines() if line.strip()
    )


def ipsets() -> list[str]:
    return sorted(_run("ipset", "list", "-n").split())


class HostSnapshot(BaseModel):
    sysctls: dict[str, str]
    nft_ruleset: str
    nft_tables: list[str]
    ipsets: list[str]
    links: list[str]
    routes: str
    rules: str
    netns: list[str]
    mounts: list[str]
    cgroups: list[str]
    folders: list[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        return cls(
            sysctls=read_sysctls(),
            nft_ruleset=_run("nft", "list", "ruleset"),
            nft_tables=nft_tables(),
            ipsets=ipsets(),
            links=links(),
            routes=_run("ip", "route", "show", "table", "all"),
            rules=_run("ip", "rule", "show"),
            netns=sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else [],
            mounts=mount_points(),
            cgroups=top_cgroups(),
            folders=[f for f in FIXED_FOLDERS if os.path.lexists(f)],
        )

    def differences(self, after: HostSnapshot, own_paths: tuple[str, ...] = ()) -> list[str]:
        """What `after` has that this snapshot had not, one line each. Mounts are compared under
        the places a node mounts (its own folders, /run/netns, the fixed folders, cgroups)."""
        found = []
        for name in sorted(set(self.sysctls) | set(after.sysctls)):
            # An interface's settings come and go with it; the interfaces are compared as links.
            if name not in self.sysctls or name not in after.sysctls:
                continue
            if self.sysctls[name] != after.sysctls[name]:
                found.append(f"sysctl {name}: {self.sysctls[name]} -> {after.sysctls[name]}")
        if self.nft_ruleset != after.nft_ruleset:
            found.append(f"nftables ruleset changed:\n{after.nft_ruleset}")
        for label, before_items, after_items in [
            ("ipset", self.ipsets, after.ipsets),
            ("link", self.links, after.links),
            ("netns", self.netns, after.netns),
            ("cgroup", self.cgroups, after.cgroups),
            ("folder", self.folders, after.folders),
        ]:
            found += [f"{label} added: {item}" for item in sorted(set(after_items) - set(before_items))]
        if self.routes != after.routes:
            found.append(f"routes changed:\n{after.routes}")
        if self.rules != after.rules:
            found.append(f"ip rules changed:\n{after.rules}")
        watched = (*own_paths, str(NETNS_DIR), str(CGROUP_ROOT), *FIXED_FOLDERS)
        found += [
            f"mount added: {point}"
            for point in sorted(set(after.mounts) - set(self.mounts))
            if any(point == w or point.startswith(w.rstrip("/") + "/") for w in watched)
        ]
        return found


def unmount_under(*roots: Path | str) -> None:
    """Unmounts every mount point at or under the roots, deepest first (lazily if busy)."""
    prefixes = [str(r).rstrip("/") for r in roots]
    points = [
        p for p in mount_points() if any(p == prefix or p.startswith(prefix + "/") for prefix in prefixes)
    ]
    for point in sorted(set(points), key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def unmount_all(point: Path) -> None:
    """Every mount stacked exactly at `point`, top first."""
    for _ in range(10):
        if str(point) not in mount_points():
            return
        unmounted = subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode == 0
        if not unmounted and subprocess.run(["umount", "--lazy", str(point)], capture_output=True).returncode:
            return  # hidden under another mount: uncovered by a later step


def _pids_in(procs: Path) -> list[int]:
    try:
        return [int(pid) for pid in procs.read_text().split()]
    except OSError:  # the cgroup went meanwhile
        return []


def remove_cgroup_tree(name: str) -> None:
    """rmdir the cgroup `name` and everything under it in every hierarchy, deepest first. Called
    once the node has stopped: a process still in it is a container whose runtime died (its shim
    was killed), and is killed too."""
    tops = [h / name.strip("/") for h in cgroup_hierarchies() if (h / name.strip("/")).is_dir()]
    for _ in range(50):
        left = {pid for top in tops for procs in top.rglob("cgroup.procs") for pid in _pids_in(procs)}
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for top in tops:
        remove_empty_folders(top)


def remove_empty_folders(top: Path) -> None:
    for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            path.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def restore(before: HostSnapshot, bridge: str, cgroup_root: str) -> None:
    """Puts the machine back as `before` found it, after every process of the node has stopped:
    mounts, network namespaces, links, nftables tables (iptables-nft's included), ipsets, cgroups,
    fixed folders and sysctls."""
    unmount_under(*(f for f in FIXED_FOLDERS if f not in before.folders))
    if NETNS_DIR.is_dir():
        # containerd mounts each pod's namespace on a file there; `ip netns add` bind-mounts the
        # folder onto itself, which can hide a namespace mounted before it: the entries first, then
        # the folder's own mount, then the entries it uncovered.
        added = [entry for entry in NETNS_DIR.iterdir() if entry.name not in before.netns]
        for entry in added:
            unmount_all(entry)
        if str(NETNS_DIR) not in before.mounts:
            unmount_all(NETNS_DIR)
        for entry in added:
            unmount_all(entry)
            with contextlib.suppress(OSError):
                entry.unlink()
    # The bridge plugin's host ends of pod veths are named veth<hex>; the rest are other runs'.
    for link in sorted(set(links()) - set(before.links)):
        if link == bridge or link.startswith("veth"):
            subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)
    for table in sorted(set(nft_tables()) - set(before.nft_tables)):
        family, name = table.split()
        subprocess.run(["nft", "delete", "table", family, name], capture_output=True, check=False)
    for name in sorted(set(ipsets()) - set(before.ipsets)):
        subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)
    remove_cgroup_tree(cgroup_root)
    for folder in FIXED_FOLDERS:
        if folder not in before.folders and os.path.lexists(folder):
            if folder.startswith("/run/"):
                # Another runtime on the machine (a Docker engine's containerd) may have made its
                # sockets there meanwhile: only empty folders go.
                remove_empty_folders(Path(folder))
            else:
                shutil.rmtree(folder, ignore_errors=True)
    now = read_sysctls()
    for name in RESTORED_SYSCTLS:
        if name in before.sysctls and now.get(name) != before.sysctls[name]:
            with contextlib.suppress(OSError):
                write_sysctl(name, before.sysctls[name])
