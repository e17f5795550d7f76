"""Helpers for tests against the real control plane: install the generated CRDs once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.testenv.kube import ControlPlane

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"


def install_crds(kube: ControlPlane, timeout_s: float = 60.0) -> None:
    kube.kubectl("apply", "--server-side", "--field-manager=belay-tests", "-f", str(CRD_DIR))
    # Not `kubectl wait --for=condition=Established`: on a CRD so new that it has no conditions yet
    # it fails ("status.conditions accessor error") instead of waiting.
    deadline = time.monotonic() + timeout_s
    for name in ("agentsessions.belay.dev", "checkpoints.belay.dev"):
        while not is_established(get_json(kube, "crd", name)):
            if time.monotonic() > deadline:
                raise AssertionError(f"crd/{name} not Established after {timeout_s}s")
            time.sleep(0.2)


def is_established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def apply_json(kube: ControlPlane, obj: dict[str, Any], *extra: str, check: bool = True) -> str:
    """`kubectl apply` of one object; returns stderr (the apiserver's message on failure)."""
    result = kube.kubectl("apply", "--server-side", "-f", "-", *extra, input=json.dumps(obj), check=check)
    return result.stderr


def get_json(kube: ControlPlane, *args: str) -> dict[str, Any]:
    return dict(json.loads(kube.kubectl("get", *args, "-o", "json").stdout))
