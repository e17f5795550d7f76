"""`kubectl belay` against the real apiserver prints no raw control character: a goal, a status
written by the operator (reasons, summaries, approval ids a model's call ids became, the
briefing's sections) and its own errors all carry ESC and other C0/C1 characters here, and every
line shows them escaped."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from belay.cli.kubectl_plugin import app
from tests.api.invalid_manifests import changed
from tests.testenv.kube import ControlPlane

HOSTILE = "start \x1b[2J\x1b]0;owned\x07 \r over \x9b31m \x7f end"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
APPROVAL = "approve-\x07\x9bop"
NAMESPACE = "plugin-output"
runner = CliRunner()


@pytest.mark.testenv
def test_brief_approve_and_errors_show_control_characters_escaped(belay_crds: ControlPlane) -> None:
    kube = belay_crds
    kube.kubectl("create", "namespace", NAMESPACE)
    # As JSON: server-side apply decodes YAML, which has no raw control characters.
    session = changed("hostile", **{"spec.request.goal": f"goal {HOSTILE}"})
    kube.kubectl("create", "-n", NAMESPACE, "-f", "-", input=json.dumps(session))
    status = {
        "phase": "WaitingOnUser",
        "waitingOn": f"approval {APPROVAL}",
        "conditions": [{"type": "Ready", "status": "False", "reason": "WaitingOnUser"}],
        "counts": {},
        "pendingApprovals": [
            {
                "approvalId": APPROVAL,
                "operationId": f"op {HOSTILE}",
                "tool": "create_ticket",
                "payloadSha256": "ab" * 32,
                "summary": f"summary {HOSTILE}",
                "command": "kubectl belay approve hostile x",
            }
        ],
        "waits": [{"waitId": "question", "kind": "on_user", "reason": f"reason {HOSTILE}"}],
        # The briefing's sections, as the operator writes them for `kubectl belay brief`.
        "briefing": {
            "waitingOnYou": [
                {
                    "kind": "approval",
                    "id": APPROVAL,
                    "summary": f"summary {HOSTILE}",
                    "command": f"kubectl belay approve hostile {APPROVAL}",
                },
                {
                    "kind": "decision",
                    "id": "question",
                    "summary": f"reason {HOSTILE}",
                    "command": 'kubectl belay answer hostile question "..."',
                },
            ]
        },
    }
    kube.kubectl(
        "patch", "-n", NAMESPACE, "agentsession", "hostile", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    where = ["-n", NAMESPACE, "--kubeconfig", str(kube.kubeconfig)]

    brief = runner.invoke(app, ["brief", "hostile", *where])
    assert brief.exit_code == 0, brief.output
    assert RAW_CONTROL.search(brief.output) is None, repr(brief.output)
    # Every control character is shown escaped, none dropped (whole CSI sequences included).
    for field in ("goal", "summary", "reason"):
        escaped = "start \\u001b[2J\\u001b]0;owned\\u0007 \\u000d over \\u009b31m \\u007f end"
        assert f"{field} {escaped}" in brief.output

    approve = runner.invoke(app, ["approve", "hostile", APPROVAL, *where])
    assert approve.exit_code == 0, approve.output
    assert RAW_CONTROL.search(approve.output) is None
    assert "approved approve-\\u0007\\u009bop" in approve.output

    missing = runner.invoke(app, ["brief", "no\x1b[31mne", *where])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: ") and RAW_CONTROL.search(missing.stderr) is None
