"""Shared pytest setup: the real test environment's fixtures (etcd_endpoint, etcd_cluster,
s3_server, kube, helm_bin, harness_image), see tests/testenv/fixtures.py."""

pytest_plugins = ["tests.testenv.fixtures"]
