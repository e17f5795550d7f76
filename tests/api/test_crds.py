"""The generated CRDs: they match the models, they are structural, and the real apiserver refuses
what the models refuse, with the same messages."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from belay.api.agentsession import ManifestError, parse_manifest
from belay.api.crd import agentsession_crd, rendered_crds
from belay.api.generate import main as generate_main
from belay.api.generate import stale_files
from tests.api.kubehelpers import REPO_ROOT, apply_json, get_json
from tests.testenv.kube import ControlPlane

EXAMPLE = yaml.safe_load((REPO_ROOT / "examples/parser-fix/session.yaml").read_text())
HASH = "c188ef05cebdb6363660643c540c6ecabe0e3da64ccb272b018fbc5e7c3a7771"


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
    assert spec["executor"]["properties"]["plan"] == {"type": "string", "nullable": True}
    assert spec["forkFrom"]["nullable"] is True
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status"}


def _session(name: str, **changes: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(EXAMPLE)
    manifest["metadata"] = {"name": name}
    for dotted, value in changes.items():
        target = manifest
        *parents, leaf = dotted.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return manifest


_DELETE = object()
_IMPLEMENTER = EXAMPLE["spec"]["subagents"][1]

# (case, manifest, text the apiserver's message must contain)
INVALID = [
    (
        "scripted-without-plan",
        _session("bad-1", **{"spec.executor.plan": _DELETE}),
        "executor.plan is required",
    ),
    (
        "openai-without-model",
        _session("bad-2", **{"spec.executor": {"type": "openai"}}),
        "executor.model is required",
    ),
    (
        "duplicate-subagents",
        _session("bad-3", **{"spec.subagents": [_IMPLEMENTER, _IMPLEMENTER]}),
        "subagent names must be unique",
    ),
    ("no-subagents", _session("bad-4", **{"spec.subagents": []}), "should have at least 1 items"),
    (
        "unknown-network-profile",
        _session("bad-5", **{"spec.subagents.0.networkProfile": "open"}),
        'Unsupported value: "open"',
    ),
    (
        "approval-without-operation",
        _session("bad-6", **{"spec.approvals": [{"payloadSha256": HASH}]}),
        "an approval needs operationId or approvalId",
    ),
    (
        "approval-hash-not-sha256",
        _session("bad-7", **{"spec.approvals": [{"operationId": "op", "payloadSha256": "abc"}]}),
        "spec.approvals[0].payloadSha256",
    ),
    (
        "missing-goal",
        _session("bad-8", **{"spec.request.goal": _DELETE}),
        "spec.request.goal: Required value",
    ),
    (
        "zero-attempts",
        _session("bad-9", **{"spec.recovery": {"maxAttempts": 0}}),
        "greater than or equal to 1",
    ),
    ("unknown-field", _session("bad-10", **{"spec.budget": {"maxSteps": 3}}), 'unknown field "spec.budget"'),
    (
        "subagent-name-not-a-label",
        _session("bad-11", **{"spec.subagents.0.name": "Research_Team"}),
        "spec.subagents[0].name",
    ),
    ("session-name-with-dot", _session("bad.twelve"), "metadata.name must be a DNS label"),
]


@pytest.mark.parametrize(("case", "manifest", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_the_models_refuse_every_invalid_manifest(case: str, manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(manifest)


@pytest.mark.testenv
def test_apiserver_refuses_invalid_manifests_with_clear_messages(belay_crds: ControlPlane) -> None:
    kube = belay_crds
    kube.kubectl("create", "namespace", "crd-validation")
    failures = []
    for case, manifest, message in INVALID:
        result = kube.kubectl(
            "create",
            "-n",
            "crd-validation",
            "--dry-run=server",
            "-f",
            "-",
            input=json.dumps(manifest),
            check=False,
        )
        if result.returncode == 0 or message not in result.stderr:
            failures.append(f"{case}: exit {result.returncode}, expected {message!r} in: {result.stderr}")
    assert failures == []


@pytest.mark.testenv
def test_apiserver_accepts_the_example_and_keeps_fork_source_immutable(belay_crds: ControlPlane) -> None:
    kube = belay_crds
    kube.kubectl("create", "namespace", "crd-accept")
    valid = _session("forked", **{"spec.forkFrom": {"session": "parser-fix", "checkpoint": "cp-1"}})
    parse_manifest(valid)
    apply_json(kube, valid, "-n", "crd-accept")
    stored = get_json(kube, "-n", "crd-accept", "agentsession", "forked")
    assert stored["spec"]["subagents"][0]["networkProfile"] == "none"
    assert stored["spec"]["forkFrom"] == {"session": "parser-fix", "checkpoint": "cp-1"}

    moved = _session("forked", **{"spec.forkFrom": {"session": "other", "checkpoint": "cp-1"}})
    error = apply_json(kube, moved, "-n", "crd-accept", check=False)
    assert "forkFrom is immutable" in error

    columns = kube.kubectl("get", "-n", "crd-accept", "agentsessions").stdout.splitlines()[0].split()
    assert columns == ["NAME", "PHASE", "WAITING", "ON", "STEP", "AGE"]
