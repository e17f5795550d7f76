from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from belay.controller.kube import load_api_client
from belay.controller.leader import LeaderElector, LeaseView, Step, next_step
from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_next_step_follows_the_holder_and_the_expiry() -> None:
    assert next_step(None, "a", NOW) == Step.CREATE
    held = LeaseView(holder="a", renewed_at=NOW - timedelta(seconds=5), duration_s=15)
    assert next_step(held, "a", NOW) == Step.RENEW
    assert next_step(held, "b", NOW) == Step.WAIT
    expired = LeaseView(holder="a", renewed_at=NOW - timedelta(seconds=16), duration_s=15)
    assert next_step(expired, "b", NOW) == Step.TAKE_OVER
    assert next_step(LeaseView(holder=None, renewed_at=None, duration_s=15), "b", NOW) == Step.TAKE_OVER


@pytest.mark.testenv
def test_only_one_candidate_leads_until_its_lease_runs_out(kube: ControlPlane) -> None:
    api = load_api_client(str(kube.kubeconfig))
    first = LeaderElector(api, "default", "belay-leader-test", "replica-a", duration_s=1)
    second = LeaderElector(api, "default", "belay-leader-test", "replica-b", duration_s=1)
    assert first.try_once()
    assert not second.try_once()
    assert first.try_once()  # renewing
    # replica-a stops renewing, as a hung or partitioned replica would, until its lease as the
    # apiserver stores it has run out.
    held = api_lease(api).spec
    runs_out = held.renew_time + timedelta(seconds=held.lease_duration_seconds)
    wait_until(
        lambda: datetime.now(UTC) > runs_out,
        f"replica-a's lease to run out at {runs_out}",
        timeout=30,
        interval=0.05,
    )
    assert second.try_once()
    assert not first.try_once()
    lease = api_lease(api)
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("replica-b", 1)


def api_lease(api: object) -> Any:
    from kubernetes import client

    return client.CoordinationV1Api(api).read_namespaced_lease("belay-leader-test", "default")  # type: ignore[arg-type]
