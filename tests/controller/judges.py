"""The platform's own tools asked about live objects: kstatus (tools/kstatus, status.Compute of
sigs.k8s.io/cli-utils) and Argo CD's health check under gopher-lua (tools/argocd-health), both fed
the object exactly as `kubectl get -o json` returns it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.controller.argocd_cases import CUSTOMIZATION
from tests.testenv.kube import ControlPlane

HEALTH_SCRIPT = CUSTOMIZATION / "health.lua"


@dataclass(frozen=True)
class Verdict:
    obj: dict[str, Any]  # the object both tools were given
    kstatus: str
    kstatus_message: str
    argocd: str
    argocd_message: str

    @property
    def phase(self) -> str:
        return str((self.obj.get("status") or {}).get("phase", ""))

    def __str__(self) -> str:
        return (
            f"phase {self.phase!r}: kstatus {self.kstatus} ({self.kstatus_message}); "
            f"Argo CD {self.argocd} ({self.argocd_message}); "
            f"conditions {json.dumps((self.obj.get('status') or {}).get('conditions'))}"
        )


def _run(argv: list[str], obj: dict[str, Any]) -> dict[str, Any]:
    ran = subprocess.run(argv, input=json.dumps(obj), capture_output=True, text=True, timeout=30, check=True)
    return dict(json.loads(ran.stdout.splitlines()[0]))


def judge(obj: dict[str, Any], kstatus_bin: Path, argocd_health_bin: Path) -> Verdict:
    kstatus = _run([str(kstatus_bin)], obj)
    argocd = _run([str(argocd_health_bin), "eval", str(HEALTH_SCRIPT)], obj)
    return Verdict(obj, kstatus["status"], kstatus["message"], argocd["status"], argocd["message"])


@dataclass(frozen=True)
class Judges:
    kube: ControlPlane
    namespace: str
    kstatus_bin: Path
    argocd_health_bin: Path

    def get(self, *resource: str) -> dict[str, Any]:
        got = self.kube.kubectl("get", *resource, "-n", self.namespace, "-o", "json", check=False)
        return dict(json.loads(got.stdout)) if got.returncode == 0 else {}

    def session(self, name: str) -> Verdict | None:
        """What both tools say of the session as it is now (None while it does not exist)."""
        obj = self.get("agentsession", name)
        return judge(obj, self.kstatus_bin, self.argocd_health_bin) if obj else None

    def kstatus_of_list(self, *resource: str) -> list[dict[str, Any]]:
        listed = subprocess.run(
            [str(self.kstatus_bin)],
            input=json.dumps(self.get(*resource)),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return [json.loads(line) for line in listed.stdout.splitlines()]

    def wait(self, name: str, condition: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """`kubectl wait --for=<condition> agentsession/<name>`, as docs/operator.md spells it."""
        return self.kube.kubectl(
            "wait",
            f"--for={condition}",
            f"agentsession/{name}",
            "-n",
            self.namespace,
            f"--timeout={timeout_s:g}s",
            check=False,
        )
