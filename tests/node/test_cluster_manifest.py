"""The example for a cluster is the example: the same session, with the paths it reads pointing
at the copy the Belay image carries."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from belay.api.agentsession import AgentSession
from tests.controller.sessions import EXAMPLE_MANIFEST
from tests.node.sessions import CLUSTER_MANIFEST

IN_IMAGE = "/usr/share/belay/examples/parser-fix"


def test_the_cluster_manifest_is_the_example_with_its_paths_in_the_image() -> None:
    cluster: dict[str, Any] = yaml.safe_load(CLUSTER_MANIFEST.read_text())
    AgentSession.model_validate(cluster)
    local = copy.deepcopy(EXAMPLE_MANIFEST)
    local["spec"]["executor"]["plan"] = f"{IN_IMAGE}/{local['spec']['executor']['plan']}"
    for sub in local["spec"]["subagents"]:
        for item in sub["inputs"]:
            item["source"], item["hostPath"] = f"{IN_IMAGE}/{item['source']}", True
    assert cluster == local
