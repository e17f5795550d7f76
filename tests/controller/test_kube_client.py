"""The operator's Kubernetes client against the real apiserver."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from belay.controller.desired import SessionRef, sandbox_token_secret
from belay.controller.kube import KubeClient, load_api_client
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv


def owner(core: client.CoreV1Api, namespace: str, name: str) -> SessionRef:
    made = core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return SessionRef(name, namespace, made.metadata.uid, 1)


def token_secret(ref: SessionRef, token: str) -> dict[str, Any]:
    """The operator's sandbox token Secret, owned here by a real object (a ConfigMap standing in
    for the AgentSession), so the garbage collector leaves it alone while the test looks."""
    secret = sandbox_token_secret(ref, "implementer", token)
    secret["metadata"]["name"] = "demo-sbx-implementer-token"
    secret["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": ref.name, "uid": ref.uid, "controller": True}
    ]
    return secret


def token_of(core: client.CoreV1Api, namespace: str, name: str) -> tuple[dict[str, Any], str | None]:
    secret = core.read_namespaced_secret(name, namespace)
    owners = [ref.uid for ref in secret.metadata.owner_references or []]
    return dict(secret.data or {}), owners[0] if owners else None


def test_a_sandbox_token_left_by_a_deleted_session_of_the_same_name_is_replaced(kube: ControlPlane) -> None:
    api = load_api_client(str(kube.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = f"kube-client-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        kube_client = KubeClient(api)
        old, new = owner(core, namespace, "old-session"), owner(core, namespace, "new-session")

        first = token_secret(old, "first-token")
        kube_client.ensure_secret(first)
        name = first["metadata"]["name"]
        data, owner_uid = token_of(core, namespace, name)
        assert owner_uid == old.uid

        # The same owner: an existing token is never rewritten.
        kube_client.ensure_secret(token_secret(old, "second-token"))
        assert token_of(core, namespace, name) == (data, old.uid)

        # A new session under the same name: the old session's token is replaced by its own.
        kube_client.ensure_secret(token_secret(new, "new-token"))
        new_data, new_owner = token_of(core, namespace, name)
        assert new_owner == new.uid and new_data != data
    finally:
        core.delete_namespace(namespace)
