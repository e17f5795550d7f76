"""Helpers for tests against the real control plane: install the generated CRDs once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.testenv.kube import ControlPlane
from tests.testenv.polling import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "crds"


def install_crds(kube: ControlPlane, timeout_s: float = 300) -> None:
    """Apply the CRDs and wait until the apiserver serves them. Polls the conditions rather than
    `kubectl wait`, which fails at once when the CRD is not yet visible to it and gives up after
    its own timeout on a loaded machine."""
    kube.kubectl("apply", "--server-side", "--field-manager=belay-tests", "-f", str(CRD_DIR))

    def not_established() -> list[str]:
        return [
            f"crd/{name}"
            for name in ("agentsessions.belay.dev", "checkpoints.belay.dev")
            if not _established(kube, name)
        ]

    wait_until(
        not_established,
        "the CRDs to be Established",
        until=lambda left: not left,
        timeout=timeout_s,
        interval=0.5,
    )


def _established(kube: ControlPlane, name: str) -> bool:
    result = kube.kubectl("get", f"crd/{name}", "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = (json.loads(result.stdout).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def apply_json(kube: ControlPlane, obj: dict[str, Any], *extra: str, check: bool = True) -> str:
    """`kubectl apply` of one object; returns stderr (the apiserver's message on failure)."""
    result = kube.kubectl("apply", "--server-side", "-f", "-", *extra, input=json.dumps(obj), check=check)
    return result.stderr


def get_json(kube: ControlPlane, *args: str) -> dict[str, Any]:
    return dict(json.loads(kube.kubectl("get", *args, "-o", "json").stdout))


def token_kubeconfig(kube: ControlPlane, path: Path, user: str, namespace: str, token: str) -> Path:
    """A kubeconfig that acts as `user` with a bearer token (a service account's), nothing more."""
    assert kube.pki is not None
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "t",
                        "cluster": {"server": kube.server, "certificate-authority": str(kube.pki.ca_cert)},
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [
                    {"name": "t", "context": {"cluster": "t", "user": user, "namespace": namespace}}
                ],
                "current-context": "t",
            }
        )
    )
    return path
