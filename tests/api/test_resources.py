"""A subagent's resource walls in the manifest: defaults when left out, bounds refused with the
apiserver's message, and the figures reach the CRD the operator installs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from belay.api.agentsession import AgentSession, describe_validation_error
from belay.api.crd import agentsession_crd
from belay.api.resources import SandboxResources
from tests.api.invalid_manifests import changed


def subagent_resources(manifest: dict[str, Any]) -> SandboxResources:
    return AgentSession.model_validate(manifest).spec.subagents[0].resources


def test_a_subagent_without_resources_gets_the_defaults() -> None:
    resources = subagent_resources(changed("defaults"))
    assert resources == SandboxResources()
    assert (resources.processes, resources.memory_mib, resources.disk_mib, resources.command_seconds) == (
        1024,
        2048,
        4096,
        600,
    )


def test_figures_in_the_manifest_are_read_per_subagent() -> None:
    manifest = changed("small", **{"spec.subagents.0.resources": {"processes": 64, "diskMib": 16}})
    resources = subagent_resources(manifest)
    assert (resources.processes, resources.disk_mib, resources.memory_mib) == (64, 16, 2048)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("processes", 8, "should be greater than or equal to 32"),
        ("processes", 100000, "should be less than or equal to 65536"),
        ("memoryMib", 64, "should be greater than or equal to 128"),
        ("diskMib", 0, "should be greater than or equal to 16"),
        ("commandSeconds", 0, "should be greater than or equal to 1"),
        ("commandSeconds", "60", "spec.subagents[0].resources.commandSeconds"),
    ],
)
def test_a_figure_out_of_bounds_is_refused_naming_the_field(field: str, value: Any, message: str) -> None:
    manifest = changed("bounds", **{"spec.subagents.0.resources": {field: value}})
    with pytest.raises(ValidationError) as refused:
        AgentSession.model_validate(manifest)
    described = describe_validation_error(refused.value)
    assert f"spec.subagents[0].resources.{field}" in described
    assert message in described


def test_the_crd_carries_the_bounds_for_the_apiserver() -> None:
    schema = agentsession_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    subagent = schema["properties"]["spec"]["properties"]["subagents"]["items"]
    resources = subagent["properties"]["resources"]["properties"]
    assert resources["processes"]["minimum"] == 32
    assert resources["processes"]["maximum"] == 65536
    assert resources["diskMib"]["minimum"] == 16
