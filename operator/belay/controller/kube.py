"""The operator's few calls to the Kubernetes API: server-side apply with one field manager, list
and delete pods of a session, create the token Secret once. Blocking (the official client is);
the reconciler awaits them through `KubeClient.call`, on a thread pool of their own.

Why a pool of their own: a new session costs about ten sequential calls, each one a round trip to
the apiserver, so a fleet's throughput is the number of calls in flight divided by their latency.
The event loop's default pool (min(32, cores + 4) threads: 6 on two cores) is shared with
everything else that blocks; this one is as wide as the client's connection pool
(`KUBE_CALL_THREADS`), so every call in flight holds a kept-alive connection.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from belay.controller import names

AGENTSESSIONS = ("belay.dev/v1alpha1", "AgentSession")
CHECKPOINTS = ("belay.dev/v1alpha1", "Checkpoint")
# Calls to the apiserver in flight at once, and kept-alive connections for them.
KUBE_CALL_THREADS = int(os.environ.get("BELAY_KUBE_CALL_THREADS", "32"))

JSON_PATCH = "application/json-patch+json"

T = TypeVar("T")


def load_api_client(kubeconfig: str | None = None, connections: int = KUBE_CALL_THREADS) -> client.ApiClient:
    """A client that keeps `connections` connections to the apiserver (the library's default is
    five per core; a call past them opens, and then drops, a connection of its own)."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


class KubeClient:
    def __init__(
        self,
        api_client: client.ApiClient,
        field_manager: str = names.FIELD_MANAGER,
        threads: int = KUBE_CALL_THREADS,
    ) -> None:
        self.api_client = api_client
        self.dynamic = DynamicClient(api_client)
        self.core = client.CoreV1Api(api_client)
        self.field_manager = field_manager
        self._calls = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube")

    async def call(self, method: Callable[..., T], *args: Any) -> T:
        """Run one of the blocking methods below on the pool of Kubernetes calls."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._calls, functools.partial(method, *args))

    def close(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)

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

    def pool_pods(self, namespace: str) -> list[Any]:
        """The idle pods of the namespace's sandbox pool (docs/operator.md#the-sandbox-pool)."""
        selector = ",".join(f"{k}={v}" for k, v in names.pool_selector().items())
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def create_pod(self, obj: dict[str, Any]) -> str:
        """Create the pod; its uid (what an object it owns names)."""
        namespace = obj["metadata"]["namespace"]
        created = self.core.create_namespaced_pod(namespace, obj, field_manager=self.field_manager)  # type: ignore[arg-type]
        assert created.metadata is not None
        return str(created.metadata.uid)

    def claim_pod(self, namespace: str, name: str, patch: list[dict[str, Any]]) -> bool:
        """Apply a claim (a JSON patch that tests the pod is still in the pool): False when it no
        longer is, or is gone."""
        try:
            self.core.patch_namespaced_pod(
                name, namespace, patch, field_manager=self.field_manager, _content_type=JSON_PATCH
            )
        except ApiException as error:
            if error.status in (404, 409, 422):
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str, resource_version: str | None = None) -> None:
        """Delete the pod; with `resource_version`, only while it is still as it was seen then
        (a pool pod claimed meanwhile is left alone)."""
        options = None
        if resource_version is not None:
            options = client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version=resource_version)
            )
        try:
            self.core.delete_namespaced_pod(name, namespace, body=options)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def read_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's keys and values (decoded), or None when it does not exist. The operator reads
        only the Secret a session names for its own stores, in the session's namespace."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = secret.data or {}
        return {key: base64.b64decode(value).decode("utf-8", "replace") for key, value in data.items()}

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the ServiceAccount or Secret exists (a Secret's contents are not kept)."""
        read = (
            self.core.read_namespaced_service_account
            if kind == "ServiceAccount"
            else self.core.read_namespaced_secret
        )
        try:
            read(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

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
