"""The generated CRDs: they match the models, they are structural, and the real apiserver stores a
valid session. What it refuses, and with which message, is the shared table's business
(tests/api/invalid_manifests.py, run by test_invalid_manifests.py here and in tests/cli)."""

from __future__ import annotations

from typing import Any

import pytest

from belay.api.agentsession import parse_manifest
from belay.api.crd import agentsession_crd, rendered_crds
from belay.api.generate import main as generate_main
from belay.api.generate import stale_files
from tests.api.invalid_manifests import changed
from tests.api.kubehelpers import REPO_ROOT, apply_json, get_json
from tests.testenv.kube import ControlPlane


def test_committed_crds_are_exactly_what_the_models_generate() -> None:
    assert stale_files(REPO_ROOT) == []


def test_generator_writes_both_folders_and_check_detects_drift(tmp_path: Any) -> None:
    assert generate_main(["--root", str(tmp_path)]) == 0
    for folder in ("crds", "charts/belay/crds"):
        assert sorted(p.name for p in (tmp_path / folder).iterdir()) == sorted(rendered_crds())
    assert generate_main(["--root", str(tmp_path), "--check"]) == 0
    edited = tmp_path / "charts/belay/crds/belay.dev_checkpoints.yaml"
    edited.write_text(edited.read_text().replace("Next Step", "Next"))
    assert stale_files(tmp_path) == [edited]
    assert generate_main(["--root", str(tmp_path), "--check"]) == 1


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _walk(value, f"{path}[{index}]")
    return found


def test_schema_is_structural_with_inlined_references_and_nullable_options() -> None:
    schema = agentsession_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "const" not in node, path
        assert node.get("additionalProperties") is not False, path
        if "properties" in node:
            assert node.get("type") == "object", path
    spec = schema["properties"]["spec"]["properties"]
    assert spec["executor"]["properties"]["plan"] == {
        "type": "string",
        "nullable": True,
        "minLength": 1,
        "maxLength": 4096,
    }
    assert spec["forkFrom"]["nullable"] is True
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status"}


@pytest.mark.testenv
def test_apiserver_stores_a_fork_with_its_defaults_and_shows_the_columns(belay_crds: ControlPlane) -> None:
    kube = belay_crds
    kube.kubectl("create", "namespace", "crd-accept")
    valid = changed("forked", **{"spec.forkFrom": {"session": "parser-fix", "checkpoint": "cp-1"}})
    parse_manifest(valid)
    apply_json(kube, valid, "-n", "crd-accept")
    stored = get_json(kube, "-n", "crd-accept", "agentsession", "forked")
    assert stored["spec"]["subagents"][0]["networkProfile"] == "none"
    assert stored["spec"]["forkFrom"] == {"session": "parser-fix", "checkpoint": "cp-1"}

    columns = kube.kubectl("get", "-n", "crd-accept", "agentsessions").stdout.splitlines()[0].split()
    assert columns == ["NAME", "PHASE", "WAITING", "ON", "STEP", "AGE"]
