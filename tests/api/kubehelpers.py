"""Helpers for tests against the real control plane: install the generated CRDs once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.testenv.kube import ControlPlane

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"


def install_crds(kube: ControlPlane) -> None:
    kube.kubectl("apply", "--server-side", "--field-manager=belay-tests", "-f", str(CRD_DIR))
    for name in ("agentsessions.belay.dev", "checkpoints.belay.dev"):
        kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


def apply_json(kube: ControlPlane, obj: dict[str, Any], *extra: str, check: bool = True) -> str:
    """`kubectl apply` of one object; returns stderr (the apiserver's message on failure)."""
    result = kube.kubectl("apply", "--server-side", "-f", "-", *extra, input=json.dumps(obj), check=check)
    return result.stderr


def get_json(kube: ControlPlane, *args: str) -> dict[str, Any]:
    return dict(json.loads(kube.kubectl("get", *args, "-o", "json").stdout))
