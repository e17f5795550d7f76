"""pytest fixtures for the real components. Each is started at most once per test run, only when a
test asks for it, on free loopback ports, and always stopped (fixture teardown, then an atexit and
SIGTERM guard, then the kernel's parent-death signal if the test process is killed outright).

    etcd_endpoint  "http://127.0.0.1:PORT", a single member shared by the run (use your own prefix)
    etcd_cluster   a fresh three-member cluster per test: .endpoints, .member_names,
                   .stop_member(name), .start_member(name), .kill_member(name), .leader_name()
    s3_server      .endpoint_url, .access_key, .secret_key, .region, .stop(), .start(), .client();
                   shared by the run, and started again before the next test if one left it stopped
    kube           .kubeconfig, .server, .version, .kubectl(*args, input=None, check=True)
    helm_bin       Path of the built helm
    kstatus_bin, argocd_health_bin, kubeconform_bin
                   Paths of the platform's tools that judge the operator's objects
    harness_image  .tag, .run(*command), .engine.docker(*args): the Belay image in the project's own
                   Docker engine, which runs for the module that asks for it (one engine per data
                   root, held under a lock, so other runs wait only that long)

A component that is not built skips the test with the reason, or fails it when CI=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testenv.availability import require_built, unavailable, wait_for_builds_under_way
from tests.testenv.binaries import component
from tests.testenv.docker_engine import (
    DockerEngine,
    HarnessImage,
    built_image_tag,
    image_missing_reason,
)
from tests.testenv.etcd import EtcdCluster, EtcdServer
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server


@pytest.fixture(scope="session")
def _testenv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("testenv")


@pytest.fixture(scope="session")
def etcd_endpoint(_testenv_dir: Path) -> Iterator[str]:
    require_built("etcd")
    server = EtcdServer(_testenv_dir / "etcd")
    try:
        server.start()
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    require_built("etcd")
    # TLS with client certificates, as a shared etcd is reached (docs/stores.md).
    cluster = EtcdCluster(tmp_path / "etcd-cluster", tls=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


_session_s3_servers: list[S3Server] = []


@pytest.fixture(scope="session")
def s3_server(_testenv_dir: Path) -> Iterator[S3Server]:
    require_built("s3")
    server = S3Server(_testenv_dir / "s3")
    try:
        server.start()
        _session_s3_servers.append(server)
        yield server
    finally:
        if server in _session_s3_servers:
            _session_s3_servers.remove(server)
        server.stop()


# The fixtures that start a built component, and the fixture of the real node (tests/node).
COMPONENT_FIXTURES = frozenset(
    {
        "etcd_endpoint",
        "etcd_cluster",
        "s3_server",
        "kube",
        "helm_bin",
        "kstatus_bin",
        "argocd_health_bin",
        "kubeconform_bin",
        "harness_image",
    }
)
NODE_FIXTURES = frozenset({"node_cluster"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a built component is marked `testenv` (and for the node `node`), marked
    by hand or not: `make test` (hack/run-tests.sh) runs the tests while the components may still
    be building, and a `testenv` test waits for them. Then the files are ordered: those that hold
    such a test after the others, and in each part those that hold a `slow` test first, the order
    otherwise kept (xdist hands out files with more tests first, ties in this order)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & (COMPONENT_FIXTURES | NODE_FIXTURES) and not item.get_closest_marker("testenv"):
            item.add_marker(pytest.mark.testenv)
        if used & NODE_FIXTURES and not item.get_closest_marker("node"):
            item.add_marker(pytest.mark.node)
    needs_builds = {item.path for item in items if item.get_closest_marker("testenv")}
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path in needs_builds, item.path not in slow))  # stable


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start anything
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("testenv"):
        wait_for_builds_under_way()
    _restart_stopped_s3_servers()


def _restart_stopped_s3_servers() -> None:
    # A test that stops the S3 server to cut the object store may fail before starting it again;
    # the next test still finds it running, on the same port and with the same data.
    for server in _session_s3_servers:
        if not server.process.running():
            server.start()


@pytest.fixture(scope="session")
def kube(_testenv_dir: Path) -> Iterator[ControlPlane]:
    require_built("kubernetes", "etcd")
    control_plane = ControlPlane(_testenv_dir / "kube")
    try:
        control_plane.start()
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    require_built("helm")
    return component("helm").path("helm")


@pytest.fixture(scope="session")
def kstatus_bin() -> Path:
    require_built("kstatus")
    return component("kstatus").path("kstatus")


@pytest.fixture(scope="session")
def argocd_health_bin() -> Path:
    require_built("argocd-health")
    return component("argocd-health").path("argocd-health")


@pytest.fixture(scope="session")
def kubeconform_bin() -> Path:
    require_built("kubeconform")
    return component("kubeconform").path("kubeconform")


@pytest.fixture(scope="module")
def harness_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HarnessImage]:
    reason = image_missing_reason()
    if reason:
        unavailable(reason)
    engine = DockerEngine(tmp_path_factory.mktemp("docker"))
    try:
        engine.start()
        # Read once the engine is ours: a build that held it meanwhile may have made a newer tag.
        tag = built_image_tag()
        if tag is None or engine.docker("image", "inspect", tag, check=False).returncode != 0:
            unavailable(
                f"the harness image {tag} is not in {engine.socket.parent}; "
                "run `bash hack/build-harness-image.sh`"
            )
        yield HarnessImage(tag, engine)
    finally:
        engine.stop()
