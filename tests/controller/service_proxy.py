"""Routing a Service at connection time, as kube-proxy does, for the local kubelet's pods.

The local kubelet rewrites a Service URL to one pod's loopback port when a pod starts. A sandbox
pod replaced while its harness runs gets another port, so a harness that must reach the
replacement through the same address goes through a `ServiceProxy` instead: every new connection
reads the Service's selector from the API and forwards to the port of a running pod it selects.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from kubernetes import client

from tests.controller.kubelet import LocalKubelet


class ServiceProxy:
    def __init__(self, kubelet: LocalKubelet, api_client: client.ApiClient, service: str, port: int) -> None:
        self.kubelet = kubelet
        self.core = client.CoreV1Api(api_client)
        self.service = service
        self.port = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"proxy-{service}", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> ServiceProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._listener.close()
        self._thread.join(timeout=10)

    def target(self) -> int | None:
        """The loopback port of a running pod the Service selects now, if any."""
        try:
            found: Any = self.core.read_namespaced_service(self.service, self.kubelet.namespace)
        except client.ApiException:
            return None
        selector = found.spec.selector or {}
        wanted = next((str(p.target_port) for p in found.spec.ports if p.port == self.port), None)
        for pod in list(self.kubelet.pods.values()):
            if pod.process.poll() is None and all(pod.labels.get(k) == v for k, v in selector.items()):
                return pod.ports.get(wanted or "")
        return None

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(downstream,), daemon=True).start()

    def _forward(self, downstream: socket.socket) -> None:
        port = self.target()
        if port is None:
            downstream.close()  # no endpoint: the connection is refused, as with no ready pod
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port))
        except OSError:
            downstream.close()
            return
        pipes = [
            threading.Thread(target=_pipe, args=(downstream, upstream), daemon=True),
            threading.Thread(target=_pipe, args=(upstream, downstream), daemon=True),
        ]
        for pipe in pipes:
            pipe.start()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    """Bytes one way until either side closes; then both close, as a broken connection does."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
