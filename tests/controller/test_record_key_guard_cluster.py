"""The operator holding another record key than the fleet's store was written with, on the real
control plane: it refuses each session before reading its record, with the session Stalled
(reason RecordKeyMismatch) naming what to set, makes no pod, and writes nothing; the session's
record is not taken for corrupt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.controller import names
from belay.controller.settings import OperatorSettings
from belay.stores.factory import open_event_store
from belay.stores.key_guard import IN_A_CLUSTER, guard_record_key
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    NAMESPACE,
    cluster_manifest,
    condition,
    e2e_cluster,
    session_status,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

SESSION = "keyed"
WRITTEN_WITH = "w" * 40


@pytest.fixture
async def keyed_store(tmp_path: Path) -> str:
    """A fleet store whose records were written under WRITTEN_WITH, before the upgrade."""
    path = tmp_path / "events.db"
    store = open_event_store({"backend": "sqlite", "path": str(path), "record_key": WRITTEN_WITH})
    try:
        await guard_record_key(store, "the fleet's store", IN_A_CLUSTER)
    finally:
        await store.close()
    return f"sqlite://{path}"


@pytest.fixture
def operator(
    e2e_cluster: ControlPlane,  # noqa: F811
    keyed_store: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OperatorProcess]:
    monkeypatch.delenv("BELAY_RECORD_KEY_FILE", raising=False)
    monkeypatch.setenv("BELAY_RECORD_KEY", "n" * 40)  # the new key an upgrade made
    settings = OperatorSettings(
        event_store=keyed_store, artifact_store=f"file://{tmp_path / 'artifacts'}", sandbox_pool_size=0
    )
    process = OperatorProcess(e2e_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()
        e2e_cluster.kubectl("delete", "agentsession", SESSION, "-n", NAMESPACE, "--timeout=60s", check=False)


async def test_an_operator_holding_another_key_refuses_the_session_naming_what_to_set(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,
    keyed_store: str,
) -> None:
    kube = e2e_cluster
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    kube.kubectl("apply", "-f", "-", input=json.dumps(cluster_manifest(SESSION)))
    stalled = wait_for(
        lambda: (c := condition(session_status(kube, SESSION), "Stalled")) and c["status"] == "True" and c,
        "the session refused for the record key",
        timeout=60,
        describe=describe,
    )
    assert stalled["reason"] == "RecordKeyMismatch", stalled
    assert "stores.recordKey.existingSecret" in stalled["message"] and "\n" not in stalled["message"]
    selector = f"{names.LABEL_SESSION}={SESSION}"
    assert kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", selector).get("items") == []
    store = open_event_store(keyed_store)
    try:
        assert await store.list_sessions() == []  # nothing was written under the new key
    finally:
        await store.close()
