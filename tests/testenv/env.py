"""The whole environment at once: what `python -m tests.testenv up` starts and `down` stops, and
what the warm-start benchmark times."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tests.testenv.binaries import component
from tests.testenv.etcd import EtcdServer
from tests.testenv.kube import ControlPlane
from tests.testenv.processes import ManagedProcess, pid_alive, pid_cmdline, pid_start_ticks, stop_group
from tests.testenv.s3 import S3Server
from tests.testenv.state import ProcessRecord, S3Endpoint, TestEnvState

REQUIRED = ("kubernetes", "etcd", "s3")


def missing_components() -> list[str]:
    """Reasons, one per component that `up` needs and is not built (helm is optional for `up`)."""
    return [r for r in (component(n).missing_reason() for n in REQUIRED) if r]


class TestEnv:
    """etcd for the event store, the S3 server and the control plane (with its own etcd)."""

    __test__ = False

    def __init__(self, run_dir: Path, detached: bool = False) -> None:
        self.run_dir = run_dir
        self.etcd = EtcdServer(run_dir / "etcd", detached=detached)
        self.s3 = S3Server(run_dir / "s3", detached=detached)
        self.kube = ControlPlane(run_dir / "kube", detached=detached)

    def processes(self) -> list[ManagedProcess]:
        started = [self.etcd.member.process, self.s3.process, self.kube.etcd.member.process]
        return [p for p in started if p is not None] + list(self.kube.processes.values())

    def start(self) -> None:
        """Starts everything; on any failure stops what already runs and re-raises."""
        try:
            self.etcd.start()
            self.s3.start()
            self.kube.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.kube.stop()
        self.s3.stop()
        self.etcd.stop()

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
    Clients first, the stores last, the reverse of start."""
    stopped = []
    for record in reversed(state.processes):
        if still_ours(record):
            stop_group(record.pid)
            stopped.append(record.pid)
    return stopped


def remove_run_dir(state: TestEnvState) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(state.run_dir)
