"""Every `kubectl belay` action, run by a person bound to a Role that grants AgentSession access
and nothing else (checked with `kubectl auth can-i`), against the real operator with a real event
store and a real S3 artifact store: brief, approve (an operation, and a yes to an external wait),
reject, answer, reconcile, message (to a subagent whose turn ended without its deliverable), amend,
artifacts, artifacts get, events and report. Each decision is
written into the AgentSession's spec and must arrive in the session record, recorded by the
operator; the deliverable and the events are read from the artifact store with the person's own
access to it (their AWS credentials, which the plugin gets in its environment): the status names
them by their address in the store, never by a presigned URL that anyone who may read the status
would hold as a bearer token.

The session's record is written first, standing where every action has something to act on; no
harness runs (no kubelet here), so the operator's recovery of the attempt runs beside the
decisions without moving the record on."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from belay.controller import names
from belay.controller.settings import OperatorSettings
from belay.journal.events import (
    Actor,
    ApprovalRequest,
    Artifact,
    EffectClass,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    OperationOutcome,
    Payload,
    Task,
    TaskStatus,
    ToolRequest,
    UserInput,
    Wait,
    WaitKind,
)
from belay.journal.state import SessionState, fold
from belay.stores.factory import open_artifact_store, open_event_store
from tests.api.kubehelpers import install_crds
from tests.controller.operator_process import OperatorProcess, agentsession_status, wait_for
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.controller.sessions_only_user import USER, s3_credentials, sessions_only_kubeconfig
from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until_async
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-actions"
SESSION = "decide-all"
BUCKET = "belay-actions"
GOAL = "Publish the release notes."
HARNESS = Actor(kind="harness", attempt=1, harness_version="0.1.0", subagent="worker")
REPORT = b"# Release notes\nAll fixed.\n"
ENDED = "turn-ended-worker.work.4"  # the worker's turn ended without its deliverable


def _request(op: str, tool: str, effect: EffectClass) -> ToolRequest:
    return ToolRequest(
        operation_id=op,
        tool=tool,
        effect=effect,
        step="worker/work",
        subagent="worker",
        payload_sha256="cd" * 32,
    )


def history(report: Artifact) -> list[Payload]:
    """Two operations asking for approval, an external wait, a question, an operation whose
    outcome is unknown, and a deliverable."""
    approvals: list[Payload] = []
    for op, tool in (("worker.publish.1", "publish_deliverable"), ("worker.push.2", "git_push")):
        approvals += [
            _request(op, tool, EffectClass.IDEMPOTENT),
            ApprovalRequest(
                approval_id=f"approve-{op}",
                operation_id=op,
                tool=tool,
                payload_sha256="cd" * 32,
                summary=tool,
            ),
        ]
    return [
        Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1),
        Task(task_id="worker", status=TaskStatus.RUNNING, owner="worker"),
        Task(task_id="worker/work", title="Work", status=TaskStatus.RUNNING, owner="worker"),
        report,
        *approvals,
        Wait(wait_id="wait-worker.ci.1", kind=WaitKind.ON_EXTERNAL, reason="CI runs", condition="ci-green"),
        Wait(wait_id="question-1", kind=WaitKind.ON_USER, reason="Which changelog format?"),
        Wait(
            wait_id=ENDED,
            kind=WaitKind.ON_USER,
            reason="worker ended its turn without final.md, which it owes",
            owed="final.md",
        ),
        _request("worker.deploy.3", "run_command", EffectClass.UNSAFE),
        OperationOutcome(
            operation_id="worker.deploy.3", outcome="unknown", detail="harness lost before the result"
        ),
    ]


def manifest() -> dict[str, Any]:
    session = copy.deepcopy(EXAMPLE_MANIFEST)
    session["metadata"] = {"name": SESSION, "namespace": NAMESPACE}
    session["spec"]["request"] = {"goal": GOAL}
    del session["spec"]["approvals"]
    return session


def waits_metric(operator: OperatorProcess) -> tuple[float, ...]:
    """belay_waits of the operator, by kind: (user, external, review)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "belay_waits"
    }
    return tuple(values.get(kind, 0.0) for kind in ("user", "external", "review"))


# The person's own access to the artifact store, given to the plugin for the commands that read it.
READER: dict[str, str] = {}


