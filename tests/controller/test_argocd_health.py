"""The Argo CD health check for AgentSessions
(argocd/resource_customizations/belay.dev/AgentSession/health.lua), judged the way Argo CD judges
it: under gopher-lua, the Lua runtime Argo CD embeds, set up as Argo CD sets it up
(tools/argocd-health), against the cases in Argo CD's own layout (health_test.yaml and testdata/,
one object per phase, made by the operator's status projection). kstatus (sigs.k8s.io/cli-utils,
tools/kstatus) is asked about the same objects. The older check under lupa (another Lua, run from
Python) stays below; the gopher-lua run is the authority."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
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
from tests.controller.argocd_cases import CASES as PHASES
from tests.controller.argocd_cases import CUSTOMIZATION, KSTATUS, session_object, stale_files
from tests.journal.fixtures import LogBuilder, sha

ROOT = CUSTOMIZATION.parents[1]  # what Argo CD calls resource_customizations/
SCRIPT = (CUSTOMIZATION / "health.lua").read_text()
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def run_cases(argocd_health_bin: Path, root: Path) -> tuple[int, list[dict[str, Any]]]:
    """Every health.lua under root against its health_test.yaml: the exit status and one result
    per case and mode (Lua's standard libraries closed, as for a script in argocd-cm; open, as
    Argo CD's own tests run its scripts)."""
    ran = subprocess.run(
        [str(argocd_health_bin), "test", str(root)], capture_output=True, text=True, timeout=60
    )
    return ran.returncode, [json.loads(line) for line in ran.stdout.splitlines()]


def test_testdata_are_what_the_operator_projects() -> None:
    assert stale_files() == [], "run `.venv/bin/python -m tests.controller.argocd_cases`"


def test_every_phase_has_its_case_and_passes_under_argo_cds_lua(argocd_health_bin: Path) -> None:
    status, results = run_cases(argocd_health_bin, ROOT)
    failed = [r for r in results if not r["passed"]]
    assert status == 0 and not failed, json.dumps(failed, indent=1)
    cases = yaml.safe_load((CUSTOMIZATION / "health_test.yaml").read_text())["tests"]
    assert [c["inputPath"] for c in cases] == [f"testdata/{c.name}.yaml" for c in PHASES]
    assert {(r["inputPath"], r["openLibs"]) for r in results} == {
        (f"testdata/{c.name}.yaml", libs) for c in PHASES for libs in (False, True)
    }


def test_the_harness_fails_what_argo_cd_would_show_differently(
    argocd_health_bin: Path, tmp_path: Path
) -> None:
    """A case whose expectation is wrong fails; a script that returns a status outside Argo CD's set
    shows Unknown, as Argo CD shows it; a script that needs a library a script in argocd-cm does
    not get (string) fails with the libraries closed, and passes with them open."""
    copy = tmp_path / "belay.dev" / "AgentSession"
    shutil.copytree(CUSTOMIZATION, copy)
    tests_file = copy / "health_test.yaml"
    cases = yaml.safe_load(tests_file.read_text())
    cases["tests"][0]["healthStatus"]["message"] = "something else"
    tests_file.write_text(yaml.safe_dump(cases))
    status, results = run_cases(argocd_health_bin, tmp_path)
    failed = {(r["inputPath"], r["got"]["message"]) for r in results if not r["passed"]}
    assert status == 1
    assert failed == {(cases["tests"][0]["inputPath"], "Waiting for the operator to observe generation 1")}

    (copy / "health.lua").write_text('return {status = "Fine", message = "all good"}\n')
    _, results = run_cases(argocd_health_bin, tmp_path)
    assert {(r["got"]["status"], r["got"]["message"]) for r in results} == {
        ("Unknown", "Lua returned an invalid health status")
    }

    (copy / "health.lua").write_text('return {status = "Healthy", message = string.upper("ok")}\n')
    cases["tests"] = [
        {"inputPath": "testdata/running.yaml", "healthStatus": {"status": "Healthy", "message": "OK"}}
    ]
    tests_file.write_text(yaml.safe_dump(cases))
    status, results = run_cases(argocd_health_bin, tmp_path)
    by_mode = {r["openLibs"]: r for r in results}
    assert status == 1 and by_mode[True]["passed"] and not by_mode[False]["passed"]
    assert "string" in by_mode[False]["error"]


@pytest.mark.parametrize("case", [c.name for c in PHASES])
def test_kstatus_reads_each_phase_as_promised(kstatus_bin: Path, case: str) -> None:
    obj = session_object(next(c for c in PHASES if c.name == case))
    ran = subprocess.run(
        [str(kstatus_bin)], input=json.dumps(obj), capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(ran.stdout)["status"] == KSTATUS[case], ran.stdout


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
