"""The operator as the chart runs it (`python -m belay.controller`), started against the test
control plane, plus small waiting helpers for the end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from belay.controller.settings import ETCD_CREDENTIALS_MOUNT, SETTINGS_ENV, OperatorSettings
from tests.testenv.kube import ControlPlane
from tests.testenv.network import free_port
from tests.testenv.polling import wait_until
from tests.testenv.processes import dies_with_this_process

T = TypeVar("T")


class OperatorProcess:
    def __init__(
        self,
        kube: ControlPlane,
        namespace: str,
        settings: OperatorSettings,
        log_path: Path,
        more_namespaces: Sequence[str] = (),
        etcd_credentials: Path | None = None,
    ) -> None:
        """`etcd_credentials`: a folder laid out as the fleet etcd's TLS Secret, which the operator
        finds where a pod mounts that Secret (`settings.etcd_credentials_secret`)."""
        self.kube = kube
        self.etcd_credentials = etcd_credentials
        self.namespace = namespace
        self.more_namespaces = tuple(more_namespaces)  # watched too
        self.settings = settings
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.follow_interval_s = 0.5

    def start(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kube.kubeconfig),
            "BELAY_KUBECONFIG": str(self.kube.kubeconfig),
            SETTINGS_ENV: self.settings.model_dump_json(),
            "BELAY_FOLLOW_INTERVAL_S": str(self.follow_interval_s),
        }
        argv = [
            sys.executable,
            "-m",
            "belay.controller",
            *(
                arg
                for namespace in (self.namespace, *self.more_namespaces)
                for arg in ("--namespace", namespace)
            ),
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
        ]
        if self.etcd_credentials is not None:
            argv = [*with_etcd_credentials(self.etcd_credentials, self.log_path.parent / "etcd-mount"), *argv]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=dies_with_this_process(),
            )
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The operator frozen (SIGSTOP) meanwhile, as one that is down: it writes nothing, and
        once it goes on, it catches up with what changed."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.process.pid, signal.SIGCONT)


def with_etcd_credentials(credentials: Path, scratch: Path) -> list[str]:
    """The command that runs the next with `credentials` at ETCD_CREDENTIALS_MOUNT, where a pod
    mounts the fleet etcd's TLS Secret: /etc overlaid, in a mount namespace of the command's own
    (the machine's /etc is untouched)."""
    relative = Path(ETCD_CREDENTIALS_MOUNT).relative_to("/etc")
    scratch.mkdir(parents=True, exist_ok=True)
    script = (
        'mount -t tmpfs tmpfs "$2" && mkdir -p "$2/upper/$3" "$2/work" && cp "$1"/* "$2/upper/$3/" '
        '&& mount -t overlay overlay -o "lowerdir=/etc,upperdir=$2/upper,workdir=$2/work" /etc '
        '&& shift 3 && exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(credentials), str(scratch), str(relative)]  # fmt: skip


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    timeout: float = 180.0,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll until probe returns something truthy, at the pace of the operator's tests; the deadline
    only turns a hang into a failure."""
    return cast(T, wait_until(probe, what, timeout=timeout, interval=0.3, describe=describe))


def kubectl_json(kube: ControlPlane, *args: str) -> dict[str, Any]:
    result = kube.kubectl(*args, "-o", "json", check=False)
    return dict(json.loads(result.stdout)) if result.returncode == 0 else {}


def agentsession_status(kube: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json(kube, "get", "agentsession", "-n", namespace, name).get("status") or {}


def wait_for_session_end(
    kube: ControlPlane,
    namespace: str,
    name: str,
    timeout: float,
    describe: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """The status once the session has Succeeded or Failed."""
    return wait_for(
        lambda: (
            (s := agentsession_status(kube, namespace, name)).get("phase") in ("Succeeded", "Failed") and s
        ),
        "the session to end",
        timeout=timeout,
        describe=describe,
    )
