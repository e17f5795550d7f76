"""The whole environment at once: what `python -m tests.testenv up` starts and `down` stops, what
the node tests' fixture starts, and what the warm-start benchmark times."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tests.testenv import node as node_module
from tests.testenv.binaries import component
from tests.testenv.etcd import EtcdServer
from tests.testenv.images import ImageArchive
from tests.testenv.kube import ControlPlane
from tests.testenv.network import LOOPBACK
from tests.testenv.node import KUBERNETES_SERVICE_IP, NODE_IP, NODE_NAME, SERVICE_CIDR, Node
from tests.testenv.processes import ManagedProcess, pid_alive, pid_cmdline, pid_start_ticks, stop_group
from tests.testenv.s3 import S3Server
from tests.testenv.state import NodeState, ProcessRecord, S3Endpoint, TestEnvState

REQUIRED = ("kubernetes", "etcd", "s3")


def node_wanted() -> str | None:
    """None when `up` starts a node; otherwise why not (it needs root and the node's components)."""
    return node_module.node_missing_reason()


def missing_components() -> list[str]:
    """Reasons, one per component that `up` needs and is not built (helm is optional for `up`)."""
    return [r for r in (component(n).missing_reason() for n in REQUIRED) if r]


class TestEnv:
    """etcd for the event store, the S3 server and the control plane (with its own etcd); with
    `node=True` also a node (tests/testenv/node.py), and then everything listens on the node's
    bridge address, where pods reach it, instead of loopback."""

    __test__ = False

    def __init__(
        self,
        run_dir: Path,
        detached: bool = False,
        node: bool = False,
        harness_image: ImageArchive | None = None,
    ) -> None:
        self.run_dir = run_dir
        address = NODE_IP if node else LOOPBACK
        self.node = Node(run_dir / "node", detached=detached) if node else None
        self.harness_image = harness_image
        self.etcd = EtcdServer(run_dir / "etcd", detached=detached, host=address)
        self.s3 = S3Server(run_dir / "s3", detached=detached, host=address)
        if node:
            self.kube = ControlPlane(
                run_dir / "kube",
                detached=detached,
                address=address,
                service_cidr=SERVICE_CIDR,
                service_ip=KUBERNETES_SERVICE_IP,
            )
        else:
            self.kube = ControlPlane(run_dir / "kube", detached=detached)

    def processes(self) -> list[ManagedProcess]:
        started = [self.etcd.member.process, self.s3.process, self.kube.etcd.member.process]
        running = [p for p in started if p is not None] + list(self.kube.processes.values())
        return running + (list(self.node.processes.values()) if self.node else [])

    def start(self) -> None:
        """Starts everything; on any failure stops what already runs and re-raises."""
        try:
            if self.node:
                self.node.prepare_host()
            self.etcd.start()
            self.s3.start()
            self.kube.start()
            if self.node:
                self.node.start(self.kube, self.harness_image)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.node:
            self.node.stop()
        self.kube.stop()
        self.s3.stop()
        self.etcd.stop()
        if self.node:
            self.node.clean_host()

    def state(self) -> TestEnvState:
        helm = component("helm")
        return TestEnvState(
            run_dir=str(self.run_dir),
            kubeconfig=str(self.kube.kubeconfig),
            server=self.kube.server,
            kube_version=self.kube.version,
            kubectl=str(component("kubernetes").path("kubectl")),
            helm=None if helm.missing() else str(helm.path("helm")),
            etcd_endpoint=self.etcd.endpoint,
            s3=S3Endpoint(
                endpoint_url=self.s3.endpoint_url,
                access_key=self.s3.access_key,
                secret_key=self.s3.secret_key,
                region=self.s3.region,
            ),
            processes=[self._record(p) for p in self.processes()],
            node=None
            if self.node is None
            else NodeState(
                name=NODE_NAME,
                run_dir=str(self.node.run_dir),
                containerd_socket=str(self.node.socket),
                kubelet_root=str(self.node.kubelet_root),
            ),
        )

    @staticmethod
    def _record(process: ManagedProcess) -> ProcessRecord:
        assert process.pid is not None, f"{process.name} was never started"
        start_ticks = pid_start_ticks(process.pid)
        assert start_ticks is not None, f"{process.name} (pid {process.pid}) is not running"
        return ProcessRecord(
            name=process.name,
            pid=process.pid,
            executable=process.argv[0],
            start_ticks=start_ticks,
            log=str(process.log_path),
        )


def still_ours(record: ProcessRecord) -> bool:
    """The pid still names the process we started: same binary, same start time."""
    cmdline = pid_cmdline(record.pid)
    return (
        pid_alive(record.pid)
        and bool(cmdline)
        and cmdline[0] == record.executable
        and pid_start_ticks(record.pid) == record.start_ticks
    )


def stop_recorded(state: TestEnvState) -> list[int]:
    """Stops every recorded process group that still runs our binary; returns the pids stopped.
    Clients first, the stores last, the reverse of start. A node goes as `Node.stop` does it: the
    kubelet and the network daemons, then its pods through the runtime, then the rest; then the
    machine is put back as the node found it."""
    stopped = []
    records = list(reversed(state.processes))
    if state.node is not None:
        first = [r for r in records if r.name in ("kubelet", "kube-proxy", "kube-router")]
        records = first + [r for r in records if r not in first]
    for record in records:
        if record.name == "containerd" and state.node is not None and still_ours(record):
            node_module.remove_all_pods(state.node.containerd_socket)
            node_module.kill_shims(state.node.containerd_socket)
        if still_ours(record):
            stop_group(record.pid)
            stopped.append(record.pid)
    if state.node is not None:
        owner = node_module.read_owner()
        node_module.clean_host(
            Path(state.node.run_dir), Path(state.node.kubelet_root), owner.before if owner else None
        )
    return stopped


def remove_run_dir(state: TestEnvState) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(state.run_dir)
