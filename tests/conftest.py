"""Shared pytest setup: the real test environment's fixtures (etcd_endpoint, etcd_cluster,
s3_server, kube, helm_bin, harness_image), see tests/testenv/fixtures.py."""

import os

# Before anything imports grpc: see belay/__init__.py (a child started by fork, for its
# parent-death signal, must not run gRPC's fork handlers).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ["tests.testenv.fixtures"]