def kubectl_belay(
    kubeconfig: Path, *args: str, reads_store: bool = False
) -> subprocess.CompletedProcess[str]:
    """The plugin as its own program, with no store location or credential in its environment but
    the person's own access to the artifact store, for the commands that read it."""
    plugin = Path(sys.executable).with_name("kubectl-belay")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BELAY_"))}
    if reads_store:
        env.update(READER)
    return subprocess.run(
        [str(plugin), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


async def test_every_kubectl_belay_action_works_for_a_user_with_agentsession_access_only(
    kube: ControlPlane, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    config_file = sessions_only_kubeconfig(kube, NAMESPACE, tmp_path / "sessions-only.kubeconfig")

    s3_server.client().create_bucket(Bucket=BUCKET)
    for key, value in s3_credentials(s3_server).items():
        monkeypatch.setenv(key, value)
    READER.update(s3_credentials(s3_server))
    events_url, artifacts_url = f"sqlite://{tmp_path / 'events.db'}", f"s3://{BUCKET}/actions"
    store = open_event_store(events_url)
    ref = open_artifact_store(artifacts_url).put(REPORT, media_type="text/markdown")
    report = Artifact(name="notes.md", ref=ref, deliverable=True, subagent="worker", description="the notes")
    # Under the session's bare name, as records were written before they were keyed by namespace:
    # the operator moves it to the session's own key on its first pass.
    await store.acquire_lease(SESSION, "pod:decide-all-harness-1")
    await store.append(
        SESSION, [EventDraft(payload=UserInput(goal=GOAL), actor=Actor(kind="user", name="t"))]
    )
    await store.append(SESSION, [EventDraft(payload=p, actor=HARNESS) for p in history(report)], lease=1)

    settings = OperatorSettings(
        event_store=events_url, artifact_store=artifacts_url, image_pull_policy="Never"
    )
    operator = OperatorProcess(kube, NAMESPACE, settings, tmp_path / "operator.log").start()
    describe = lambda: f"operator log:\n{operator.log()[-4000:]}"  # noqa: E731

    async def record() -> SessionState:
        return fold(await store.read(names.record_id(NAMESPACE, SESSION)))

    try:
        kube.kubectl("create", "-f", "-", input=json.dumps(manifest()))
        status = wait_for(
            lambda: (s := agentsession_status(kube, NAMESPACE, SESSION)).get("deliverables") and s,
            "the operator to project the record",
            describe=describe,
        )
        assert [a["approvalId"] for a in status["pendingApprovals"]] == [
            "approve-worker.publish.1",
            "approve-worker.push.2",
        ]
        assert all(
            a["command"].startswith("kubectl belay approve decide-all ") for a in status["pendingApprovals"]
        )
        assert (
            status["deliverables"][0]["command"]
            == "kubectl belay artifacts get decide-all notes.md -o notes.md"
        )

        # The operator's gauges count what the session waits on: two approvals, the question, the
        # turn's end and the unknown outcome are the user's; the CI condition is external.
        assert wait_for(
            lambda: waits_metric(operator) == (5, 1, 0) or None, "the waits gauges", describe=describe
        )

        brief = kubectl_belay(config_file, "brief", SESSION)
        assert brief.returncode == 0, brief.stderr
        assert "kubectl belay approve decide-all approve-worker.publish.1" in brief.stdout
        # The page `belay brief` prints, from the status alone: Checkpoints are not this user's to list.
        assert "decision question-1: " in brief.stdout
        assert "reconciliation worker.deploy.3: " in brief.stdout
        assert "run: kubectl belay reconcile decide-all worker.deploy.3 --succeeded" in brief.stdout
        assert 'run: kubectl belay message decide-all "..."' in brief.stdout

        drawn = kubectl_belay(config_file, "report", SESSION, "-o", str(tmp_path / "report.html"))
        assert drawn.returncode == 0, drawn.stderr
        assert "approve-worker.publish.1" in (tmp_path / "report.html").read_text()

        listed = kubectl_belay(config_file, "artifacts", SESSION)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1].split()[:4] == [
            "notes.md",
            "worker",
            str(len(REPORT)),
            ref.sha256,
        ]
        # The status names every blob by its address in the store, never by a presigned URL.
        published = json.dumps(agentsession_status(kube, NAMESPACE, SESSION))
        assert f"s3://{BUCKET}/actions/blobs/" in published
        assert "X-Amz-" not in published and "Signature" not in published
        target = ["artifacts", "get", SESSION, "notes.md", "-o", str(tmp_path / "n.md")]
        refused = kubectl_belay(config_file, *target)
        assert refused.returncode == 1 and "no AWS credentials in this environment" in refused.stderr
        assert not (tmp_path / "n.md").exists()
        fetched = kubectl_belay(config_file, *target, reads_store=True)
        assert fetched.returncode == 0, fetched.stderr
        assert (tmp_path / "n.md").read_bytes() == REPORT

        actions = [
            ("approve", SESSION, "approve-worker.publish.1"),
            ("approve", SESSION, "wait-worker.ci.1"),
            ("reject", SESSION, "approve-worker.push.2", "-m", "not before the review"),
            ("answer", SESSION, "question-1", "Keep a Changelog"),
            ("message", SESSION, "Publish final.md too."),
            ("reconcile", SESSION, "worker.deploy.3", "--failed", "-m", "nothing was deployed"),
            (
                "amend",
                SESSION,
                "--goal",
                "Publish the release notes and the changelog.",
                "--part",
                "scope=docs",
            ),
        ]
        # Before it is answered: a message to a subagent that does not wait for one is refused.
        refused = kubectl_belay(config_file, "message", SESSION, "x", "--to", "nobody")
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.startswith(
            "error: nobody does not wait for a message in decide-all (waiting: worker)"
        )
        for action in actions:
            done = kubectl_belay(config_file, *action)
            assert done.returncode == 0, (action, done.stderr)
        for wrong, message in (
            (
                ("approve", SESSION, "no-such-id"),
                "error: no approval or wait 'no-such-id' in session decide-all",
            ),
            (("reconcile", SESSION, "worker.deploy.3"), "error: say whether it took effect"),
            (("answer", SESSION, "no-such-wait", "x"), "error: no wait 'no-such-wait' in session decide-all"),
            (
                ("artifacts", "get", SESSION, "absent.md"),
                "error: session decide-all has no artifact 'absent.md'",
            ),
        ):
            refused = kubectl_belay(config_file, *wrong)
            assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
            assert refused.stderr.startswith(message), refused.stderr

        # The operator records each one on its next passes.
        def every_decision_recorded(state: SessionState) -> bool:
            return (
                state.approvals["approve-worker.publish.1"].decision is not None
                and state.approvals["approve-worker.push.2"].decision is not None
                and state.waits["wait-worker.ci.1"].resolved
                and state.waits["question-1"].resolved
                and state.waits[ENDED].resolved
                and "worker.deploy.3" not in state.unknown_outcomes
                and state.request.goal != GOAL
            )

        state = await wait_until_async(
            record,
            "every decision recorded",
            until=every_decision_recorded,
            timeout=300,
            interval=0.5,
            describe=describe,
        )
        granted = state.approvals["approve-worker.publish.1"]
        assert (granted.decision, granted.decided_by) == ("granted", "spec")
        rejected = state.approvals["approve-worker.push.2"]
        assert (rejected.decision, rejected.decided_by) == ("rejected", USER)  # the kubeconfig's user
        assert "not before the review" in rejected.decision_reason
        assert "Keep a Changelog" in state.waits["question-1"].reason
        said = state.user_messages[ENDED]
        assert (said.subagent, said.text, said.by) == ("worker", "Publish final.md too.", USER)
        assert state.request.goal == "Publish the release notes and the changelog."
        assert state.request.parts["scope"] == "docs"
        assert wait_for(
            lambda: waits_metric(operator) == (0, 0, 0) or None, "the gauges at 0", describe=describe
        )
        # The record itself, exported by the operator on request and read from the store.
        exported = kubectl_belay(config_file, "events", SESSION, "--json", reads_store=True)
        assert exported.returncode == 0, exported.stderr
        lines = [json.loads(line) for line in exported.stdout.splitlines()]
        assert [line["seq"] for line in lines] == list(range(1, state.last_seq + 1))
        assert lines[0]["payload"]["goal"] == GOAL
        assert any(line["type"] == "scope_change" for line in lines)
        text = kubectl_belay(config_file, "events", SESSION, "--from", "5", reads_store=True)
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines()[0].split()[0] == "5"
        assert f"approval approve-worker.push.2 rejected by {USER}" in text.stdout
        assert "waits for approval approve-worker.publish.1: kubectl belay approve decide-all" in text.stdout
        spec = json.loads(kube.kubectl("get", "agentsession", SESSION, "-n", NAMESPACE, "-o", "json").stdout)[
            "spec"
        ]
        # The rejection of an operation is in spec.rejections; the other decisions in spec.decisions.
        assert [r["item"] for r in spec["rejections"]] == ["approve-worker.push.2"]
        assert [(d["id"], d["verdict"]) for d in spec["decisions"]] == [
            ("wait-worker.ci.1", "yes"),
            ("question-1", "yes"),
            (ENDED, "yes"),
            ("worker.deploy.3", "failed"),
        ]
    finally:
        operator.stop()
        await store.close()
