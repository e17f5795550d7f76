"""The real node for the tests of this package: one for the package (it takes about a minute to
start), stopped after its last test, with the machine put back as it was (checked: a difference is
an error of the last test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.cluster import NodeCluster
from tests.testenv.availability import require_built, unavailable
from tests.testenv.env import TestEnv
from tests.testenv.host import HostSnapshot
from tests.testenv.node import harness_image_for_sources, node_missing_reason


@pytest.fixture(scope="package")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    require_built("kubernetes", "etcd", "s3")
    reason = node_missing_reason()
    if reason:
        unavailable(reason)
    image, reason = harness_image_for_sources()
    if image is None:
        unavailable(reason or "the harness image is not built")
    env = TestEnv(tmp_path_factory.mktemp("node-env"), node=True, harness_image=image)
    try:
        env.start()
        yield NodeCluster(env, image.reference.removeprefix("docker.io/library/"))
    finally:
        env.stop()
    # What the tests did on the node (network namespaces, rules, mounts) went with it.
    assert env.node is not None and env.node.before is not None
    assert env.node.before.differences(HostSnapshot.take(), own_paths=(str(env.run_dir),)) == []
