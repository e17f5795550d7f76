"""A person bound to a Role that grants AgentSession access and nothing else, as `kubectl belay`
is meant to be used: a kubeconfig with that service account's token, and `kubectl belay` run as
its own program with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.api.kubehelpers import token_kubeconfig
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server

USER = "sessions-only"
VERBS = ("get", "list", "watch", "patch")


def sessions_only_rbac(namespace: str) -> str:
    return f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {USER}, namespace: {namespace}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {USER}, namespace: {namespace}}}
rules:
- apiGroups: [belay.dev]
  resources: [agentsessions]
  verbs: [{", ".join(VERBS)}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {USER}, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {USER}}}
subjects:
- {{kind: ServiceAccount, name: {USER}, namespace: {namespace}}}
"""


def can_i(kube: ControlPlane, namespace: str, verb: str, resource: str) -> bool:
    """`kubectl auth can-i` as the sessions-only user."""
    answer = kube.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        namespace,
        f"--as=system:serviceaccount:{namespace}:{USER}",
        check=False,
    )
    return answer.stdout.strip() == "yes"


def sessions_only_kubeconfig(kube: ControlPlane, namespace: str, path: Path) -> Path:
    """Bind the Role, check with `kubectl auth can-i` that it allows AgentSessions and nothing
    else this user could reach the record or the artifacts with, and write its kubeconfig."""
    kube.kubectl("apply", "-f", "-", input=sessions_only_rbac(namespace))
    for verb in VERBS:
        assert can_i(kube, namespace, verb, "agentsessions.belay.dev"), verb
    for verb, resource in (
        ("get", "secrets"),
        ("list", "secrets"),
        ("get", "pods"),
        ("create", "pods/exec"),
        ("create", "pods/portforward"),
        ("get", "services/proxy"),
        ("list", "checkpoints.belay.dev"),
        ("create", "agentsessions.belay.dev"),
        ("delete", "agentsessions.belay.dev"),
        ("list", "configmaps"),
    ):
        assert not can_i(kube, namespace, verb, resource), f"{verb} {resource}"
    token = kube.kubectl("create", "token", USER, "-n", namespace).stdout.strip()
    return token_kubeconfig(kube, path, USER, namespace, token)


def s3_credentials(s3: S3Server) -> dict[str, str]:
    """The store credentials the chart's stores.existingSecret gives the operator and every harness
    (never the person running kubectl belay)."""
    return {
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_DEFAULT_REGION": s3.region,
    }


def kubectl_belay(kubeconfig: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    plugin = Path(sys.executable).with_name("kubectl-belay")
    return subprocess.run(
        [str(plugin), *args, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=timeout
    )
