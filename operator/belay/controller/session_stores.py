"""The stores of the sessions one operator reconciles, each opened once: the operator's own (its
settings' URLs) and a session's own (`spec.stores`), opened per Secret and its contents with that
Secret's credentials alone, never the operator's."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from belay.api.agentsession import AgentSessionSpec
from belay.controller import admission
from belay.controller.kube import KubeClient
from belay.controller.settings import OperatorSettings
from belay.stores.base import ArtifactStore, EventStore, StoreUnavailable
from belay.stores.factory import open_artifact_store, open_event_store
from belay.stores.key_guard import IN_A_CLUSTER, guard_record_key, in_own_secret

T = TypeVar("T")


def _opened(opener: Callable[[Any], T], spec: str | dict[str, Any]) -> T:
    """A store that cannot even be opened (a missing directory, a bad address) is unavailable,
    like one that stops answering: the session waits for it, the operator keeps going. Only the
    URL is named: a session's own store spec holds its credentials."""
    url = spec if isinstance(spec, str) else spec["url"]
    try:
        return opener(spec)
    except (OSError, ValueError) as error:
        raise StoreUnavailable(f"cannot open {url}: {error}") from error


class SessionStores:
    def __init__(self, kube: KubeClient, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self._event_stores: dict[str, EventStore] = {}
        self._artifact_stores: dict[str, ArtifactStore] = {}
        # (namespace, Secret, URL) of a session's own store: the key it was opened under.
        self._own_keys: dict[tuple[str, str, str], str] = {}
        # The event stores whose record key fingerprint matched the key this operator holds.
        self._key_checked: set[int] = set()

    def event_store(self, spec: AgentSessionSpec, namespace: str = "") -> EventStore:
        """The session's event store: the operator's, or its own as `open_stores` opened it last
        (StoreUnavailable until then)."""
        if admission.own_stores(spec):
            return self._opened_own(self._event_stores, namespace, spec, spec.stores.events or "")
        url = self.settings.fleet_event_store()
        if url not in self._event_stores:
            self._event_stores[url] = _opened(open_event_store, url)
        return self._event_stores[url]

    def artifact_store(self, spec: AgentSessionSpec, namespace: str = "") -> ArtifactStore:
        if admission.own_stores(spec):
            return self._opened_own(self._artifact_stores, namespace, spec, spec.stores.artifacts or "")
        url = self.settings.artifact_store
        if url not in self._artifact_stores:
            self._artifact_stores[url] = _opened(open_artifact_store, url)
        return self._artifact_stores[url]

    def _opened_own(self, opened: dict[str, T], namespace: str, spec: AgentSessionSpec, url: str) -> T:
        key = self._own_keys.get((namespace, spec.stores.secret_ref or "", url))
        if key is None or key not in opened:
            raise StoreUnavailable(f"the stores {namespace}/{spec.stores.secret_ref} names are not open yet")
        return opened[key]

    def _own_key(self, namespace: str, secret: str, store_spec: dict[str, Any]) -> str:
        key = json.dumps([namespace, secret, store_spec], sort_keys=True)
        self._own_keys[(namespace, secret, store_spec["url"])] = key
        return key

    async def open(self, namespace: str, spec: AgentSessionSpec) -> tuple[EventStore, ArtifactStore]:
        """The session's stores. Its own are opened with the credentials of the Secret it names in
        its own namespace, read again on each pass (a rotated Secret opens them anew), and never
        with the operator's."""
        if admission.own_stores(spec):
            name = spec.stores.secret_ref or ""
            data = await self.kube.call(self.kube.read_secret, namespace, name)
            if data is None:
                raise StoreUnavailable(
                    f"the Secret {name} named by spec.stores.secretRef is not in namespace {namespace}"
                )
            try:
                events, artifacts = admission.own_store_specs(spec, data)
            except ValueError as error:
                raise StoreUnavailable(str(error)) from error
            event_key = self._own_key(namespace, name, events)
            if event_key not in self._event_stores:
                self._event_stores[event_key] = _opened(open_event_store, events)
            artifact_key = self._own_key(namespace, name, artifacts)
            if artifact_key not in self._artifact_stores:
                self._artifact_stores[artifact_key] = _opened(open_artifact_store, artifacts)
        events_store = self.event_store(spec, namespace)
        if id(events_store) not in self._key_checked:
            # Named without its URL, which may hold a password.
            if admission.own_stores(spec):
                secret = f"{namespace}/{spec.stores.secret_ref}"
                await guard_record_key(
                    events_store, f"the event store of Secret {secret}", in_own_secret(secret)
                )
            else:
                await guard_record_key(events_store, "the operator's event store", IN_A_CLUSTER)
            self._key_checked.add(id(events_store))
        return events_store, self.artifact_store(spec, namespace)

    async def close(self) -> None:
        for store in self._event_stores.values():
            await store.close()
