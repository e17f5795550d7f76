"""The operator follows records through its event store's watch, not by polling: an event appended
to a session's record reaches its status while the follow interval (the safety net) is an hour, a
watch cut by a restart of etcd is opened again, and an idle session costs no store reads (counted
by etcd itself). Real control plane, real etcd for the record; no node, so pods stay Pending."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import pytest

from belay.controller import names
from belay.controller.settings import OperatorSettings
from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.etcd import EtcdEventStore
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess, agentsession_status, wait_for
from tests.controller.sessions import pending_session
from tests.testenv.availability import require_built
from tests.testenv.etcd import EtcdServer
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-watch"
PREFIX = "/watched"
# Long enough that nothing in these tests can come from the safety net.
HOUR_S = 3600.0
# A window in which an idle operator must read nothing; reads after a change are over well
# within it, and a poll of even a few seconds would show.
QUIET_WINDOW_S = 5.0
QUIET_WINDOWS = 12
READ_METHODS = ('grpc_method="Range"', 'grpc_method="Txn"')


@pytest.fixture(scope="module")
def record_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """An etcd of the record's own: nothing but the operator and these tests read from it."""
    require_built("etcd")
    server = EtcdServer(tmp_path_factory.mktemp("record-etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def operator(
    kube: ControlPlane, record_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE, check=False)
    root = tmp_path_factory.mktemp("record-watch")
    address = record_etcd.endpoint.removeprefix("http://")
    settings = OperatorSettings(
        event_store=f"etcd://{address}{PREFIX}", artifact_store=f"file://{root / 'artifacts'}"
    )
    process = OperatorProcess(kube, NAMESPACE, settings, root / "operator.log")
    process.follow_interval_s = HOUR_S
    process.start()
    try:
        yield process
    finally:
        process.stop()


def create(kube: ControlPlane, name: str) -> None:
    kube.kubectl("apply", "-f", "-", input=json.dumps(pending_session(name, NAMESPACE, "follow the record")))


def status_last_seq(kube: ControlPlane, name: str) -> int:
    return int(agentsession_status(kube, NAMESPACE, name).get("lastSeq") or 0)


def wait_for_last_seq(operator: OperatorProcess, name: str, last_seq: int) -> None:
    wait_for(
        lambda: status_last_seq(operator.kube, name) == last_seq,
        f"the status of {name} to show seq {last_seq}",
        timeout=120,
        describe=operator.log,
    )


async def append_note(etcd: EtcdServer, name: str, note_id: str) -> int:
    store = EtcdEventStore([etcd.endpoint], prefix=PREFIX)  # the record key the operator has, if any
    try:
        draft = EventDraft(payload=Note(note_id=note_id, kind=NoteKind.FINDING, text="appended by hand"))
        events = await store.append(names.record_id(NAMESPACE, name), [draft])
        return events[-1].seq
    finally:
        await store.close()


def etcd_reads(etcd: EtcdServer) -> int:
    """Range and Txn requests etcd has answered (a read is one or the other)."""
    with urllib.request.urlopen(f"{etcd.endpoint}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("grpc_server_handled_total{") and any(m in line for m in READ_METHODS):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def wait_for_a_quiet_window(operator: OperatorProcess, etcd: EtcdServer) -> None:
    """Until a whole window passes without one read; an operator that polls never gets there."""
    for _ in range(QUIET_WINDOWS):
        before = etcd_reads(etcd)
        time.sleep(QUIET_WINDOW_S)
        if etcd_reads(etcd) == before:
            return
    raise AssertionError(f"the idle operator kept reading the record\n{operator.log()}")


async def test_an_appended_event_wakes_the_worker_and_an_idle_session_reads_nothing(
    operator: OperatorProcess, record_etcd: EtcdServer
) -> None:
    name = "woken"
    create(operator.kube, name)
    wait_for(
        lambda: status_last_seq(operator.kube, name) >= 1, "the request in the record", 120, operator.log
    )
    wait_for_a_quiet_window(operator, record_etcd)

    # Nothing in the cluster changes and the safety net is an hour away: only the watch can tell.
    seq = await append_note(record_etcd, name, "from-outside")
    wait_for_last_seq(operator, name, seq)
    wait_for_a_quiet_window(operator, record_etcd)
    assert status_last_seq(operator.kube, name) == seq


async def test_a_watch_cut_by_an_etcd_restart_is_opened_again(
    operator: OperatorProcess, record_etcd: EtcdServer
) -> None:
    name = "after-cut"
    create(operator.kube, name)
    wait_for(
        lambda: status_last_seq(operator.kube, name) >= 1, "the request in the record", 120, operator.log
    )

    record_etcd.stop()  # cuts the operator's watch stream
    record_etcd.start()
    seq = await append_note(record_etcd, name, "after-the-cut")
    wait_for_last_seq(operator, name, seq)
    seq = await append_note(record_etcd, name, "and-again")
    wait_for_last_seq(operator, name, seq)
