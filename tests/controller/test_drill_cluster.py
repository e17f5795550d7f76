"""`kubectl belay drill` in the test cluster, asked for by a person whose Role grants AgentSession
access only: after the example session completed, the operator runs a copy of it whose first
attempt stops itself at the implementer's `fix` checkpoint, replaces that silent attempt, and
reports that the copy completed without repeating a step and delivered the session's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from belay.controller.drill import DRILL_OF_LABEL
from belay.controller.kube import load_api_client
from belay.controller.settings import OperatorSettings
from tests.api.kubehelpers import install_crds
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import OperatorProcess, kubectl_json, wait_for_session_end
from tests.controller.sessions_only_user import kubectl_belay, sessions_only_kubeconfig
from tests.controller.test_operator import FAULT_POINT, cluster_manifest, harness_env, tickets  # noqa: F401
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-drill"
SESSION = "parser-fix"


async def test_kubectl_belay_drill_reruns_the_session_with_an_interruption_and_compares(
    kube: ControlPlane,
    tickets: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    config_file = sessions_only_kubeconfig(kube, NAMESPACE, tmp_path / "sessions-only.kubeconfig")
    settings = OperatorSettings(
        event_store=f"sqlite://{tmp_path / 'events.db'}",
        artifact_store=f"file://{tmp_path / 'artifacts'}",
        image_pull_policy="Never",
    )
    operator = OperatorProcess(kube, NAMESPACE, settings, tmp_path / "operator.log").start()
    describe = lambda: f"operator log:\n{operator.log()[-6000:]}"  # noqa: E731
    manifest = cluster_manifest(SESSION)
    manifest["metadata"]["namespace"] = NAMESPACE
    try:
        api = load_api_client(str(kube.kubeconfig))
        with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets)):
            kube.kubectl("create", "-f", "-", input=json.dumps(manifest))
            done = wait_for_session_end(kube, NAMESPACE, SESSION, timeout=900, describe=describe)
            assert done["phase"] == "Succeeded", done

            refused = kubectl_belay(config_file, "drill", SESSION, "--at", "no-colon")
            assert refused.returncode == 1 and refused.stderr.startswith(
                "error: each --at is one fault point"
            )

            drilled = kubectl_belay(
                config_file, "drill", SESSION, "--at", FAULT_POINT, "--json", "--timeout", "900", timeout=1000
            )
            assert drilled.returncode == 0, (drilled.stdout, drilled.stderr, describe())
    finally:
        operator.stop()

    report = json.loads(drilled.stdout)
    assert report["passed"] is True and report["phase"] == "Succeeded"
    assert report["points"] == [FAULT_POINT]
    assert report["attemptsLost"] >= 1  # the stopped attempt was replaced
    assert report["stepsRunTwice"] == []
    names = {d["name"] for d in report["deliverables"]}
    assert names == {"report.md", "fix.patch"}
    assert all(d["sha256"] == d["sourceSha256"] != "" for d in report["deliverables"])
    copy = kubectl_json(kube, "get", "agentsession", report["session"], "-n", NAMESPACE)
    assert copy["metadata"]["labels"][DRILL_OF_LABEL] == SESSION
    assert copy["status"]["harnessLost"] >= 1
