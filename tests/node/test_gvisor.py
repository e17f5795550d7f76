"""A sandbox under gVisor on the real node: the example session with its implementer's sandbox
under the RuntimeClass `gvisor` (containerd's runc shim running Debian's runsc, docs/testenv.md
"The node") and its researcher's under runc, side by side in one session.

The probe is the host kernel itself, as code in a sandbox meets it: under runc the container's
kernel is the node's (its release, and its symbol table in /proc/kallsyms, a raw kernel
interface); under gVisor it is gVisor's own, and the node's symbol table is not there to read. The
runc sandbox is the same probe getting through. The session then completes, its patch made in
the gVisor sandbox."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controller.operator_process import wait_for
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, SessionSetup, operated_session
from tests.node.test_sessions import describe, finish
from tests.testenv.node import GVISOR_HANDLER

pytestmark = [pytest.mark.testenv, pytest.mark.node]

GVISOR = "gvisor"
UNDER_GVISOR = f"{SESSION}-sbx-implementer-0"
UNDER_RUNC = f"{SESSION}-sbx-researcher-0"
# Run inside a sandbox's container: the kernel it sees, and how many symbols of it it can list.
KERNEL_PROBE = r"""
import json, os
try:
    with open("/proc/kallsyms") as symbols:
        kallsyms = sum(1 for _ in symbols)
except OSError as error:
    kallsyms = error.strerror
print(json.dumps({"release": os.uname().release, "kallsyms": kallsyms}))
"""


@pytest.fixture
def session(
    node_cluster: NodeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SessionSetup]:
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": GVISOR},
        "handler": GVISOR_HANDLER,
    }
    node_cluster.apply([runtime_class])
    try:
        with operated_session(
            node_cluster, "gvisor", tmp_path, monkeypatch.setenv, runtime_classes=[GVISOR]
        ) as setup:
            yield setup
    finally:
        node_cluster.kube.kubectl("delete", "runtimeclass", GVISOR, "--wait=false", check=False)


def runtime_handler(setup: SessionSetup, pod: str) -> str:
    """The containerd runtime the pod's sandbox was started with ("" for the default, runc)."""
    node = setup.cluster.node
    (sandbox,) = node.crictl("pods", "--quiet", "--namespace", setup.namespace, "--name", pod).stdout.split()
    return str(json.loads(node.crictl("inspectp", sandbox).stdout)["info"]["runtimeHandler"])


def kernel_seen(setup: SessionSetup, pod: str) -> dict[str, Any]:
    return dict(json.loads(setup.cluster.exec(setup.namespace, pod, "python3", "-c", KERNEL_PROBE)))


def test_a_sandbox_under_gvisor_does_not_reach_the_node_kernel_that_runc_exposes(
    session: SessionSetup,
) -> None:
    manifest = session.manifest(approved=False)
    (implementer,) = [s for s in manifest["spec"]["subagents"] if s["name"] == "implementer"]
    implementer["runtimeClassName"] = GVISOR
    session.cluster.apply([manifest])
    wait_for(
        session.waiting_for_approval,
        "the session to wait for its approval",
        timeout=300,
        describe=lambda: describe(session),
    )
    running = session.running_pods()
    assert running[UNDER_GVISOR]["spec"]["runtimeClassName"] == GVISOR
    assert "runtimeClassName" not in running[UNDER_RUNC]["spec"]
    assert runtime_handler(session, UNDER_GVISOR) == GVISOR_HANDLER
    assert runtime_handler(session, UNDER_RUNC) == ""

    node_release = os.uname().release
    under_runc = kernel_seen(session, UNDER_RUNC)
    assert under_runc["release"] == node_release, under_runc
    assert isinstance(under_runc["kallsyms"], int) and under_runc["kallsyms"] > 1000, under_runc
    under_gvisor = kernel_seen(session, UNDER_GVISOR)
    assert under_gvisor["release"] != node_release, under_gvisor
    assert under_gvisor["kallsyms"] == "No such file or directory", under_gvisor

    done = finish(session)
    assert {d["name"] for d in done["deliverables"]} >= {"fix.patch", "report.md"}
