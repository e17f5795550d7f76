"""The operator's few calls to the Kubernetes API: server-side apply with one field manager, list
and delete pods of a session, create the token Secret once. Blocking (the official client is);
the reconciler calls them through `asyncio.to_thread`."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from belay.controller import names

AGENTSESSIONS = ("belay.dev/v1alpha1", "AgentSession")
CHECKPOINTS = ("belay.dev/v1alpha1", "Checkpoint")


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class KubeClient:
    def __init__(self, api_client: client.ApiClient, field_manager: str = names.FIELD_MANAGER) -> None:
        self.api_client = api_client
        self.dynamic = DynamicClient(api_client)
        self.core = client.CoreV1Api(api_client)
        self.field_manager = field_manager

    def _resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict[str, Any]) -> None:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        self.dynamic.server_side_apply(
            resource,
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager=self.field_manager,
            force_conflicts=True,
        )

    def apply_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        resource = self._resource(*AGENTSESSIONS)
        body = {
            "apiVersion": AGENTSESSIONS[0],
            "kind": AGENTSESSIONS[1],
            "metadata": {"name": name},
            "status": status,
        }
        self.dynamic.server_side_apply(
            resource.status,
            body=body,
            name=name,
            namespace=namespace,
            field_manager=self.field_manager,
            force_conflicts=True,
        )

    def session_pods(self, namespace: str, session: str) -> list[Any]:
        selector = f"{names.LABEL_SESSION}={session},{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    def ensure_secret(self, obj: dict[str, Any]) -> None:
        """Create the Secret unless it exists; an existing one is never rewritten."""
        try:
            self.core.create_namespaced_secret(obj["metadata"]["namespace"], obj)  # type: ignore[arg-type]
        except ApiException as error:
            if error.status != 409:
                raise

    def create_session_if_absent(self, obj: dict[str, Any]) -> None:
        """Create the AgentSession unless one of that name exists; an existing one is left as is."""
        try:
            self._resource(*AGENTSESSIONS).create(body=obj, namespace=obj["metadata"]["namespace"])
        except ApiException as error:
            if error.status != 409:
                raise

    def get_session(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self._resource(*AGENTSESSIONS).get(name=name, namespace=namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(found.to_dict())
