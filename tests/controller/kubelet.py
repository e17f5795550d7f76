"""A stand-in for the kubelet (and for the cluster network) of the test control plane, which has no
node: it runs each pod of a namespace as a local process and reports the pod's status.

What it does for a pod:
- volumes: an emptyDir is a fresh directory, a Secret volume is the Secret's keys written as
  files; a command argument or an env value that starts with a mount path is rewritten to the
  directory standing in for it;
- the service account: a projected volume (the one admission adds to a pod that mounts its token)
  gets what a kubelet writes there: a token from the TokenRequest API for the pod's service
  account, bound to the pod; `ca.crt` from the `kube-root-ca.crt` ConfigMap; the namespace.
  Programs read it at its fixed path (/var/run/secrets/kubernetes.io/serviceaccount), not from an
  argument, so the process runs in a private mount namespace (`unshare`, needs root) where the
  volume's directory is bind-mounted at that path, for that process only.
  KUBERNETES_SERVICE_HOST/PORT name the apiserver's loopback address (which its serving certificate
  covers), as kube-proxy would route the `kubernetes` Service;
- env: values, `fieldRef`s of the pod, Secret keys (an `optional` key that is missing, or whose
  Secret is, leaves the variable unset, as a kubelet does), and `envFrom` Secrets and ConfigMaps;
- the container's `python` is this interpreter (the image would have the same package installed);
- network: every pod shares 127.0.0.1, so each declared container port gets a free loopback port
  (an argument naming the port, alone or as `--flag=PORT`, and `0.0.0.0`, are rewritten), and a
  Service URL in an env value (`http://<service>.<namespace>.svc:<port>`) is rewritten to the port
  of a pod the Service selects by its labels as they are now, as cluster DNS and kube-proxy would
  route it; NetworkPolicies are not enforced (tests/node does that on a real node);
- processes: each pod runs in a PID namespace of its own, its command the child of a small init
  (`pod_init.py`, as `docker run --init` gives a container), so every process the pod starts dies
  with it; and its first process gets the parent-death signal, so a pod dies with the test run
  even when pytest is killed outright;
- status: Running once started, then Succeeded or Failed with the exit code;
- deletion, as a kubelet does it: a pod deleted with a grace period gets SIGTERM (its init passes
  it on to the command) and, if still running when the period (`deletionGracePeriodSeconds`) is
  over, SIGKILL; the object is removed once the process is gone. A pod deleted without a grace
  period (`--grace-period=0 --force`, a lost node) is killed at once. The apiserver deletes an
  unbound pod at once whatever its grace period, so the stand-in registers a Node of its own
  (unschedulable, no capacity, its Ready condition renewed) and binds every pod it runs to it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

from belay.lifetime import descendants, die_with_parent
from tests.testenv.network import free_port

SERVICE_URL = re.compile(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc:(\d+)")
FLAG_WITH_VALUE = re.compile(r"(--?[A-Za-z0-9-]+=)(.*)")
POLL_S = 0.3
# How often the Node's Ready condition is renewed (the node lifecycle controller waits 40 s).
HEARTBEAT_S = 10.0
POD_INIT = Path(__file__).with_name("pod_init.py")
# A PID namespace (and a mount namespace with its own /proc) per pod; --kill-child: the namespace
# dies with unshare, which itself dies with the test run (parent-death signal).
POD_NAMESPACES = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
# Runs the rest of its arguments after bind-mounting each `source target` pair before `--`. Meant
# for a fresh private mount namespace: the mounts are seen by that process and its children only.
# (The empty mount point itself is made on the host: it is a directory no other program uses.)
BIND_AND_EXEC = (
    'while [ "$1" != -- ]; do mkdir -p "$2" && mount --bind "$1" "$2" || exit 126; shift 2; done; '
    'shift; exec "$@"'
)
# The pod fields a `fieldRef` may name, as a kubelet resolves them.
FIELD_PATHS: dict[str, Callable[[Any], str | None]] = {
    "metadata.name": lambda pod: pod.metadata.name,
    "metadata.namespace": lambda pod: pod.metadata.namespace,
    "metadata.uid": lambda pod: pod.metadata.uid,
    "spec.serviceAccountName": lambda pod: pod.spec.service_account_name,
    "spec.nodeName": lambda pod: pod.spec.node_name,
    "status.podIP": lambda pod: "127.0.0.1",
    "status.hostIP": lambda pod: "127.0.0.1",
}


class Unroutable(Exception):
    pass


@dataclass
class LocalPod:
    name: str
    uid: str
    labels: dict[str, str]
    process: subprocess.Popen[bytes]
    root: Path
    ports: dict[str, int]  # container port name or number -> loopback port
    reported_exit: bool = False
    log: Path = field(default_factory=Path)
    env: dict[str, str] = field(default_factory=dict)  # the environment its process started with
    kill_at: float | None = None  # when deleted: time.monotonic() at which SIGKILL follows SIGTERM


class LocalKubelet:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        work_dir: Path,
        extra_env: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        # Where the `kubernetes` Service leads: the apiserver itself, on loopback.
        apiserver = urlsplit(api_client.configuration.host)
        self.apiserver_host, self.apiserver_port = apiserver.hostname or "", str(apiserver.port or 443)
        self.namespace = namespace
        self.work_dir = work_dir
        self.extra_env = extra_env or (lambda pod: {})
        self.pods: dict[str, LocalPod] = {}
        self.started_names: list[str] = []
        self.started_pods: dict[str, LocalPod] = {}  # every pod started, deleted ones included
        # Pods deleted from the API, by name: the exit status of their process (negative: killed).
        self.exit_codes: dict[str, int | None] = {}
        self.node_name = f"local-kubelet-{namespace}"
        self._heartbeat_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-kubelet", daemon=True)
        self._lock = threading.Lock()
        self.errors: list[str] = []

    # ---- lifecycle

    def __enter__(self) -> LocalKubelet:
        self._register_node()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            for pod in list(self.pods.values()):
                self._kill(pod)
            self.pods.clear()
        with contextlib.suppress(client.ApiException):
            self.core.delete_node(self.node_name)

    # ---- the Node: pods are bound to it, so the apiserver deletes them gracefully

    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": {"belay.dev/local-kubelet": "true"}},
            # No capacity: the scheduler never picks it; this stand-in binds the pods it runs.
            "spec": {"unschedulable": True},
        }
        with contextlib.suppress(client.ApiException):
            self.core.delete_node(self.node_name)  # left by a run killed outright
        self.core.create_node(node)
        self._heartbeat()

    def _heartbeat(self) -> None:
        now = datetime.now(UTC).isoformat()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "the local kubelet stand-in runs pods as processes",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.core.patch_node_status(self.node_name, {"status": {"conditions": [ready]}})
        self._heartbeat_at = time.monotonic()

    def _bind(self, pod: Any) -> None:
        """Bind the pod to this node, as the scheduler would: a bound pod is deleted gracefully
        (an unbound one at once, whatever its grace period)."""
        if pod.spec.node_name:
            return
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.metadata.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        with contextlib.suppress(client.ApiException):  # bound meanwhile: it runs here all the same
            self.core.create_namespaced_pod_binding(
                pod.metadata.name, self.namespace, binding, _preload_content=False
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if time.monotonic() - self._heartbeat_at > HEARTBEAT_S:
                    self._heartbeat()
                self.sync()
            except Exception as error:  # the apiserver is busy; the next poll catches up
                self.errors.append(repr(error))
            self._stop.wait(POLL_S)

    # ---- one sync

    def sync(self) -> None:
        with self._lock:
            listed = {p.metadata.name: p for p in self.core.list_namespaced_pod(self.namespace).items}
            for name, local in list(self.pods.items()):
                pod = listed.get(name)
                if pod is not None and pod.metadata.uid == local.uid and pod.metadata.deletion_timestamp:
                    if not self._terminated(local, pod.metadata.deletion_grace_period_seconds or 0):
                        continue  # still stopping within its grace period
                elif pod is not None and pod.metadata.uid == local.uid:
                    # Services follow a pod's labels as they change (a pool pod claimed for a session).
                    local.labels = dict(pod.metadata.labels or {})
                    continue
                self._kill(local)
                self.exit_codes[name] = local.process.poll()
                del self.pods[name]
                if pod is not None and pod.metadata.deletion_timestamp is not None:
                    with contextlib.suppress(client.ApiException):
                        self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            # Pods that serve ports first: others may name them through a Service.
            fresh = [
                p for n, p in listed.items() if n not in self.pods and p.metadata.deletion_timestamp is None
            ]
            fresh = [p for p in fresh if (p.status.phase or "Pending") == "Pending"]
            fresh.sort(key=lambda p: not any(c.ports for c in p.spec.containers))
            for pod in fresh:
                self._start(pod)
            for local in self.pods.values():
                code = local.process.poll()
                if code is not None and not local.reported_exit:
                    local.reported_exit = True
                    self._report(local.name, "Succeeded" if code == 0 else "Failed", code)

    def _report(self, name: str, phase: str, exit_code: int | None = None) -> None:
        status: dict[str, Any] = {"phase": phase, "podIP": "127.0.0.1"}
        if phase == "Running":
            status["startTime"] = datetime.now(UTC).isoformat()
        if exit_code is not None:
            status["message"] = f"exit code {exit_code}"
        with contextlib.suppress(client.ApiException):
            self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def _terminated(self, local: LocalPod, grace_s: int) -> bool:
        """A deleted pod: SIGTERM first, SIGKILL once its grace period is over. True when its
        process is gone (or must be killed now)."""
        if local.process.poll() is not None:
            return True
        now = time.monotonic()
        if local.kill_at is None:
            local.kill_at = now + grace_s
            if grace_s > 0:
                self._signal_init(local, signal.SIGTERM)
        return now >= local.kill_at

    def _signal_init(self, local: LocalPod, number: int) -> None:
        """Signal the pod's first process (its init), as a container runtime signals a
        container's: from outside, that is unshare's child."""
        for pid in descendants(local.process.pid)[:1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    def _kill(self, local: LocalPod) -> None:
        if local.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(local.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            local.process.wait(timeout=10)

    # ---- starting a pod

    def _volumes(self, pod: Any, root: Path) -> dict[str, Path]:
        paths = {}
        for volume in pod.spec.volumes or []:
            path = root / "volumes" / volume.name
            path.mkdir(parents=True)
            if volume.secret is not None:
                secret = self.core.read_namespaced_secret(volume.secret.secret_name, self.namespace)
                for key, value in (secret.data or {}).items():
                    (path / key).write_bytes(base64.b64decode(value))
                    (path / key).chmod(0o400)
            if volume.projected is not None:
                for source in volume.projected.sources:
                    for name, content in self._projected(pod, source).items():
                        (path / name).write_bytes(content)
                        (path / name).chmod(0o444)
            paths[volume.name] = path
        return paths

    def _projected(self, pod: Any, source: Any) -> dict[str, bytes]:
        """The files of one projected volume source, by their path in the volume."""
        if source.service_account_token is not None:
            wanted = source.service_account_token
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [wanted.audience] if wanted.audience else [],
                    "expirationSeconds": wanted.expiration_seconds or 3600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.metadata.name,
                        "uid": pod.metadata.uid,
                    },
                },
            }
            minted = self.core.create_namespaced_service_account_token(
                pod.spec.service_account_name or "default", self.namespace, request
            )
            return {wanted.path: minted.status.token.encode()}
        if source.config_map is not None:
            config_map = self.core.read_namespaced_config_map(source.config_map.name, self.namespace)
            data = config_map.data or {}
            items = source.config_map.items or [client.V1KeyToPath(key=k, path=k) for k in data]
            return {item.path: data[item.key].encode() for item in items}
        if source.downward_api is not None:
            return {
                item.path: (FIELD_PATHS[item.field_ref.field_path](pod) or "").encode()
                for item in source.downward_api.items or []
            }
        if source.secret is not None:
            secret = self.core.read_namespaced_secret(source.secret.name, self.namespace)
            data = secret.data or {}
            items = source.secret.items or [client.V1KeyToPath(key=k, path=k) for k in data]
            return {item.path: base64.b64decode(data[item.key]) for item in items}
        raise ValueError(f"unsupported projected volume source in pod {pod.metadata.name}: {source}")

    def _env_from(self, container: Any) -> dict[str, str]:
        values: dict[str, str] = {}
        for source in container.env_from or []:
            if source.secret_ref is not None:
                secret = self.core.read_namespaced_secret(source.secret_ref.name, self.namespace)
                found = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
            else:
                config_map = self.core.read_namespaced_config_map(source.config_map_ref.name, self.namespace)
                found = dict(config_map.data or {})
            values.update({(source.prefix or "") + k: v for k, v in found.items()})
        return values

    def _env_value(self, pod: Any, item: Any) -> str | None:
        """The variable's value; None when it is left unset (an optional key that is missing)."""
        if item.value_from is None:
            return str(item.value or "")
        if item.value_from.field_ref is not None:
            return FIELD_PATHS[item.value_from.field_ref.field_path](pod) or ""
        if item.value_from.secret_key_ref is not None:
            ref = item.value_from.secret_key_ref
            try:
                data = self.core.read_namespaced_secret(ref.name, self.namespace).data or {}
            except client.ApiException as error:
                if error.status != 404:
                    raise
                data = {}
            if ref.key in data:
                return base64.b64decode(data[ref.key]).decode()
            if ref.optional:  # as a kubelet does: the variable is not set
                return None
            raise ValueError(
                f"pod {pod.metadata.name}: env {item.name} names key {ref.key} of Secret {ref.name}, "
                "which does not exist (and is not optional)"
            )
        raise ValueError(f"unsupported env source for {item.name} in pod {pod.metadata.name}")

    def _service_target(self, service: str, port: int) -> int | None:
        try:
            found = self.core.read_namespaced_service(service, self.namespace)
        except client.ApiException:
            return None
        selector = found.spec.selector or {}
        target = next((p.target_port for p in found.spec.ports if p.port == port), None)
        for local in self.pods.values():
            if all(local.labels.get(k) == v for k, v in selector.items()):
                return local.ports.get(str(target))
        return None

    def _route(self, value: str) -> str:
        """Service URLs rewritten to the loopback port of a selected pod. Raises Unroutable when a
        Service selects no started pod yet: the pod waits for the next sync, as it would wait for
        DNS and endpoints."""

        def replace(match: re.Match[str]) -> str:
            service, namespace, port = match.group(1), match.group(2), int(match.group(3))
            if namespace != self.namespace:
                return match.group(0)
            target = self._service_target(service, port)
            if target is None:
                raise Unroutable(match.group(0))
            return f"http://127.0.0.1:{target}"

        return SERVICE_URL.sub(replace, value)

    def _start(self, pod: Any) -> None:
        (container,) = pod.spec.containers
        try:
            for item in container.env or []:
                self._route(item.value or "")
        except Unroutable:
            return
        self._bind(pod)
        root = self.work_dir / f"{pod.metadata.name}-{pod.metadata.uid[:8]}"
        if root.exists():
            shutil.rmtree(root)
        volumes = self._volumes(pod, root)
        projected = {v.name for v in pod.spec.volumes or [] if v.projected is not None}
        mounted = container.volume_mounts or []
        bound = [(volumes[m.name], m.mount_path) for m in mounted if m.name in projected]
        mounts = sorted(
            ((m.mount_path, volumes[m.name]) for m in mounted if m.name not in projected),
            key=lambda item: -len(item[0]),
        )
        ports: dict[str, int] = {}
        for port in container.ports or []:
            local_port = free_port()
            ports[str(port.container_port)] = local_port
            if port.name:
                ports[port.name] = local_port

        def local_path(value: str) -> str:
            for mount_path, host in mounts:
                if value == mount_path or value.startswith(mount_path + "/"):
                    return str(host) + value[len(mount_path) :]
            return value

        def local_port(value: str) -> str:
            flag = FLAG_WITH_VALUE.fullmatch(value)
            if flag:
                return flag.group(1) + local_port(flag.group(2))
            return str(ports.get(value, value)) if value.isdigit() else value

        argv = [local_port(local_path(a)) for a in container.command + (container.args or [])]
        argv = ["127.0.0.1" if a == "0.0.0.0" else a for a in argv]
        if argv[0] == "python":
            argv[0] = sys.executable
        if bound:
            pairs = [str(part) for source, target in bound for part in (source, target)]
            argv = ["sh", "-c", BIND_AND_EXEC, "sh", *pairs, "--", *argv]
        argv = [*POD_NAMESPACES, sys.executable, str(POD_INIT), *argv]
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "HOSTNAME": pod.metadata.name,
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": self.apiserver_host,
            "KUBERNETES_SERVICE_PORT": self.apiserver_port,
        }
        env.update(self._env_from(container))
        for item in container.env or []:
            value = self._env_value(pod, item)
            if value is not None:
                env[item.name] = self._route(local_path(value))
        env.update(self.extra_env(pod.to_dict()))
        log = root / "log"
        with log.open("wb") as out:
            # The kubelet's thread forks and lives as long as the pods: the parent-death signal
            # comes when it (or the whole test run) ends.
            process = subprocess.Popen(
                argv,
                env=env,
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        self.pods[pod.metadata.name] = self.started_pods[pod.metadata.name] = LocalPod(
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            labels=dict(pod.metadata.labels or {}),
            process=process,
            root=root,
            ports=ports,
            log=log,
            env=env,
        )
        self.started_names.append(pod.metadata.name)
        self._report(pod.metadata.name, "Running")

    # ---- fault injection

    def kill(self, name: str) -> None:
        """The pod's process dies (the node lost it); the pod object is left for the API to show."""
        with self._lock:
            self._kill(self.pods[name])

    def send_signal(self, name: str, number: int) -> None:
        """Send a signal to every process of the pod (SIGCONT to a harness stopped at a fault point)."""
        with self._lock:
            for pid in [self.pods[name].process.pid, *descendants(self.pods[name].process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, number)

    def log_of(self, name: str) -> str:
        local = self.pods.get(name)
        return local.log.read_text(errors="replace") if local else ""
