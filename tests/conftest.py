"""Shared pytest setup: the real test environment's fixtures (etcd_endpoint, etcd_cluster,
s3_server, kube, helm_bin, harness_image), see tests/testenv/fixtures.py."""

import os
from collections.abc import Iterator

import pytest

# Before anything imports grpc: see belay/__init__.py (a child started by fork, for its
# parent-death signal, must not run gRPC's fork handlers).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ["tests.testenv.fixtures"]

# A session's local stand-in outlives the `belay` process that started it (as a provider would) and
# stops this long after that process is gone: a test stops the ones it knows of, and one it left behind
# goes soon (`belay.local.standin_process`).
os.environ.setdefault("BELAY_STANDIN_GRACE_S", "300")


@pytest.fixture(autouse=True)
def umask_as_it_was() -> Iterator[None]:
    """`belay`'s command line sets umask 077 for its home (belay.cli.main): a test that runs it in
    this process would leave every later test of the worker writing files only root can read, such
    as a file the test puts in a sandbox's workspace for its uid to read."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)
