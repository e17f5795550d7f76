"""What the node tests share: the running environment, commands run inside pods' containers, and
connection probes made from inside a pod."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.controller.operator_process import kubectl_json
from tests.testenv.env import TestEnv
from tests.testenv.kube import ControlPlane
from tests.testenv.node import NODE_NAME, Node
from tests.testenv.polling import wait_until

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
PROBE_TIMEOUT_S = 3.0

# Run inside a pod with `python -c`: tries every target at once and prints, per target, what
# happened. "open"/"answered" mean the connection (or a DNS answer) got through; anything else
# ("refused", "timeout", "unreachable", ...) means it did not.
PROBE_SCRIPT = r"""
import json, socket, struct, sys, threading
targets = json.loads(sys.argv[1]); timeout = float(sys.argv[2]); results = {}
def dns_query(server, name):
    query = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    query += b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    query += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(timeout)
    try:
        s.sendto(query, (server, 53)); s.recv(512); return "answered"
    finally:
        s.close()
def probe(key, target):
    try:
        if target["kind"] == "dns":
            results[key] = dns_query(target["host"], target["name"])
        else:
            socket.create_connection((target["host"], target["port"]), timeout=timeout).close()
            results[key] = "open"
    except socket.timeout:
        results[key] = "timeout"
    except ConnectionRefusedError:
        results[key] = "refused"
    except socket.gaierror as error:
        results[key] = "no address: " + str(error)
    except OSError as error:
        results[key] = type(error).__name__ + ": " + (error.strerror or str(error))
threads = [threading.Thread(target=probe, args=item) for item in targets.items()]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps(results))
"""
GOT_THROUGH = ("open", "answered")


def tcp(host: str, port: int) -> dict[str, Any]:
    return {"kind": "tcp", "host": host, "port": port}


def dns(server: str, name: str = "kubernetes.default.svc.cluster.local") -> dict[str, Any]:
    return {"kind": "dns", "host": server, "name": name}


@dataclass
class NodeCluster:
    env: TestEnv
    image: str  # the Belay image's tag, imported into the node's containerd

    @property
    def kube(self) -> ControlPlane:
        return self.env.kube

    @property
    def node(self) -> Node:
        assert self.env.node is not None
        return self.env.node

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels or {}},
        }
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(namespace))
        # The controller-manager makes the namespace's default service account; pods need it.
        wait_until(
            lambda: (
                self.kube.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
            ),
            f"the default service account of {name}",
            timeout=60,
            interval=0.5,
        )

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.kube.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        )

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return kubectl_json(self.kube, "get", "pod", "-n", namespace, name)

    def pod_ready(self, namespace: str, name: str) -> bool:
        pod = self.pod(namespace, name)
        status = pod.get("status", {})
        return status.get("phase") == "Running" and all(
            c.get("ready") for c in status.get("containerStatuses", [{"ready": False}])
        )

    def wait_ready(self, namespace: str, names: list[str], timeout: float = 180) -> dict[str, dict[str, Any]]:
        wait_until(
            lambda: all(self.pod_ready(namespace, n) for n in names),
            f"pods {names} running and ready on {NODE_NAME}",
            timeout=timeout,
            interval=0.5,
            describe=lambda: (
                self.kube.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
            ),
        )
        return {n: self.pod(namespace, n) for n in names}

    def exec(self, namespace: str, pod: str, *argv: str, timeout: float = 60) -> str:
        ran = self.node.exec(namespace, pod, *argv, timeout=timeout)
        if ran.returncode != 0:
            raise AssertionError(
                f"{argv} in {namespace}/{pod} exited {ran.returncode}: {ran.stdout}{ran.stderr}"
            )
        return ran.stdout

    def probe(self, namespace: str, pod: str, targets: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Connects from inside the pod's container to every target at once."""
        out = self.exec(
            namespace,
            pod,
            "python3",
            "-c",
            PROBE_SCRIPT,
            json.dumps(targets),
            str(PROBE_TIMEOUT_S),
            timeout=60,
        )
        return dict(json.loads(out))
