"""A running session whose event store, a three-member etcd cluster, loses a follower, then its
leader (and so its quorum), then gets both back: what the operator's tests run with the kubelet
stand-in (tests/controller) and on the real node (tests/node) alike.

The session is the example waiting for its publish approval at the end, so it writes through the
first fault and waits, with its harness renewing its lease, through the second."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from belay.journal.events import Event
from belay.journal.verdicts import steps_run_twice
from tests.testenv.etcd import EtcdCluster
from tests.testenv.polling import wait_until

# How long after the members are back the operator may still show what it saw while they were not:
# a check in flight retries within its deadline, and the next pass writes the status.
CATCH_UP_S = 15.0
# The first checkpoint of the example, where the follower goes.
FIRST_CHECKPOINT = "researcher/reproduce"


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def store_unavailable(status: dict[str, Any]) -> bool:
    """The status says the operator could not reach the record (docs/operator.md, Reconciliation)."""
    reconciling = condition(status, "Reconciling")
    return (
        bool(reconciling) and reconciling["status"] == "True" and reconciling["reason"] == "StoreUnavailable"
    )  # type: ignore[index]


def recovering(status: dict[str, Any]) -> bool:
    found = condition(status, "Recovering")
    return bool(found) and found["status"] == "True"  # type: ignore[index]


@dataclass
class StatusLog:
    """The session's status, read again and again on a thread of its own, each with when."""

    read: Callable[[], dict[str, Any]]
    seen: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            status = self.read()
            self.seen.append((time.monotonic(), status))
            self._stop.wait(0.3)

    def __enter__(self) -> StatusLog:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def when(self, test: Callable[[dict[str, Any]], bool]) -> list[float]:
        return [at for at, status in self.seen if test(status)]


@dataclass
class Session:
    """How the scenario sees and moves the session, wherever it runs."""

    status: Callable[[], dict[str, Any]]
    events: Callable[[], Awaitable[list[Event]]]
    waiting_for_approval: Callable[[], bool]
    approve: Callable[[], None]
    ended: Callable[[], dict[str, Any]]  # waits for the end; the last status
    describe: Callable[[], str]


@dataclass
class Outcome:
    before_follower: list[Event]
    before_leader: list[Event]
    after: list[Event]
    follower: str
    leader: str
    leader_lost_at: float
    members_back_at: float
    statuses: StatusLog
    ended: dict[str, Any]


async def lose_a_follower_then_the_quorum(cluster: EtcdCluster, session: Session) -> Outcome:
    def wait(probe: Callable[[], Any], what: str, timeout: float = 300) -> Any:
        return wait_until(probe, what, timeout=timeout, interval=0.3, describe=session.describe)

    async def checkpointed() -> bool:
        return any(
            getattr(e.payload, "checkpoint_id", None) == FIRST_CHECKPOINT for e in await session.events()
        )

    with StatusLog(session.status) as statuses:
        deadline = time.monotonic() + 300
        while not await checkpointed():
            assert time.monotonic() < deadline, f"no checkpoint {FIRST_CHECKPOINT}: {session.describe()}"
            await asyncio.sleep(0.3)
        # A follower goes while the harness works: two members of three still make a quorum.
        before_follower = await session.events()
        leader = await asyncio.to_thread(cluster.leader_name)
        follower = next(name for name in cluster.member_names if name != leader)
        await asyncio.to_thread(cluster.stop_member, follower)
        await asyncio.to_thread(wait, session.waiting_for_approval, "the session to wait for its approval")

        # Then the leader: one member left, no quorum, nothing can be written or read.
        leader = await asyncio.to_thread(cluster.wait_for_leader)
        before_leader = await session.events()
        leader_lost_at = time.monotonic()
        await asyncio.to_thread(cluster.stop_member, leader)
        await asyncio.to_thread(
            wait, lambda: store_unavailable(session.status()), "the operator to report the store", 120
        )
        # Both come back (together: a member needs a quorum of peers to report healthy).
        await asyncio.gather(*(asyncio.to_thread(cluster.start_member, n) for n in (follower, leader)))
        members_back_at = time.monotonic()
        await asyncio.to_thread(
            wait,
            lambda: not store_unavailable(session.status()),
            "the operator to reach the store again",
            120,
        )
        session.approve()
        ended = await asyncio.to_thread(session.ended)
    return Outcome(
        before_follower=before_follower,
        before_leader=before_leader,
        after=await session.events(),
        follower=follower,
        leader=leader,
        leader_lost_at=leader_lost_at,
        members_back_at=members_back_at,
        statuses=statuses,
        ended=ended,
    )


def timeline(outcome: Outcome) -> str:
    """Each change of what the status said (seconds after the leader stopped), for a failure."""
    lines, last = [], None
    for at, status in outcome.statuses.seen:
        said = (
            status.get("phase"),
            *((c["type"], c["status"], c.get("reason")) for c in status.get("conditions", [])),
        )
        if said != last:
            lines.append(f"{at - outcome.leader_lost_at:+7.1f} s {said}")
            last = said
    back = outcome.members_back_at - outcome.leader_lost_at
    return f"members back at {back:+.1f} s\n" + "\n".join(lines)


def check(outcome: Outcome) -> None:
    """What the faults may not have done, and what the operator said of them."""
    assert outcome.ended["phase"] == "Succeeded", outcome.ended
    # Every event written before either fault is still there, as it was.
    for before in (outcome.before_follower, outcome.before_leader):
        kept = {e.seq: e for e in outcome.after}
        assert [kept.get(e.seq) for e in before] == before
    assert steps_run_twice(outcome.after) == []
    # The operator said it could not reach the store while it could not, and only then.
    unavailable = outcome.statuses.when(store_unavailable)
    assert unavailable, "the operator never reported the store it could not reach"
    assert min(unavailable) >= outcome.leader_lost_at, "the store was reported down while it had a quorum"
    assert max(unavailable) <= outcome.members_back_at + CATCH_UP_S, (
        f"still reported down {max(unavailable) - outcome.members_back_at:.1f} s after the members were back"
    )
    # Nothing was lost: the harness waited the store out, and no attempt was replaced.
    said = [
        (round(at - outcome.leader_lost_at, 1), condition(status, "Recovering"))
        for at, status in outcome.statuses.seen
        if recovering(status)
    ]
    assert said == [], (
        f"Recovering (seconds after the leader stopped, the condition): {said[:3]}\n{timeline(outcome)}"
    )
    assert outcome.ended.get("harnessLost", 0) == 0
