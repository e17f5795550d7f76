"""The reconciler's reading of observed pods (pure: pods as the API client returns them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from belay.controller import names
from belay.controller.reconciler import harness_pods, sandboxes_lost


def pod(name: str, component: str, attempt: int, phase: str = "Running", deleting: bool = False) -> Any:
    labels = {names.LABEL_COMPONENT: component, names.LABEL_ATTEMPT: str(attempt), names.LABEL_SESSION: "s"}
    metadata = SimpleNamespace(name=name, labels=labels, deletion_timestamp="now" if deleting else None)
    return SimpleNamespace(metadata=metadata, status=SimpleNamespace(phase=phase))


def test_harness_pods_read_index_phase_and_deletion() -> None:
    observed = harness_pods([pod("s-harness-0", "harness", 0, "Failed"), pod("s-sbx-a-0", "sandbox", 0)])
    assert [(p.name, p.index, p.phase, p.live) for p in observed] == [("s-harness-0", 0, "Failed", False)]


def test_a_sandbox_seen_then_gone_or_ended_is_lost_once() -> None:
    seen: dict[str, str] = {}
    harness = pod("s-harness-0", "harness", 0)
    assert (
        sandboxes_lost([harness, pod("s-sbx-a-0", "sandbox", 0), pod("s-sbx-b-0", "sandbox", 0)], seen) == []
    )
    assert sandboxes_lost([harness, pod("s-sbx-b-0", "sandbox", 0, "Failed")], seen) == [
        "s-sbx-a-0",
        "s-sbx-b-0",
    ]
    assert sandboxes_lost([harness], seen) == []


def test_sandboxes_of_an_earlier_attempt_are_not_lost_when_they_go() -> None:
    seen: dict[str, str] = {}
    sandboxes_lost([pod("s-harness-0", "harness", 0), pod("s-sbx-a-0", "sandbox", 0)], seen)
    next_attempt = [pod("s-harness-0", "harness", 0, deleting=True), pod("s-harness-2", "harness", 2)]
    assert sandboxes_lost([*next_attempt, pod("s-sbx-a-2", "sandbox", 2)], seen) == []
    assert seen == {"s-sbx-a-2": "2"}


def test_a_sandbox_never_seen_is_not_lost() -> None:
    assert sandboxes_lost([pod("s-harness-0", "harness", 0)], {}) == []
