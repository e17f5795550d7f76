"""kubeconform (strict) against the JSON schemas tests/json_schemas.py makes from the generated
CRDs and the pinned Kubernetes version's OpenAPI: the check `make lint` runs (hack/kubeconform.sh)
passes on the rendered chart and every example manifest, and refuses what the apiserver would:
an unknown field in the spec, the metadata or the chart's Deployment, a value of the wrong type,
an executor type that is not implemented."""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.kubehelpers import REPO_ROOT
from tests.controller.test_chart import REQUIRED
from tests.json_schemas import write_schemas
from tests.testenv.availability import unavailable
from tests.testenv.binaries import cache_dir, component

EXAMPLE = yaml.safe_load((REPO_ROOT / "examples/parser-fix/session.yaml").read_text())
LOCATION = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}{{ .StrictSuffix }}.json"


@pytest.fixture(scope="module")
def swagger() -> Path:
    """Kubernetes' OpenAPI document, from the module the control plane is built from."""
    kube = component("kubernetes")
    path = cache_dir() / "go/mod" / f"k8s.io/kubernetes@{kube.version}" / "api/openapi-spec/swagger.json"
    if not path.is_file():
        unavailable(f"{path} is missing; run `bash hack/{kube.build_script}`")
    return path


def kubeconform(kubeconform_bin: Path, swagger: Path, tmp_path: Path, *objects: dict[str, Any]) -> str:
    """kubeconform's verdict on the objects, one file each; raises when it passes them."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = []
    for index, obj in enumerate(objects):
        files.append(tmp_path / f"{index}.yaml")
        files[-1].write_text(yaml.safe_dump(obj))
    write_schemas(swagger, sorted((REPO_ROOT / "crds").glob("*.yaml")), tmp_path / "schemas", files)
    ran = subprocess.run(
        [
            str(kubeconform_bin),
            "-strict",
            "-schema-location",
            f"{tmp_path}/schemas/{LOCATION}",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return ran.stdout if ran.returncode else ""


def test_the_rendered_chart_and_every_example_pass_as_make_lint_checks_them(
    helm_bin: Path, kubeconform_bin: Path
) -> None:
    ran = subprocess.run(
        ["bash", str(REPO_ROOT / "hack/kubeconform.sh")], capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("1 chart(s) linted, 0 chart(s) failed") == 2  # every knob; the chart's etcd
    found = re.search(
        r"(\d+) resources found in (\d+) files - Valid: (\d+), Invalid: 0, Errors: 0, Skipped: 1", ran.stdout
    )
    assert found, ran.stdout
    examples = [p for p in (REPO_ROOT / "examples").rglob("*.yaml") if "kind: AgentSession" in p.read_text()]
    assert len(examples) >= 5 and int(found.group(2)) == len(examples) + 2, ran.stdout  # + the 2 charts


def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    manifest = copy.deepcopy(EXAMPLE)
    edit(manifest)
    return manifest


OFF_SCHEMA = {
    "unknown spec field": (
        changed(lambda m: m["spec"].update(budget={"maxModelCalls": 3})),
        "at '/spec': additional properties 'budget' not allowed",
    ),
    "unknown metadata field": (
        changed(lambda m: m["metadata"].update(labelz={"a": "b"})),
        "at '/metadata': additional properties 'labelz' not allowed",
    ),
    "a number as a string": (
        changed(lambda m: m["spec"].update(recovery={"maxAttempts": "3"})),
        "at '/spec/recovery/maxAttempts': got string, want integer",
    ),
    "an executor that is not implemented": (
        changed(lambda m: m["spec"]["executor"].update(type="managed")),
        "at '/spec/executor/type'",
    ),
}


@pytest.mark.parametrize("case", sorted(OFF_SCHEMA))
def test_a_session_off_the_schema_is_refused(
    kubeconform_bin: Path, swagger: Path, tmp_path: Path, case: str
) -> None:
    manifest, message = OFF_SCHEMA[case]
    assert kubeconform(kubeconform_bin, swagger, tmp_path / "valid", EXAMPLE) == ""
    assert message in kubeconform(kubeconform_bin, swagger, tmp_path / "invalid", manifest)


def test_a_nullable_field_may_be_null(kubeconform_bin: Path, swagger: Path, tmp_path: Path) -> None:
    manifest = changed(lambda m: m["spec"]["executor"].update(model=None))
    assert kubeconform(kubeconform_bin, swagger, tmp_path, manifest) == ""


def test_a_misspelled_field_in_the_charts_deployment_is_refused(
    helm_bin: Path, kubeconform_bin: Path, swagger: Path, tmp_path: Path
) -> None:
    rendered = subprocess.run(
        [str(helm_bin), "template", "belay", str(REPO_ROOT / "charts/belay"), *REQUIRED],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    [deployment] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    assert kubeconform(kubeconform_bin, swagger, tmp_path / "valid", deployment) == ""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["imagePulPolicy"] = container.pop("imagePullPolicy")
    refused = kubeconform(kubeconform_bin, swagger, tmp_path / "invalid", deployment)
    assert "additional properties 'imagePulPolicy' not allowed" in refused
