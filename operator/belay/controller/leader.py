"""Leader election on a coordination.k8s.io Lease, so that of several operator replicas exactly
one acts. (kopf's peering freezes every replica when two have the same priority, which a
Deployment's identical replicas always do.)

The decision is a pure function of the Lease and the clock; writes are compare-and-swap on the
Lease's resourceVersion, so two candidates that decide to take over at once cannot both win. A
leader that cannot renew before its lease runs out stops acting: it exits and restarts as a
candidate. The session record's fencing lease still protects every append, so even a leader that
has not noticed yet cannot write behind a newer harness attempt.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("belay.leader")


class Step(StrEnum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE_OVER = "take_over"  # the holder let it expire
    WAIT = "wait"  # someone else holds it


@dataclass(frozen=True)
class LeaseView:
    holder: str | None
    renewed_at: datetime | None
    duration_s: int
    transitions: int = 0


def next_step(lease: LeaseView | None, me: str, now: datetime) -> Step:
    if lease is None:
        return Step.CREATE
    if lease.holder == me:
        return Step.RENEW
    if not lease.holder or lease.renewed_at is None:
        return Step.TAKE_OVER
    if lease.renewed_at + timedelta(seconds=lease.duration_s) < now:
        return Step.TAKE_OVER
    return Step.WAIT


class LeadershipLost(Exception):
    pass


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        retry_s: float = 2.0,
    ) -> None:
        # Typed loosely: the client's stubs want model objects where a plain dict body is sent.
        self.api: Any = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.retry_s = retry_s

    def _read(self) -> tuple[LeaseView | None, Any]:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None, None
            raise
        spec = lease.spec
        view = LeaseView(
            holder=spec.holder_identity,
            renewed_at=spec.renew_time,
            duration_s=spec.lease_duration_seconds or self.duration_s,
            transitions=spec.lease_transitions or 0,
        )
        return view, lease

    def _body(
        self, now: datetime, transitions: int, acquired: datetime | None, version: str | None
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": _micro(acquired or now),
                "renewTime": _micro(now),
                "leaseTransitions": transitions,
            },
        }

    def try_once(self) -> bool:
        """One round: True when this candidate holds the Lease afterwards."""
        now = datetime.now(UTC)
        view, lease = self._read()
        step = next_step(view, self.identity, now)
        try:
            if step == Step.CREATE:
                self.api.create_namespaced_lease(self.namespace, self._body(now, 0, None, None))
            elif step == Step.RENEW:
                assert view is not None
                body = self._body(
                    now, view.transitions, lease.spec.acquire_time, lease.metadata.resource_version
                )
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
            elif step == Step.TAKE_OVER:
                assert view is not None
                body = self._body(now, view.transitions + 1, None, lease.metadata.resource_version)
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
            else:
                return False
        except ApiException as error:
            if error.status in (409, 422):  # another candidate wrote first
                return False
            raise
        return True

    async def acquire(self) -> None:
        while not await asyncio.to_thread(self.try_once):
            await asyncio.sleep(self.retry_s)
        log.info("%s leads %s/%s", self.identity, self.namespace, self.name)

    async def hold(self) -> None:
        """Renew until renewing fails for longer than the lease lasts; then raise LeadershipLost."""
        last_renewal = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.duration_s / 3)
            try:
                if await asyncio.to_thread(self.try_once):
                    last_renewal = asyncio.get_running_loop().time()
                    continue
                raise LeadershipLost(f"{self.identity}: another replica holds {self.name}")
            except ApiException as error:
                log.warning("renewing %s failed: %s", self.name, error.reason)
            if asyncio.get_running_loop().time() - last_renewal > self.duration_s:
                raise LeadershipLost(f"{self.identity}: could not renew {self.name} in time")
