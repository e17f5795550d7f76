"""The objects the Argo CD health check is tested on, in Argo CD's layout for resource
customisations (argocd/resource_customizations/belay.dev/AgentSession/testdata/*.yaml): one
AgentSession per phase a session goes through, its status made by the operator's own projection
(`session_status_patch`, with the liveness the operator passes) from a record that reaches that
phase. `health_test.yaml` beside them says, by hand, what Argo CD must show for each; here is what
kstatus must say of each (`KSTATUS`), as docs/operator.md promises.

    .venv/bin/python -m tests.controller.argocd_cases    # write testdata/ again

tests/controller/test_argocd_health.py fails when the committed files differ from these.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from belay.api.status import UNOBSERVED
from belay.controller.status import OperatorProblem, session_status_patch
from belay.journal.events import (
    ApprovalRequest,
    Lifecycle,
    LifecycleKind,
    Payload,
    Task,
    TaskStatus,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.phase import Liveness
from belay.journal.state import fold
from belay.stores.base import RecordCorrupt, StoreUnavailable
from tests.api.kubehelpers import REPO_ROOT
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.journal.fixtures import NOW, LogBuilder, sha

CUSTOMIZATION = REPO_ROOT / "argocd/resource_customizations/belay.dev/AgentSession"
TESTDATA = CUSTOMIZATION / "testdata"
NAME, NAMESPACE = "parser-fix", "team-a"

RUNNING_STEP = Task(task_id="researcher/reproduce", status=TaskStatus.RUNNING, owner="researcher")
STARTED = Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1)


def liveness(renewed_s_ago: float | None, lease: int = 1) -> Liveness:
    """What the operator knows of the attempt holding the lease: renewed that long ago (None: no
    attempt took one)."""
    if renewed_s_ago is None:
        return Liveness(now=NOW, recovered_by="operator")
    return Liveness(
        now=NOW,
        lease=lease,
        holder=f"pod:parser-fix-harness-{lease}",
        renewed_lease=lease,
        renewed_at=NOW - timedelta(seconds=renewed_s_ago),
        recovered_by="operator",
    )


@dataclass(frozen=True)
class Case:
    name: str  # the file: testdata/<name>.yaml
    payloads: tuple[Payload, ...] = ()  # after the request
    renewed_s_ago: float | None = 2.0
    lease: int = 1  # the lease of the attempt that renewed it
    generation: int = 1
    observed: int | None = 1  # None: the status the apiserver shows before the operator's pass
    problem: OperatorProblem | None = None
    deleting: bool = False


def corrupt() -> OperatorProblem:
    message = str(RecordCorrupt(NAME, 3, "the event's link does not match the chain"))
    return OperatorProblem("RecordCorrupt", message)


def unreachable() -> OperatorProblem:
    message = str(StoreUnavailable("etcd://belay-etcd:2379: connection refused"))
    return OperatorProblem("StoreUnavailable", message, stalls=False)


CASES = [
    Case("unobserved", observed=None),
    Case("generation-not-observed", (STARTED, RUNNING_STEP), generation=2),
    Case("pending", renewed_s_ago=None),
    Case("store-unavailable", renewed_s_ago=None, problem=unreachable()),
    Case("running", (STARTED, RUNNING_STEP)),
    Case(
        "waiting-on-approval",
        (
            STARTED,
            ApprovalRequest(
                approval_id="approve-implementer.publish.3",
                operation_id="implementer.publish.3",
                tool="publish",
                payload_sha256=sha("payload"),
                summary="publish fix.patch",
            ),
        ),
    ),
    Case(
        "waiting-on-external",
        (STARTED, Wait(wait_id="ci", kind=WaitKind.ON_EXTERNAL, reason="CI", condition="pipeline green")),
    ),
    # The attempt stopped renewing its lease (frozen, or its node gone): interrupted, and the
    # operator replaces it.
    Case("interrupted", (STARTED, RUNNING_STEP), renewed_s_ago=45.0),
    Case(
        "recovering",
        (STARTED, RUNNING_STEP, Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1, reason="PodDeleted")),
        renewed_s_ago=None,
    ),
    # The replacement (lease 3: the operator advanced the lease past the lost attempt's) started
    # and restores.
    Case(
        "restoring",
        (
            STARTED,
            RUNNING_STEP,
            Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1, reason="PodDeleted"),
            Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=3, lease=3),
        ),
        lease=3,
    ),
    Case(
        "ready-for-review",
        (STARTED, Wait(wait_id="review", kind=WaitKind.READY_FOR_REVIEW, reason="r", artifact="fix.patch")),
    ),
    Case(
        "succeeded",
        (
            STARTED,
            Lifecycle(
                kind=LifecycleKind.SESSION_COMPLETED,
                reason="DeliverablesPublished",
                detail="every subtask done; deliverables: fix.patch",
            ),
        ),
    ),
    Case(
        "failed",
        (
            STARTED,
            Lifecycle(
                kind=LifecycleKind.SESSION_FAILED,
                reason="AttemptsExhausted",
                detail="1 harness attempt(s) lost; recovery.maxAttempts is 1",
            ),
        ),
        renewed_s_ago=None,
    ),
    Case(
        "recovery-failed",
        (
            STARTED,
            Lifecycle(kind=LifecycleKind.RECOVERY_FAILED, reason="UndeclaredState", detail="hash differs"),
        ),
    ),
    Case("stalled-record-corrupt", renewed_s_ago=None, problem=corrupt()),
    Case("terminating", (STARTED, RUNNING_STEP), deleting=True),
]

# What kstatus (sigs.k8s.io/cli-utils) says of each case: docs/operator.md, "What GitOps tools see".
KSTATUS = {
    "unobserved": "InProgress",
    "generation-not-observed": "InProgress",
    "pending": "InProgress",
    "store-unavailable": "InProgress",
    "running": "Current",
    "waiting-on-approval": "Current",
    "waiting-on-external": "Current",
    "interrupted": "InProgress",
    "recovering": "InProgress",
    "restoring": "InProgress",
    "ready-for-review": "Current",
    "succeeded": "Current",
    "failed": "Failed",
    "recovery-failed": "Failed",
    "stalled-record-corrupt": "Failed",
    "terminating": "Terminating",
}


def status_of(case: Case) -> dict[str, Any]:
    if case.observed is None:
        return UNOBSERVED.to_status()
    log = LogBuilder(session_id=NAME)
    if case.problem is None or case.problem.reason != "RecordCorrupt":  # a corrupt record reads as nothing
        log.add(UserInput(goal=EXAMPLE_MANIFEST["spec"]["request"]["goal"]))
    for payload in case.payloads:
        log.add(payload)
    status = session_status_patch(
        fold(log.events),
        previous_status=None,
        generation=case.observed,
        now=NOW,
        problem=case.problem,
        liveness=liveness(case.renewed_s_ago, case.lease),
    )
    return status.to_status()


def session_object(case: Case) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": NAME,
        "namespace": NAMESPACE,
        "uid": "0b7c6a52-0000-4000-8000-000000000001",
        "generation": case.generation,
        "creationTimestamp": "2026-11-29T09:00:00Z",
        "finalizers": ["belay.dev/pods-and-retention"],
    }
    if case.deleting:
        metadata["deletionTimestamp"] = "2026-11-29T12:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 0
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": metadata,
        "spec": EXAMPLE_MANIFEST["spec"],
        "status": status_of(case),
    }


HEADER = (
    "# Generated by `python -m tests.controller.argocd_cases` with the operator's status projection;\n"
    "# do not edit.\n"
)


def rendered() -> dict[str, str]:
    """File name -> YAML text, for every case."""
    return {
        f"{case.name}.yaml": HEADER + yaml.safe_dump(session_object(case), sort_keys=False, width=110)
        for case in CASES
    }


def stale_files(folder: Path = TESTDATA) -> list[str]:
    """Files that are missing, differ from what the cases make, or belong to no case."""
    expected = rendered()
    present = {p.name for p in folder.glob("*.yaml")}
    differ = {name for name in expected.keys() & present if (folder / name).read_text() != expected[name]}
    return sorted(differ | (expected.keys() ^ present))


def main() -> int:
    TESTDATA.mkdir(parents=True, exist_ok=True)
    for old in TESTDATA.glob("*.yaml"):
        old.unlink()
    for name, text in rendered().items():
        (TESTDATA / name).write_text(text)
        print(TESTDATA / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
