"""A Kubernetes control plane on loopback: kube-apiserver (RBAC, default admission plugins, service
account issuer and keys), kube-controller-manager and kube-scheduler, over an etcd of its own. No
node is registered; objects are stored, validated and reconciled, pods stay Pending.

With a node (tests/testenv/node.py) it listens on the node's bridge address instead, where pods
reach it through the `kubernetes` Service, and its endpoint reconciler publishes that address."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

from belay.lifetime import die_with_parent
from tests.testenv.binaries import component
from tests.testenv.certs import ControlPlanePKI, kubeconfig, write_pki
from tests.testenv.etcd import EtcdServer
from tests.testenv.network import LOOPBACK, free_port, healthy, http_get, wait_ready
from tests.testenv.processes import ManagedProcess

READY_TIMEOUT = 120.0
SERVICE_CIDR = "10.0.0.0/24"
# The first address of the service range: the `kubernetes` Service, which the serving cert names.
SERVICE_IP = "10.0.0.1"


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


class ControlPlane:
    def __init__(
        self,
        run_dir: Path,
        detached: bool = False,
        address: str = LOOPBACK,
        service_cidr: str = SERVICE_CIDR,
        service_ip: str = SERVICE_IP,
    ) -> None:
        self.run_dir = run_dir
        self.detached = detached
        self.address = address
        self.service_cidr = service_cidr
        self.service_ip = service_ip
        self.etcd = EtcdServer(run_dir, name="kube-etcd", detached=detached)
        self.apiserver_port = free_port()
        self.controller_manager_port = free_port()
        self.scheduler_port = free_port()
        self.kubeconfig = run_dir / "kubeconfig"
        self.pki: ControlPlanePKI | None = None
        self.processes: dict[str, ManagedProcess] = {}
        self.version = ""

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"

    def _bin(self, name: str) -> str:
        return str(component("kubernetes").path(name))

    def _apiserver_argv(self, pki: ControlPlanePKI) -> list[str]:
        argv = [
            self._bin("kube-apiserver"),
            f"--etcd-servers={self.etcd.endpoint}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={self.service_cidr}",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--authorization-mode=RBAC",
            # The aggregation layer's front-proxy CA, as kubeadm sets it: without one, every
            # delegating component logs a missing CA bundle on each resync.
            f"--requestheader-client-ca-file={pki.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            # What `kubectl exec` and `logs` present to a node's kubelet, found at its address
            # (its host name is in no resolver).
            f"--kubelet-client-certificate={pki.admin_cert}",
            f"--kubelet-client-key={pki.admin_key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            f"--cert-dir={self.run_dir / 'apiserver-certs'}",
            "--v=0",
        ]
        if self.address == LOOPBACK:
            # Endpoints may not hold a loopback address, so the `kubernetes` Service gets none
            # instead of an error every ten seconds; nothing here runs in a pod to call it.
            argv.append("--endpoint-reconciler-type=none")
        return argv

    def _component_argv(self, name: str, port: int, pki: ControlPlanePKI) -> list[str]:
        argv = [
            self._bin(name),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            "--leader-elect=false",
            "--v=0",
        ]
        if name == "kube-controller-manager":
            argv += [
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={self.service_cidr}",
            ]
        return argv

    def _process(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.run_dir / f"{name}.log", detached=self.detached)
        self.processes[name] = process
        return process

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pki = self.pki = write_pki(self.run_dir / "pki", self.service_ip, self.address)
        self.kubeconfig.write_text(kubeconfig(self.server, pki))
        self.kubeconfig.chmod(0o600)
        self.etcd.start()

        apiserver = self._process("kube-apiserver", self._apiserver_argv(pki))
        apiserver.start()
        client_tls = pki.client_ssl_context()
        wait_ready(
            lambda: healthy(f"{self.server}/readyz", client_tls),
            f"kube-apiserver at {self.server}",
            READY_TIMEOUT,
            still_starting=apiserver.running,
            describe_failure=apiserver.log_tail,
        )
        _, body = http_get(f"{self.server}/version", client_tls)
        self.version = str(json.loads(body)["gitVersion"])

        # Both start together; each is then awaited on its own health endpoint, verified with our CA.
        others = {
            "kube-controller-manager": self.controller_manager_port,
            "kube-scheduler": self.scheduler_port,
        }
        started = {
            name: self._process(name, self._component_argv(name, port, pki)) for name, port in others.items()
        }
        for process in started.values():
            process.start()
        for name, port in others.items():
            process = started[name]
            healthz = f"https://{LOOPBACK}:{port}/healthz"
            wait_ready(
                functools.partial(healthy, healthz, client_tls),
                f"{name} at {healthz}",
                READY_TIMEOUT,
                still_starting=process.running,
                describe_failure=process.log_tail,
            )

    def stop(self) -> None:
        # Reverse order of start: clients before the apiserver, the apiserver before its etcd.
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver"):
            if name in self.processes:
                self.processes[name].stop()
        self.etcd.stop()

    def all_processes(self) -> list[ManagedProcess]:
        return [self.etcd.process, *self.processes.values()]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs the kubectl built with this control plane against it. A non-zero exit raises
        KubectlError (with kubectl's stderr) unless check=False."""
        argv = [self._bin("kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=120, preexec_fn=die_with_parent()
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result
