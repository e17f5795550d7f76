"""The project's own Docker engine (hack/docker-engine.sh: dockerd with everything under
$BELAY_CACHE/docker, on its own socket) and the Belay image hack/build-harness-image.sh builds in it.

One engine runs per data root, so whoever starts it holds $BELAY_CACHE/docker/engine.lock until it
has stopped it; a build or another test run waits meanwhile.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import IO

from tests.testenv.binaries import REPO_ROOT, cache_dir
from tests.testenv.network import wait_ready
from tests.testenv.polling import wait_until
from tests.testenv.processes import ManagedProcess

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-harness-image.sh"
ENGINE_SCRIPT = REPO_ROOT / "hack" / "docker-engine.sh"
# The client docker.io installs beside dockerd (another docker on PATH may be a newer client).
DOCKER_CLI = Path(os.environ.get("BELAY_DOCKER_CLI", "/usr/bin/docker"))
READY_TIMEOUT = 60.0
# A cold image build holds the lock for a few minutes; a test run for about a minute.
LOCK_TIMEOUT = 1800.0
# Every container a test starts carries this label, so stopping the engine removes any left over.
TEST_LABEL = "dev.belay.test"


def docker_dir() -> Path:
    return cache_dir() / "docker"


def expected_image_tag() -> str:
    """The tag the current sources give, computed by the build script itself (one definition)."""
    completed = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-tag"], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip()


def built_image_tag() -> str | None:
    try:
        return (docker_dir() / "harness-image.tag").read_text().strip()
    except FileNotFoundError:
        return None


def image_missing_reason() -> str | None:
    """None when the image of the current sources is built and its engine can run here."""
    if os.geteuid() != 0:
        return "the harness image tests need root: their Docker engine (dockerd) runs as root"
    if shutil.which("dockerd") is None or not os.access(DOCKER_CLI, os.X_OK):
        return "Debian's docker.io is not installed; run `bash hack/build-harness-image.sh`"
    expected, built = expected_image_tag(), built_image_tag()
    if built != expected:
        return (
            f"the harness image {expected} is not built (last built: {built or 'none'}); "
            "run `bash hack/build-harness-image.sh` or `make testenv-build`"
        )
    return None


class DockerEngine:
    def __init__(self, run_dir: Path) -> None:
        self.socket = docker_dir() / "docker.sock"
        self.process = ManagedProcess("dockerd", ["bash", ENGINE_SCRIPT], run_dir / "dockerd.log")
        self._lock: IO[bytes] | None = None

    def start(self) -> None:
        self._take_lock()
        try:
            self.process.start()
            wait_ready(
                self.is_ready,
                f"Docker engine on {self.socket}",
                READY_TIMEOUT,
                still_starting=self.process.running,
                describe_failure=self.process.log_tail,
            )
        except BaseException:
            self.stop()
            raise

    def _take_lock(self) -> None:
        docker_dir().mkdir(parents=True, exist_ok=True)
        self._lock = (docker_dir() / "engine.lock").open("wb")
        lock = self._lock

        def taken() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_until(taken, f"the Docker engine in {docker_dir()} to be free", timeout=LOCK_TIMEOUT, interval=1)

    def is_ready(self) -> bool:
        return self.docker("version", check=False, timeout=10).returncode == 0

    def docker(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [str(DOCKER_CLI), "--host", f"unix://{self.socket}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and completed.returncode != 0:
            raise RuntimeError(
                f"docker {' '.join(args)} exited {completed.returncode}: {completed.stderr.strip()}"
            )
        return completed

    def remove_test_containers(self) -> None:
        listed = self.docker("ps", "--all", "--quiet", "--filter", f"label={TEST_LABEL}", check=False)
        ids = listed.stdout.split()
        if ids:
            self.docker("rm", "--force", *ids, check=False)

    def stop(self) -> None:
        try:
            if self.process.running():
                self.remove_test_containers()
            # dockerd stops its containerd on SIGTERM; give it the time a clean shutdown takes.
            self.process.stop(timeout=30)
            if self.process.pid is not None:
                # What even a clean stop leaves mounted under the cache (see the script).
                subprocess.run(["bash", str(ENGINE_SCRIPT), "--unmount-leftovers"], check=False, timeout=60)
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None


class HarnessImage:
    """The built Belay image and the running engine that has it."""

    def __init__(self, tag: str, engine: DockerEngine) -> None:
        self.tag = tag
        self.engine = engine

    def run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`docker run --rm` of the image with this command (its own user, no network); output
        captured, exit status not checked."""
        return self.engine.docker(
            "run",
            "--rm",
            "--network",
            "none",
            "--label",
            TEST_LABEL,
            self.tag,
            *command,
            check=False,
            timeout=timeout,
        )
