"""A real node next to the control plane: containerd (Debian's), kubelet, kube-proxy (nftables),
kube-router (its NetworkPolicy firewall only) on the host, the bridge CNI, and CoreDNS as a pod in
kube-system behind the `kube-dns` Service. Pods run as runc containers of images imported into
containerd: the pause and CoreDNS images made here (images.py) and the Belay image.

The recipe, and why each setting is there, is in docs/testenv.md ("The node"). In short:
- the node's address is the bridge's own address (NODE_IP): pods reach the apiserver, the stores
  and the host's test servers there, and nothing of the node listens on the machine's own network;
- containerd clamps oom_score_adj (`restrict_oom_score_adj`: this machine withholds
  CAP_SYS_RESOURCE), uses a local pause image and never pulls;
- the kubelet never collects images (there is no registry to pull them again) and evicts only on
  small explicit thresholds;
- what the node changes on the machine (sysctls the kubelet sets, nftables tables, ipsets, the
  bridge, network namespaces, mounts, cgroups, fixed folders) is read before it starts and put back
  after it stops (host.py).

Only one node runs on a machine at a time: the ownership file /run/belay-node.json says who holds
it (a test run, or `python -m tests.testenv up`) and what the machine looked like before; whoever
finds it held by a process that is gone first stops what that owner left and puts the machine
back.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from tests.testenv import host
from tests.testenv.binaries import NODE_COMPONENTS, cache_dir, component
from tests.testenv.coredns import coredns_objects
from tests.testenv.images import ImageArchive, etcd_image, images_dir, single_binary_image
from tests.testenv.kube import ControlPlane
from tests.testenv.network import free_port, healthy, wait_ready
from tests.testenv.polling import wait_until
from tests.testenv.processes import ManagedProcess, pid_alive, pid_cmdline, pid_start_ticks

NODE_NAME = "belay-node"
BRIDGE = "belay0"
POD_CIDR = "10.244.0.0/24"
NODE_IP = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
# What the kubelet makes at the root of every cgroup hierarchy (cgroupRoot "/").
KUBEPODS_CGROUP = "kubepods"
OWNER_FILE = Path("/run/belay-node.json")
# Fixed folders (one node per machine), because unix socket paths are limited to 104 bytes:
# containerd's sockets and state (the containers' root file systems are mounted there), and the
# kubelet's root (its sockets, the pods' volumes).
STATE_DIR = Path("/run/belay-node")
KUBELET_ROOT = Path("/var/lib/belay-node/kubelet")
LOCK_FILE = Path("/run/belay-node.lock")
OWNER_WAIT_S = 1800.0
KEPT_HARNESS_ARCHIVES = 2
READY_TIMEOUT = 240.0
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
CNI_BIN_DIR = "/usr/lib/cni"
RUNSC = "/usr/bin/runsc"
RUNSC_LAUNCHER = Path(__file__).with_name("runsc-under-runc-shim.sh")
# The containerd runtime a RuntimeClass names to run a pod under gVisor.
GVISOR_HANDLER = "runsc"
DEBIAN_PACKAGES = {
    CONTAINERD: "containerd",
    "/usr/sbin/runc": "runc",
    RUNSC: "runsc",
    f"{CNI_BIN_DIR}/bridge": "containernetworking-plugins",
    "/usr/sbin/nft": "nftables",
    "/usr/sbin/ipset": "ipset",
    "/usr/sbin/iptables": "iptables",
}


def node_missing_reason() -> str | None:
    """None when a node can run here: root, the Debian packages and the components hack/ builds."""
    if os.geteuid() != 0:
        return "the node tests need root: containerd, the kubelet and kube-router change the host's network"
    absent = sorted({package for path, package in DEBIAN_PACKAGES.items() if not os.access(path, os.X_OK)})
    if absent:
        return f"Debian packages missing: {', '.join(absent)}; run `make testenv-build`"
    for name in NODE_COMPONENTS:
        reason = component(name).missing_reason()
        if reason:
            return reason
    return None


# --------------------------------------------------------------------------------------------------
# Ownership of the machine's one node


class NodeOwner(BaseModel):
    pid: int
    start_ticks: int
    run_dir: str
    containerd_socket: str
    kubelet_root: str
    before: host.HostSnapshot
    # The node's own processes (containerd, kubelet, ...), stopped by whoever clears a dead owner.
    pids: list[tuple[int, int]] = []

    def alive(self) -> bool:
        return pid_alive(self.pid) and pid_start_ticks(self.pid) == self.start_ticks


@contextlib.contextmanager
def _locked() -> Any:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def read_owner() -> NodeOwner | None:
    try:
        return NodeOwner.model_validate_json(OWNER_FILE.read_text())
    except (FileNotFoundError, ValueError):
        return None


def write_owner(owner: NodeOwner) -> None:
    partial = OWNER_FILE.with_suffix(".partial")
    partial.write_text(owner.model_dump_json())
    partial.replace(OWNER_FILE)


def _stop_pid(pid: int, start_ticks: int) -> None:
    if pid_alive(pid) and pid_start_ticks(pid) == start_ticks:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def shim_pids(containerd_socket: str) -> list[int]:
    """containerd-shim-runc-v2 processes of the containerd at that socket (each runs in a process
    group of its own, so stopping containerd leaves them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            argv = pid_cmdline(int(entry.name))
            if argv and "containerd-shim" in argv[0] and containerd_socket in argv:
                found.append(int(entry.name))
    return found


def clear_dead_owner(owner: NodeOwner) -> None:
    """What a node whose owner died left: its processes, its shims and containers, its mounts, and
    the machine's changed state."""
    for pid, ticks in owner.pids:
        _stop_pid(pid, ticks)
    for pid in shim_pids(owner.containerd_socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    clean_host(Path(owner.run_dir), Path(owner.kubelet_root), owner.before, release=False)
    with contextlib.suppress(FileNotFoundError):
        OWNER_FILE.unlink()


def acquire_node(
    run_dir: Path, containerd_socket: Path, kubelet_root: Path, timeout: float = OWNER_WAIT_S
) -> host.HostSnapshot:
    """Waits until no live owner holds the machine's node, then records this process as its owner
    with the machine's state as it is now (the state `release_node` puts back)."""

    def taken() -> host.HostSnapshot | str:
        """The machine's state once the node is ours; while another holds it, who that is."""
        with _locked():
            owner = read_owner()
            if owner is not None and not owner.alive():
                clear_dead_owner(owner)
                owner = None
            if owner is not None:
                return f"held by pid {owner.pid}"
            before = host.HostSnapshot.take()
            me = os.getpid()
            write_owner(
                NodeOwner(
                    pid=me,
                    start_ticks=pid_start_ticks(me) or 0,
                    run_dir=str(run_dir),
                    containerd_socket=str(containerd_socket),
                    kubelet_root=str(kubelet_root),
                    before=before,
                )
            )
            return before

    snapshot = wait_until(
        taken,
        "the machine's node to be free",
        until=lambda value: isinstance(value, host.HostSnapshot),
        timeout=timeout,
        interval=2,
    )
    assert isinstance(snapshot, host.HostSnapshot)
    return snapshot


def hand_over(pid: int, pids: list[tuple[int, int]]) -> None:
    """The node now belongs to `pid` (the detached kubelet of `python -m tests.testenv up`)."""
    with _locked():
        owner = read_owner()
        assert owner is not None, "the node has no owner"
        write_owner(
            owner.model_copy(update={"pid": pid, "start_ticks": pid_start_ticks(pid) or 0, "pids": pids})
        )


def record_processes(pids: list[tuple[int, int]]) -> None:
    with _locked():
        owner = read_owner()
        if owner is not None:
            write_owner(owner.model_copy(update={"pids": pids}))


def release_node() -> None:
    with _locked(), contextlib.suppress(FileNotFoundError):
        OWNER_FILE.unlink()


def routes_into(cidr: str) -> list[str]:
    """The machine's routes (any table) to destinations that overlap `cidr`."""
    listed = subprocess.run(
        ["ip", "-j", "route", "show", "table", "all"], capture_output=True, text=True, check=True
    )
    wanted = ipaddress.ip_network(cidr)
    found = []
    for route in json.loads(listed.stdout or "[]"):
        destination = route.get("dst", "default")
        with contextlib.suppress(ValueError):
            if destination != "default" and ipaddress.ip_network(destination, strict=False).overlaps(wanted):
                found.append(destination)
    return found


# --------------------------------------------------------------------------------------------------
# Configuration files


def runsc_launcher(path: Path) -> Path:
    """What containerd's runc shim runs as its binary for gVisor: Debian's runsc on the ptrace
    platform, with the pod's network namespace passed through, and the three things the shim
    expects of runc that runsc does otherwise bridged (runsc-under-runc-shim.sh)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(RUNSC_LAUNCHER, path)
    path.chmod(0o755)
    return path


def containerd_config(
    root: Path, state: Path, socket: Path, pause: str, cni_conf_dir: Path, runsc: Path
) -> str:
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # This machine withholds CAP_SYS_RESOURCE: the -998 CRI asks for a sandbox cannot be set.
  restrict_oom_score_adj = true
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    # gVisor: the runc shim with runsc as its binary, its state beside containerd's.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{GVISOR_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{GVISOR_HANDLER}.options]
        BinaryName = "{runsc}"
        Root = "{state}/runsc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """One bridge, addresses from host-local. No masquerading: pods reach only what is on this
    machine (the host's bridge address and the test's own network namespaces)."""
    return {
        "cniVersion": "1.0.0",
        "name": "belay",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def kubelet_config(
    ca_cert: Path, socket: Path, port: int, healthz_port: int, pod_logs: Path
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # No host resolver for pods: nothing a pod resolves leaves the machine.
        "resolvConf": "",
        # No registry to pull a collected image again: never collect; evict only when really short.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1Gi",
            "imagefs.available": "1Gi",
            "nodefs.inodesFree": "1%",
            "imagefs.inodesFree": "1%",
        },
        # CAP_SYS_RESOURCE is withheld here: the kubelet cannot lower its own oom_score_adj.
        "oomScoreAdj": 0,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(pod_logs),
        "serializeImagePulls": False,
        "registerNode": True,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
    }


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "nftables",
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        # Zeros leave the machine's conntrack sysctls as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


# --------------------------------------------------------------------------------------------------
# The node


class Node:
    """The node's processes and files. `prepare_host` comes before the control plane starts (it
    binds to the bridge's address), `start` after it."""

    def __init__(self, run_dir: Path, detached: bool = False) -> None:
        self.run_dir = run_dir
        self.detached = detached
        # containerd keeps its content and snapshots in the cache: an image is imported once.
        self.containerd_root = cache_dir() / "node" / "containerd"
        self.containerd_state = STATE_DIR / "containerd"
        self.socket = STATE_DIR / "containerd.sock"
        self.kubelet_root = KUBELET_ROOT
        self.kubelet_port = free_port()
        self.kubelet_healthz_port = free_port()
        self.kube_proxy_healthz_port = free_port()
        self.kube_proxy_metrics_port = free_port()
        self.processes: dict[str, ManagedProcess] = {}
        self.before: host.HostSnapshot | None = None
        self.images: list[ImageArchive] = []

    # ---- host

    def prepare_host(self) -> None:
        """Becomes the machine's node owner (waiting for another run's node to stop), then makes
        the bridge with the node's address, so the control plane and the stores can bind to it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.before = acquire_node(self.run_dir, self.socket, self.kubelet_root)
        # What a node that stopped without cleaning up left (its owner record was cleared).
        for folder in (STATE_DIR, KUBELET_ROOT.parent):
            host.unmount_under(folder)
            shutil.rmtree(folder, ignore_errors=True)
        STATE_DIR.mkdir(parents=True)
        taken = routes_into(POD_CIDR)
        if BRIDGE in self.before.links or taken:
            raise RuntimeError(f"{BRIDGE} or a route into {POD_CIDR} already exists: {taken}")
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)

    # ---- processes

    def _process(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.run_dir / f"{name}.log", detached=self.detached)
        self.processes[name] = process
        process.start()
        return process

    @staticmethod
    def _wait_healthy(process: ManagedProcess, healthz_port: int) -> None:
        wait_ready(
            lambda: healthy(f"http://127.0.0.1:{healthz_port}/healthz"),
            process.name,
            READY_TIMEOUT,
            still_starting=process.running,
            describe_failure=process.log_tail,
        )

    def crictl(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        completed = crictl_at(self.socket, *args, timeout=timeout)
        if check and completed.returncode != 0:
            raise RuntimeError(
                f"crictl {' '.join(args)} exited {completed.returncode}: {completed.stderr.strip()}"
            )
        return completed

    def ctr(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CTR, "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def start_containerd(self, pause: str) -> None:
        cni_conf = self.run_dir / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-belay.conflist").write_text(
            json.dumps(cni_conflist(self.run_dir / "cni-ipam"), indent=2)
        )
        config = self.run_dir / "containerd.toml"
        config.write_text(
            containerd_config(
                self.containerd_root,
                self.containerd_state,
                self.socket,
                pause,
                cni_conf,
                runsc_launcher(STATE_DIR / "bin" / "runsc"),
            )
        )
        process = self._process("containerd", [CONTAINERD, "--config", str(config)])
        wait_ready(
            lambda: self.crictl("info", check=False, timeout=20).returncode == 0,
            f"containerd at {self.socket}",
            READY_TIMEOUT,
            still_starting=process.running,
            describe_failure=process.log_tail,
        )

    def import_images(self, archives: list[ImageArchive]) -> None:
        """Imports each image containerd does not have yet (its root persists in the cache), and
        drops the images of earlier builds (containerd then collects their content)."""
        present = set(self.ctr("images", "list", "--quiet").stdout.split())
        wanted = {a.reference for a in archives}
        stale = [
            r
            for r in present
            if r not in wanted and r.startswith(("belay.local/", "docker.io/library/belay-"))
        ]
        if stale:
            self.ctr("images", "remove", *stale)
        for archive in archives:
            if archive.reference not in present:
                self.ctr("images", "import", str(archive.path))
        self.images = archives

    def start_kubelet(self, kubeconfig: Path, ca_cert: Path) -> None:
        config = self.run_dir / "kubelet.yaml"
        pod_logs = self.run_dir / "pod-logs"
        config.write_text(
            yaml.safe_dump(
                kubelet_config(ca_cert, self.socket, self.kubelet_port, self.kubelet_healthz_port, pod_logs)
            )
        )
        process = self._process(
            "kubelet",
            [
                str(component("node").path("kubelet")),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        self._wait_healthy(process, self.kubelet_healthz_port)

    def start_network(self, kubeconfig: Path) -> None:
        config = self.run_dir / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                kube_proxy_config(kubeconfig, self.kube_proxy_healthz_port, self.kube_proxy_metrics_port)
            )
        )
        proxy = self._process(
            "kube-proxy", [str(component("node").path("kube-proxy")), f"--config={config}", "--v=1"]
        )
        self._process(
            "kube-router",
            [
                str(component("kube-router").path("kube-router")),
                f"--kubeconfig={kubeconfig}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--enable-cni=false",
                "--enable-ipv6=false",
                f"--hostname-override={NODE_NAME}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--health-port=0",
                "--metrics-port=0",
                "--v=1",
            ],
        )
        self._wait_healthy(proxy, self.kube_proxy_healthz_port)

    def start(self, kube: ControlPlane, harness_image: ImageArchive | None) -> None:
        """containerd with the images, the kubelet (until the node is Ready and schedulable),
        kube-proxy and kube-router, then CoreDNS (until it answers)."""
        assert kube.pki is not None, "the control plane is not started"
        pause, coredns, archives = node_images(harness_image)
        self.start_containerd(pause.reference)
        self.import_images(archives)
        self.start_kubelet(kube.kubeconfig, kube.pki.ca_cert)
        record_processes(self.pids())
        kubelet = self.processes["kubelet"]
        wait_ready(
            lambda: node_schedulable(kube),
            f"node {NODE_NAME} Ready and without the not-ready taint",
            READY_TIMEOUT,
            still_starting=kubelet.running,
            describe_failure=kubelet.log_tail,
        )
        self.start_network(kube.kubeconfig)
        record_processes(self.pids())
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": coredns_objects(coredns.reference, CLUSTER_DOMAIN, DNS_SERVICE_IP),
                }
            ),
        )
        wait_ready(
            lambda: dns_ready(kube),
            "CoreDNS ready behind the kube-dns Service",
            READY_TIMEOUT,
            still_starting=kubelet.running,
            describe_failure=lambda: (
                kube.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout + kubelet.log_tail()
            ),
        )

    def pids(self) -> list[tuple[int, int]]:
        found = []
        for process in self.processes.values():
            if process.pid is not None and (ticks := pid_start_ticks(process.pid)) is not None:
                found.append((process.pid, ticks))
        return found

    # ---- inside pods

    def container_id(self, namespace: str, pod: str, container: str | None = None) -> str:
        args = ["ps", "--quiet", "--state", "Running", f"--label=io.kubernetes.pod.namespace={namespace}"]
        args.append(f"--label=io.kubernetes.pod.name={pod}")
        if container:
            args.append(f"--label=io.kubernetes.container.name={container}")
        ids = self.crictl(*args).stdout.split()
        if not ids:
            raise LookupError(f"no running container in pod {namespace}/{pod}")
        return ids[0]

    def exec(
        self, namespace: str, pod: str, *argv: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Runs argv inside the pod's container, as the container (its user, root file system,
        capabilities and network): exit status not checked."""
        cid = self.container_id(namespace, pod)
        return self.crictl(
            "exec", "--sync", f"--timeout={int(timeout)}", cid, *argv, timeout=timeout + 30, check=False
        )

    def container_pid(self, namespace: str, pod: str) -> int:
        """The host pid of the pod container's main process."""
        info = json.loads(self.crictl("inspect", self.container_id(namespace, pod)).stdout)
        return int(info["info"]["pid"])

    # ---- stop

    def stop(self) -> None:
        """Stops the kubelet first (so it recreates nothing), then every pod through the runtime
        (their networks go with them), the network daemons and containerd. `clean_host` follows,
        once the control plane and the stores (which listen on the bridge) have stopped too."""
        for name in ("kubelet", "kube-proxy", "kube-router"):
            if name in self.processes:
                self.processes[name].stop()
        containerd = self.processes.get("containerd")
        if containerd is not None and containerd.running():
            remove_all_pods(self.socket)
        kill_shims(self.socket)
        if containerd is not None:
            containerd.stop()

    def clean_host(self) -> None:
        clean_host(self.run_dir, self.kubelet_root, self.before)


def node_schedulable(kube: ControlPlane) -> bool:
    found = kube.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    node = json.loads(found.stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    tainted = any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints", []))
    return ready and not tainted


def dns_ready(kube: ControlPlane) -> bool:
    """An EndpointSlice of kube-dns has a ready endpoint, and the default service account exists
    (the controller-manager makes it; pods cannot be admitted before)."""
    slices = kube.kubectl(
        "get",
        "endpointslices",
        "-n",
        "kube-system",
        "-l",
        "kubernetes.io/service-name=kube-dns",
        "-o",
        "json",
        check=False,
    )
    if slices.returncode != 0:
        return False
    ready = any(
        (endpoint.get("conditions") or {}).get("ready")
        for item in json.loads(slices.stdout)["items"]
        for endpoint in item.get("endpoints") or []
    )
    return ready and kube.kubectl("get", "serviceaccount", "default", check=False).returncode == 0


def crictl_at(socket: Path | str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [
        str(component("crictl").path("crictl")),
        f"--runtime-endpoint=unix://{socket}",
        f"--image-endpoint=unix://{socket}",
        "--timeout=60s",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def remove_all_pods(socket: Path | str) -> None:
    """Every pod sandbox of the runtime stopped and removed: containers, network namespaces, veths
    and addresses go with them."""
    pods = crictl_at(socket, "pods", "--quiet").stdout.split()
    if pods:
        crictl_at(socket, "stopp", *pods)
        crictl_at(socket, "rmp", "--force", *pods)


def kill_shims(socket: Path | str) -> None:
    for pid in shim_pids(str(socket)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def clean_host(
    run_dir: Path, kubelet_root: Path, before: host.HostSnapshot | None, release: bool = True
) -> None:
    """After every process of the node has stopped: its mounts (the kubelet's volumes and root
    folder, the containers' root file systems), then the machine as `before` found it, then the
    files the pods' users made; and the machine's node is free again."""
    host.unmount_under(run_dir, kubelet_root, STATE_DIR)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    if before is not None:
        host.restore(before, BRIDGE, KUBEPODS_CGROUP)
    shutil.rmtree(KUBELET_ROOT.parent, ignore_errors=True)
    if release:
        release_node()


def harness_image_for_sources() -> tuple[ImageArchive | None, str | None]:
    """The Belay image of the current sources, as an archive to import, or why there is none. Once
    saved, the archive serves even after another build replaced the image in the Docker engine."""
    from tests.testenv.docker_engine import expected_image_tag, image_missing_reason

    tag = expected_image_tag()
    if harness_archive_path(tag).exists():
        return harness_image_archive(tag), None
    reason = image_missing_reason()
    return (None, reason) if reason else (harness_image_archive(tag), None)


def node_images(harness_image: ImageArchive | None) -> tuple[ImageArchive, ImageArchive, list[ImageArchive]]:
    """The pause image, the CoreDNS image, and every image to import."""
    pause = single_binary_image("pause", component("node").path("pause"), "/pause", ["/pause"])
    coredns = single_binary_image("coredns", component("coredns").path("coredns"), "/coredns", ["/coredns"])
    archives = [pause, coredns, etcd_image()]
    if harness_image is not None:
        archives.append(harness_image)
    return pause, coredns, archives


def harness_archive_path(tag: str) -> Path:
    return images_dir() / f"{tag.replace(':', '-')}.tar"


def harness_image_archive(tag: str) -> ImageArchive:
    """The Belay image as `docker save` writes it, saved from the project's Docker engine once per
    tag. Its reference in containerd is the one a pod's `image: <tag>` resolves to."""
    from tests.testenv.docker_engine import DockerEngine

    path = harness_archive_path(tag)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        logs = Path(tempfile.mkdtemp(prefix="belay-docker-save-"))
        engine = DockerEngine(logs)
        try:
            engine.start()
            partial = path.with_suffix(".partial")
            engine.docker("save", "--output", str(partial), tag, timeout=600)
            partial.replace(path)
        finally:
            engine.stop()
            shutil.rmtree(logs, ignore_errors=True)
        # Each tag's archive is some 700 MB: keep this one and the one before (another checkout on
        # the machine may be a version behind), not every tag ever built.
        saved = sorted(path.parent.glob("belay-harness-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in saved[KEPT_HARNESS_ARCHIVES:]:
            old.unlink()
    return ImageArchive(f"docker.io/library/{tag}", path)
