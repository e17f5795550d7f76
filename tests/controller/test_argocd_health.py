"""docs/argocd-health.lua, run by a real Lua interpreter (lupa) against statuses the operator's
own status projection produces, the way Argo CD runs it (a global `obj`, a returned table)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from lupa import LuaRuntime

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
from belay.journal.state import fold
from tests.api.kubehelpers import REPO_ROOT
from tests.journal.fixtures import LogBuilder, sha

SCRIPT = (REPO_ROOT / "docs/argocd-health.lua").read_text()
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)

    def to_lua(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: to_lua(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([to_lua(v) for v in value])
        return value

    lua.globals().obj = to_lua(obj)
    result = lua.execute(SCRIPT)
    return str(result["status"]), str(result["message"])


def session(
    *payloads: Payload, generation: int = 1, observed: int = 1, stall: OperatorProblem | None = None
) -> dict[str, Any]:
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    for payload in payloads:
        log.add(payload)
    status = session_status_patch(
        fold(log.events), previous_status=None, generation=observed, now=NOW, problem=stall
    )
    return {"metadata": {"name": "parser-fix", "generation": generation}, "status": status.to_status()}


RUNNING = Task(task_id="researcher/reproduce", status=TaskStatus.RUNNING, owner="researcher")

CASES = [
    ("no-status", {"metadata": {"name": "s", "generation": 1}}, "Progressing", "Waiting for the operator"),
    ("running", session(RUNNING), "Progressing", "Running: researcher/reproduce"),
    ("not-yet-observed", session(RUNNING, generation=2, observed=1), "Progressing", "generation 2"),
    (
        "approval",
        session(
            ApprovalRequest(
                approval_id="approve-op",
                operation_id="op",
                tool="publish",
                payload_sha256=sha("p"),
                summary="s",
            )
        ),
        "Suspended",
        "Waiting on user: 1 approval(s) pending",
    ),
    (
        "external",
        session(Wait(wait_id="ci", kind=WaitKind.ON_EXTERNAL, reason="CI", condition="pipeline green")),
        "Progressing",
        "pipeline green",
    ),
    (
        "recovering",
        session(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1)),
        "Progressing",
        "Recovering",
    ),
    (
        "recovery-failed",
        session(
            Lifecycle(kind=LifecycleKind.RECOVERY_FAILED, reason="UndeclaredState", detail="hash differs")
        ),
        "Degraded",
        "hash differs",
    ),
    (
        "operator-stalled",
        session(stall=OperatorProblem("ForkSourceMissing", "no source")),
        "Degraded",
        "no source",
    ),
    (
        "review",
        session(Wait(wait_id="review", kind=WaitKind.READY_FOR_REVIEW, reason="r", artifact="fix.patch")),
        "Healthy",
        "fix.patch",
    ),
    ("succeeded", session(Lifecycle(kind=LifecycleKind.SESSION_COMPLETED, reason="done")), "Healthy", "done"),
    (
        "failed",
        session(Lifecycle(kind=LifecycleKind.SESSION_FAILED, reason="AttemptsExhausted")),
        "Degraded",
        "",
    ),
]


@pytest.mark.parametrize(("case", "obj", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_health_of_sample_statuses(case: str, obj: dict[str, Any], status: str, message: str) -> None:
    got_status, got_message = health(obj)
    assert got_status == status
    assert message in got_message
