"""What `python -m tests.testenv up` leaves behind for other shells: endpoints, credentials and the
processes to stop, in $BELAY_CACHE/run/testenv.json."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from tests.testenv.binaries import cache_dir


def run_root() -> Path:
    """$BELAY_CACHE/run, or $BELAY_TESTENV_RUN (the lifecycle test uses its own, so it never touches
    an environment a person brought up)."""
    override = os.environ.get("BELAY_TESTENV_RUN")
    return Path(override) if override else cache_dir() / "run"


def state_path() -> Path:
    return run_root() / "testenv.json"


class ProcessRecord(BaseModel):
    name: str
    pid: int  # also the process group id: every component is started in a new session
    # Both checked against /proc before stopping, so a reused pid is spared.
    executable: str
    start_ticks: int
    log: str


class S3Endpoint(BaseModel):
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str


class NodeState(BaseModel):
    """What `down` needs to stop a node: the runtime's socket (to remove its pods) and the folders
    holding its mounts. The machine's state before it started is in the node's ownership file."""

    name: str
    run_dir: str
    containerd_socket: str
    kubelet_root: str


class TestEnvState(BaseModel):
    __test__ = False  # not a pytest test class, despite the name

    run_dir: str
    kubeconfig: str
    server: str
    kube_version: str
    kubectl: str
    helm: str | None
    etcd_endpoint: str
    s3: S3Endpoint
    processes: list[ProcessRecord]
    node: NodeState | None = None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(self.model_dump_json(indent=2) + "\n")
        partial.replace(path)

    @classmethod
    def read(cls, path: Path) -> TestEnvState:
        return cls.model_validate_json(path.read_text())
