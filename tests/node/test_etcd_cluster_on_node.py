"""A session on the real node whose record is in a three-member etcd cluster (the same etcd build,
its members on the node's address, where the pods reach them, over TLS only with a client
certificate, which the operator and the harness get as a TLS Secret): a follower stops while the
harness writes, then the leader while it waits, leaving no quorum; both come back. Every event written
before a fault is still there, no completed step runs twice, the session finishes, and the status
says the store is unavailable only while it was (tests/faults/etcd_session.py, which
tests/controller runs with the kubelet stand-in). A plaintext client, and a TLS client without the
client certificate, are refused by every member."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.journal.events import Event
from belay.stores.etcd.credentials import EtcdCredentials
from tests.controller.operator_process import wait_for_session_end
from tests.faults.etcd_session import Session, check, lose_a_follower_then_the_quorum
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, operated_session
from tests.testenv.etcd import EtcdCluster, refuses_a_write
from tests.testenv.node import NODE_IP

pytestmark = [pytest.mark.testenv, pytest.mark.node, pytest.mark.slow]


@pytest.fixture
def etcd_on_node(node_cluster: NodeCluster, tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "etcd", host=NODE_IP, tls=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def session(
    node_cluster: NodeCluster, etcd_on_node: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SessionSetup]:
    with operated_session(node_cluster, "quorum", tmp_path, monkeypatch.setenv, etcd=etcd_on_node) as setup:
        yield setup


async def test_a_session_on_the_node_outlives_a_lost_follower_and_a_lost_quorum_of_its_etcd(
    node_cluster: NodeCluster, etcd_on_node: EtcdCluster, session: SessionSetup
) -> None:
    setup = session

    async def events() -> list[Event]:
        return await asyncio.to_thread(setup.events)  # its own event loop, on a thread

    def describe() -> str:
        return f"{setup.describe()}\noperator log:\n{setup.operator_log()[-3000:]}"

    adapter = Session(
        status=setup.status,
        events=events,
        waiting_for_approval=lambda: setup.waiting_for_approval() is not None,
        approve=setup.approve,
        ended=lambda: wait_for_session_end(
            node_cluster.kube, setup.namespace, SESSION, timeout=600, describe=describe
        ),
        describe=describe,
    )
    setup.cluster.apply([setup.manifest(approved=False)])
    outcome = await lose_a_follower_then_the_quorum(etcd_on_node, adapter)
    check(outcome)
    assert setup.tickets_filed() == 1

    credentials = etcd_on_node.credentials
    assert credentials is not None
    for endpoint in etcd_on_node.endpoints:
        assert not await refuses_a_write([endpoint], credentials), endpoint  # it answers
        plaintext = f"http://{endpoint.split('://', 1)[1]}"
        assert await refuses_a_write([plaintext], None), endpoint
        assert await refuses_a_write([endpoint], EtcdCredentials(ca=credentials.ca)), endpoint
