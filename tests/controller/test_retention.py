"""spec.retention against the real control plane: deleting a completed session with retention
Delete removes its record and the artifacts only it refers to, keeps a blob another session's
record refers to, and posts what it deleted; a session that retains keeps everything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from belay.api.agentsession import RetentionPolicy
from belay.controller.retention import apply_retention
from belay.journal.events import (
    Artifact,
    Checkpoint,
    DeclaredArtifact,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Payload,
    UserInput,
)
from belay.stores.factory import open_artifact_store, open_event_store
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.controller.test_operator import (  # noqa: F401  (fixtures)
    NAMESPACE,
    cluster_manifest,
    e2e_cluster,
    operator,
    record_of,
    session_status,
    stores,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv


def completed_record(*middle: Payload) -> list[EventDraft]:
    """A session that ran to completion, asked what the example's spec asks (so the operator
    records no scope change)."""
    request = EXAMPLE_MANIFEST["spec"]["request"]
    payloads: list[Payload] = [
        UserInput(goal=request["goal"], parts=request["parts"]),
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
        *middle,
        Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, attempt=1, reason="DeliverablesPublished"),
        Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=1),
    ]
    return [EventDraft(payload=p) for p in payloads]


def declared(name: str, ref: Any) -> DeclaredArtifact:
    return DeclaredArtifact(name=name, sha256=ref.sha256, size=ref.size)


def event_reasons(kube: ControlPlane, name: str) -> dict[str, str]:
    listed = kubectl_json(
        kube, "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return {e["reason"]: e["message"] for e in listed}


async def test_retention_delete_removes_the_record_and_only_its_own_artifacts(
    e2e_cluster: ControlPlane,  # noqa: F811
    operator: OperatorProcess,  # noqa: F811
    stores: tuple[str, str],  # noqa: F811
) -> None:
    kube = e2e_cluster
    events = open_event_store(stores[0])
    artifacts = open_artifact_store(stores[1])
    own = artifacts.put(b"the deleted session's patch\n")
    shared = artifacts.put(b"an input both sessions declared\n")
    listed = artifacts.put(b"a file only the deleted session's manifest lists\n")
    manifest = artifacts.put_manifest([declared("notes.txt", listed)])
    kept_own = artifacts.put(b"the retained session's patch\n")
    try:
        await events.append(
            "deleted",
            completed_record(
                Checkpoint(checkpoint_id="c", covers_seq=2, declared_artifacts=(declared("in.txt", shared),)),
                Artifact(name="fix.patch", ref=own, deliverable=True),
                Artifact(name="bundle", ref=manifest),
            ),
        )
        # A session with no AgentSession (its object went long ago) still protects what it refers to.
        await events.append(
            "neighbour",
            completed_record(
                Checkpoint(checkpoint_id="c", covers_seq=2, declared_artifacts=(declared("in.txt", shared),)),
            ),
        )
        await events.append("retained", completed_record(Artifact(name="fix.patch", ref=kept_own)))
        deleted_events = await events.last_seq("deleted")

        doomed = cluster_manifest("deleted")
        doomed["spec"]["retention"] = {"record": "Delete", "artifacts": "Delete"}
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": [doomed, cluster_manifest("retained")]}
            ),
        )
        describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
        for name in ("deleted", "retained"):
            wait_for(
                lambda name=name: session_status(kube, name).get("phase") == "Succeeded",  # type: ignore[misc]
                f"{name} to show as completed",
                describe=describe,
            )

        kube.kubectl("delete", "agentsession", "deleted", "retained", "-n", NAMESPACE, "--timeout=120s")

        # Written under the bare names, the records were moved to the sessions' own keys.
        assert await events.last_seq("deleted") == await events.last_seq(record_of("deleted")) == 0
        assert await events.read(record_of("deleted")) == []
        assert not {"deleted", record_of("deleted")} & set(await events.list_sessions())
        for gone in (own, listed, manifest):
            assert not artifacts.exists(gone.sha256)
        assert artifacts.get(shared.sha256) == b"an input both sessions declared\n"
        reasons = wait_for(
            lambda: (r := event_reasons(kube, "deleted")) and "RecordDeleted" in r and r,
            "the retention events",
            describe=describe,
        )
        assert reasons["ArtifactsDeleted"].startswith("deleted 3 artifact blobs"), reasons
        assert "kept 1 " in reasons["ArtifactsDeleted"]
        assert reasons["RecordDeleted"] == f"deleted the session record ({deleted_events} events)"
        assert "RetentionNotApplied" not in reasons

        # Retain (the default): the record and the artifacts stay.
        assert await events.last_seq(record_of("retained")) == 5
        assert artifacts.exists(kept_own.sha256)
        assert not {"RecordDeleted", "ArtifactsDeleted"} & set(event_reasons(kube, "retained"))

        # A finalizer that runs again (the operator restarted mid-delete) finds nothing left to do.
        again = await apply_retention(
            record_of("deleted"), RetentionPolicy(record="Delete", artifacts="Delete"), events, artifacts
        )
        assert [n.message for n in again] == [
            "deleted 0 artifact blobs only this session referred to; "
            "kept 0 that other sessions' records refer to",
            "deleted the session record (0 events)",
        ]
        assert artifacts.exists(shared.sha256)
    finally:
        await events.close()
        kube.kubectl(
            "delete", "agentsession", "deleted", "retained", "-n", NAMESPACE, "--timeout=60s", check=False
        )
