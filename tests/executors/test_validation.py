"""An executor type that is not implemented is refused by validation before anything is recorded:
by the models (`belay run`) and by the apiserver (the CRD), with the same words. So are the fields a
managed executor does not use."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import ManifestError, parse_manifest
from tests.api.kubehelpers import install_crds
from tests.belay_cli import run_belay
from tests.executors.example import MANIFEST, SESSION, example_manifest
from tests.testenv.kube import ControlPlane

EXAMPLE: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())


def with_executor(name: str, executor: dict[str, Any]) -> dict[str, Any]:
    manifest = copy.deepcopy(EXAMPLE)
    manifest["metadata"]["name"] = name
    manifest["spec"]["executor"] = executor
    return manifest


# (case, manifest, what both the models and the apiserver must say)
REFUSED = [
    ("not-implemented", with_executor("bad-managed", {"type": "managed", "model": "m"}), "executor.type"),
    ("unknown-type", with_executor("bad-agents", {"type": "google-agents", "model": "m"}), "executor.type"),
    (
        "managed-without-model",
        with_executor("bad-model", {"type": "openai-agents", "plan": "plan.yaml"}),
        "executor.model is required",
    ),
    (
        "managed-with-base-url",
        with_executor(
            "bad-url", {"type": "anthropic-managed", "model": "m", "baseURL": "http://127.0.0.1:9/"}
        ),
        "executor.baseURL does not apply to managed executors",
    ),
    (
        "secret-on-scripted",
        with_executor("bad-secret", {"type": "scripted", "plan": "plan.yaml", "credentialsSecret": "keys"}),
        "executor.credentialsSecret does not apply",
    ),
]


@pytest.mark.parametrize(("case", "manifest", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_models_refuse_it(case: str, manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        parse_manifest(manifest)
    assert message in str(refused.value)


def test_belay_run_refuses_an_unimplemented_type_before_anything_is_recorded(tmp_path: Path) -> None:
    manifest = example_manifest(tmp_path / "manifest")
    data = yaml.safe_load(manifest.read_text())
    data["spec"]["executor"]["type"] = "managed"
    manifest.write_text(yaml.safe_dump(data))
    home = tmp_path / "home"
    result = run_belay(home, "run", str(manifest))
    assert result.returncode != 0
    assert result.stderr.startswith("error: bad manifest:") and "executor.type" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (home / "events.db").exists()
    assert not (home / "sessions" / SESSION).exists()


def test_the_managed_types_and_their_fields_are_accepted() -> None:
    for executor in (
        {"type": "openai-agents", "model": "gpt-5", "plan": "plan.yaml", "credentialsSecret": "openai-keys"},
        {"type": "anthropic-managed", "model": "claude-sonnet-4-5", "credentialsSecret": "anthropic-keys"},
    ):
        session = parse_manifest(with_executor("fine", executor))
        assert session.spec.executor.managed


@pytest.mark.testenv
def test_the_apiserver_refuses_it_with_the_same_words(kube: ControlPlane) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", "executor-validation")

    def create(manifest: dict[str, Any]) -> Any:
        return kube.kubectl(
            "create", "-n", "executor-validation", "--dry-run=server", "-f", "-",
            input=json.dumps(manifest), check=False,
        )  # fmt: skip

    failures = []
    for case, manifest, message in REFUSED:
        result = create(manifest)
        if result.returncode == 0 or message not in result.stderr:
            failures.append(f"{case}: exit {result.returncode}, expected {message!r} in: {result.stderr}")
    result = create(
        with_executor("managed-fine", {"type": "openai-agents", "model": "gpt-5", "plan": "p.yaml"})
    )
    if result.returncode != 0:
        failures.append(f"a valid openai-agents session was refused: {result.stderr}")
    assert failures == []
