"""Whoever may create an AgentSession reaches no further than the session the operator allows, on
the real control plane with the operator as the chart runs it:

- a session naming an image the chart does not allow, a store without the Secret of its own
  namespace that reaches it, or an egress rule wider than `internet`, is refused with the reason
  in its status, and nothing of it is made: no pod, Secret, Service or NetworkPolicy, no record;
- a session on its own stores is opened with its own Secret's credentials, never the operator's:
  the operator here holds no S3 credentials at all, yet exports the session's events into the
  session's bucket, and the harness pod gets that Secret alone, not the fleet's.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.controller import names
from belay.controller.settings import OperatorSettings
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess, agentsession_status, kubectl_json, wait_for
from tests.controller.sessions import pending_session
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-walls"
ELSEWHERE = "belay-walls-other"
BUCKET = "team-walls"
FLEET_SECRET = "fleet-stores"


def session(name: str, **spec: Any) -> dict[str, Any]:
    manifest = pending_session(name, NAMESPACE, f"{name}: stay pending")
    manifest["spec"].update(copy.deepcopy(spec))
    return manifest


def secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": encoded,
    }


def children(kube: ControlPlane, name: str) -> dict[str, list[str]]:
    """Every object of the session's the operator could have made, by kind."""
    found = {}
    for kind in ("pods", "secrets", "services", "networkpolicies"):
        listed = kubectl_json(kube, "get", kind, "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={name}")
        found[kind] = [item["metadata"]["name"] for item in listed.get("items", [])]
    return found


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def last_seq(events_url: str, name: str) -> int:
    async def read() -> int:
        store = open_event_store(events_url)
        try:
            return await store.last_seq(name)
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture
def walled(
    kube: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[OperatorProcess, str]]:
    # The operator's own S3 credentials: they must never open a store a session names.
    for variable in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fleet-not-for-sessions")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fleet-not-for-sessions")
    install_crds(kube)
    for namespace in (NAMESPACE, ELSEWHERE):
        kube.kubectl("create", "namespace", namespace, check=False)
    # The fleet's store Secret where the fleet's sessions run, as the install makes it: the
    # operator makes no pod of a session whose namespace lacks it.
    kube.kubectl(
        "create", "secret", "generic", FLEET_SECRET, "-n", NAMESPACE,
        "--from-literal=AWS_ACCESS_KEY_ID=fleet-not-for-sessions", check=False,
    )  # fmt: skip
    events_url = f"sqlite://{tmp_path / 'fleet-events.db'}"
    settings = OperatorSettings(
        event_store=events_url,
        artifact_store=f"file://{tmp_path / 'fleet-artifacts'}",
        image_pull_policy="Never",
        harness_images={"gpu": "registry.example/belay-harness-gpu:1.0"},
        sandbox_images={"python-3-12": "registry.example/sandbox-python:3.12"},
        store_secret=FLEET_SECRET,
    )
    operator = OperatorProcess(kube, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield operator, events_url
    finally:
        operator.stop()
        kube.kubectl("delete", "agentsessions", "--all", "-n", NAMESPACE, "--wait=false", check=False)


def test_a_session_naming_what_the_operator_does_not_allow_is_refused_with_nothing_made(
    kube: ControlPlane, walled: tuple[OperatorProcess, str]
) -> None:
    operator, events_url = walled
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    scripted = {"type": "scripted", "plan": "/nonexistent/plan.yaml"}
    refused = {
        "foreign-harness": (
            session("foreign-harness", executor={**scripted, "image": "mine"}),
            "spec.executor.image: 'mine' is not a harness image this operator allows (allowed: gpu)",
        ),
        "foreign-sandbox": (
            session("foreign-sandbox", subagents=[{"name": "worker", "image": "gpu"}]),
            "spec.subagents[worker].image: 'gpu' is not a sandbox image this operator allows",
        ),
        "foreign-store": (
            session("foreign-store", stores={"events": "etcd://etcd.team-b:2379/belay"}),
            "spec.stores: a session's own stores in a cluster are named together",
        ),
        "wide-allowlist": (
            session(
                "wide-allowlist",
                subagents=[{"name": "worker", "networkProfile": "allowlist", "allowlist": ["0.0.0.0/0"]}],
            ),
            "spec.subagents[worker].allowlist: '0.0.0.0/0' is wider than networkProfile 'internet'",
        ),
    }
    allowed = session(
        "allowed",
        executor={**scripted, "image": "gpu"},
        subagents=[{"name": "worker", "image": "python-3-12"}],
    )
    for manifest in [*(m for m, _ in refused.values()), allowed]:
        kube.kubectl("create", "-f", "-", input=json.dumps(manifest))

    # The allowed one gets its children, with the images its names stand for.
    pods = wait_for(
        lambda: len(children(kube, "allowed")["pods"]) == 2 or None,
        "the allowed session's pods",
        describe=describe,
    )
    assert pods
    listed = kubectl_json(kube, "get", "pods", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}=allowed")
    images = sorted(p["spec"]["containers"][0]["image"] for p in listed["items"])
    assert images == ["registry.example/belay-harness-gpu:1.0", "registry.example/sandbox-python:3.12"]

    def refusal(name: str) -> dict[str, Any] | None:
        status = agentsession_status(kube, NAMESPACE, name)
        return status if condition(status, "Stalled").get("reason") == "NotAllowed" else None

    for name, (_, message) in refused.items():
        status = wait_for(functools.partial(refusal, name), f"{name} refused", describe=describe)
        stalled = condition(status, "Stalled")
        assert stalled["status"] == "True" and message in stalled["message"], stalled
        assert condition(status, "Ready")["status"] == "False"
        assert children(kube, name) == {"pods": [], "secrets": [], "services": [], "networkpolicies": []}
        assert last_seq(events_url, names.record_id(NAMESPACE, name)) == 0  # not even its request recorded


def test_a_sessions_own_stores_are_opened_with_its_own_secret_only(
    kube: ControlPlane, walled: tuple[OperatorProcess, str], etcd_endpoint: str, s3_server: S3Server
) -> None:
    operator, _ = walled
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731
    s3_server.client().create_bucket(Bucket=BUCKET)
    credentials = {
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_ENDPOINT_URL": s3_server.endpoint_url,
        "AWS_DEFAULT_REGION": s3_server.region,
    }
    host = etcd_endpoint.split("://", 1)[-1]
    stores = {
        "events": f"etcd://{host}/walls",
        "artifacts": f"s3://{BUCKET}/walls",
        "secretRef": "team-stores",
    }

    # The Secret it names is in another namespace only: the stores are not opened, nothing is made.
    kube.kubectl("apply", "-f", "-", input=json.dumps(secret("team-stores", ELSEWHERE, credentials)))
    kube.kubectl("create", "-f", "-", input=json.dumps(session("own-stores", stores=stores)))
    status = wait_for(
        lambda: (
            (s := agentsession_status(kube, NAMESPACE, "own-stores"))
            and condition(s, "Reconciling").get("reason") == "StoreUnavailable"
            and s
        ),
        "the stores reported unavailable",
        describe=describe,
    )
    assert f"is not in namespace {NAMESPACE}" in condition(status, "Reconciling")["message"]
    assert children(kube, "own-stores") == {"pods": [], "secrets": [], "services": [], "networkpolicies": []}

    # In its own namespace: opened with it, and the harness gets it alone.
    kube.kubectl("apply", "-f", "-", input=json.dumps(secret("team-stores", NAMESPACE, credentials)))
    wait_for(
        lambda: last_seq(stores["events"], names.record_id(NAMESPACE, "own-stores")) > 0 or None,
        "the request in the session's etcd",
        describe=describe,
    )
    harness = wait_for(
        lambda: next(
            (
                p
                for p in kubectl_json(
                    kube, "get", "pods", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}=own-stores"
                ).get("items", [])
                if p["metadata"]["labels"].get(names.LABEL_COMPONENT) == names.COMPONENT_HARNESS
            ),
            None,
        ),
        "the harness pod",
        describe=describe,
    )
    assert harness["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "team-stores"}}]

    # The operator writes into the session's bucket with the Secret's credentials (it has none).
    kube.kubectl(
        "annotate",
        "agentsession",
        "own-stores",
        "-n",
        NAMESPACE,
        f"{names.ANNOTATION_EVENTS_REQUEST}=1/walls",
    )
    export = wait_for(
        lambda: agentsession_status(kube, NAMESPACE, "own-stores").get("eventsExport"),
        "the events exported",
        describe=describe,
    )
    assert export["location"].startswith(f"s3://{BUCKET}/walls/blobs/")
    key = export["location"].removeprefix(f"s3://{BUCKET}/")
    assert s3_server.client().head_object(Bucket=BUCKET, Key=key)["ContentLength"] == export["size"]
