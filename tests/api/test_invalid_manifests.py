"""The real apiserver, with the generated CRDs, refuses every invalid manifest of the shared table
(tests/api/invalid_manifests.py) with the case's message, the message `belay run` gives, and
stores nothing: a refused create leaves no object, a refused update leaves the stored one as it
was."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.api.invalid_manifests import APISERVER_ONLY, BOTH, Case, valid_manifest
from tests.api.kubehelpers import apply_json, get_json
from tests.testenv.kube import ControlPlane

NAMESPACE = "invalid-manifests"


@pytest.fixture(scope="module")
def apiserver(belay_crds: ControlPlane) -> Iterator[ControlPlane]:
    belay_crds.kubectl("create", "namespace", NAMESPACE)
    try:
        yield belay_crds
    finally:
        belay_crds.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def stored_names(kube: ControlPlane) -> list[str]:
    listed = get_json(kube, "-n", NAMESPACE, "agentsessions")
    return sorted(item["metadata"]["name"] for item in listed["items"])


@pytest.mark.testenv
def test_the_apiserver_accepts_the_valid_manifest_the_cases_derive_from(apiserver: ControlPlane) -> None:
    created = apiserver.kubectl(
        "create",
        "-n",
        NAMESPACE,
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(valid_manifest()),
    )
    assert json.loads(created.stdout)["metadata"]["name"] == "valid"


@pytest.mark.testenv
@pytest.mark.parametrize("case", BOTH + APISERVER_ONLY, ids=[case.name for case in BOTH + APISERVER_ONLY])
def test_the_apiserver_refuses_the_manifest_with_its_message_and_stores_nothing(
    apiserver: ControlPlane, case: Case
) -> None:
    kube = apiserver
    name = case.manifest["metadata"]["name"]
    if case.earlier is None:
        result = kube.kubectl(
            "create", "-n", NAMESPACE, "-f", "-", input=json.dumps(case.manifest), check=False
        )
        assert result.returncode != 0, f"accepted: {result.stdout}"
        assert case.message in result.stderr
        assert name not in stored_names(kube)
        return
    apply_json(kube, case.earlier, "-n", NAMESPACE)
    stored = get_json(kube, "-n", NAMESPACE, "agentsession", name)
    try:
        error = apply_json(kube, case.manifest, "-n", NAMESPACE, check=False)
        assert case.message in error
        after = get_json(kube, "-n", NAMESPACE, "agentsession", name)
        assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        assert after["spec"] == stored["spec"]
    finally:
        kube.kubectl("delete", "-n", NAMESPACE, "agentsession", name)
