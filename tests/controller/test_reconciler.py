"""The reconciler's reading of observed pods (pure: pods as the API client returns them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from belay.controller import names
from belay.controller.reconciler import harness_pods, sandbox_pods


def pod(name: str, component: str, attempt: int, phase: str = "Running", deleting: bool = False) -> Any:
    labels = {names.LABEL_COMPONENT: component, names.LABEL_ATTEMPT: str(attempt), names.LABEL_SESSION: "s"}
    metadata = SimpleNamespace(
        name=name, labels=labels, deletion_timestamp="now" if deleting else None, creation_timestamp=None
    )
    return SimpleNamespace(metadata=metadata, status=SimpleNamespace(phase=phase))


def test_harness_pods_read_index_phase_and_deletion() -> None:
    observed = harness_pods([pod("s-harness-0", "harness", 0, "Failed"), pod("s-sbx-a-0", "sandbox", 0)])
    assert [(p.name, p.index, p.phase, p.live) for p in observed] == [("s-harness-0", 0, "Failed", False)]


def test_sandbox_pods_read_phase_and_deletion_of_sandboxes_only() -> None:
    observed = sandbox_pods(
        [
            pod("s-harness-0", "harness", 0),
            pod("s-sbx-a-0", "sandbox", 0),
            pod("s-sbx-b-0", "sandbox", 0, "Failed"),
            pod("s-sbx-c-0", "sandbox", 0, deleting=True),
        ]
    )
    assert {name: (p.phase, p.live) for name, p in observed.items()} == {
        "s-sbx-a-0": ("Running", True),
        "s-sbx-b-0": ("Failed", False),
        "s-sbx-c-0": ("Running", False),
    }
