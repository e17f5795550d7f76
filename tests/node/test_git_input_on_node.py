"""The repository in a cluster, on the real node: the example session's inputs come from a git
server the test starts on the node's address (`git http-backend` behind Basic authentication),
at one commit, with the credentials in a Secret of the session's namespace. The harness pod
fetches them (its NetworkPolicy opens the server through `gitEgress`), the session runs to
Succeeded with the very patch its approval binds (the same bytes as the image's copy of the
repository), the record names the URL and the commit, and the password is nowhere in the record."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from belay.harness.declared import input_files
from belay.journal.events import Lifecycle, LifecycleKind
from tests.api.kubehelpers import REPO_ROOT
from tests.controller.operator_process import wait_for_session_end
from tests.git_server import authenticated_git_server
from tests.node.cluster import NodeCluster
from tests.node.sessions import SESSION, operated_session
from tests.testenv.node import NODE_IP

pytestmark = [pytest.mark.testenv, pytest.mark.node]

USERNAME, PASSWORD = "belay-reader", "git-password-" + "5a1t" * 4
SECRET = "git-credentials"


def git(repository: Path, *arguments: str) -> str:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    done = subprocess.run(
        ["git", *identity, "-C", str(repository), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def example_repository(tmp_path: Path) -> tuple[Path, str]:
    """examples/parser-fix/repo committed as it is (its files as a directory input reads them), in
    a bare repository under the served root; that commit."""
    work = tmp_path / "work"
    for name, path in input_files(REPO_ROOT / "examples/parser-fix/repo", "repo"):
        copy = work / name.removeprefix("repo/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    git(work, "init", "--quiet", "--initial-branch=main")
    git(work, "add", "-A", "--force")
    git(work, "commit", "--quiet", "-m", "the example's repository")
    root = tmp_path / "served"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(root / "confparse.git")], check=True)
    return root, git(work, "rev-parse", "HEAD")


@pytest.fixture
def git_server(example_repository: tuple[Path, str]) -> Iterator[str]:
    root, _ = example_repository
    with authenticated_git_server(root, NODE_IP, USERNAME, PASSWORD) as url:
        yield url


def with_git_inputs(manifest: dict[str, Any], url: str, revision: str) -> dict[str, Any]:
    git = {"url": url, "revision": revision, "credentialsSecret": SECRET}
    for subagent in manifest["spec"]["subagents"]:
        subagent["inputs"] = [{"git": git, "target": item["target"]} for item in subagent["inputs"]]
    return manifest


def test_a_session_fetches_its_repository_from_a_git_server_with_a_secret_of_its_namespace(
    node_cluster: NodeCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    example_repository: tuple[Path, str],
    git_server: str,
) -> None:
    _, revision = example_repository
    url = f"{git_server}/confparse.git"
    port = int(git_server.rsplit(":", 1)[1])
    with operated_session(node_cluster, "git", tmp_path, monkeypatch.setenv, git_ports=[port]) as setup:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": setup.namespace},
            "data": {
                "username": base64.b64encode(USERNAME.encode()).decode(),
                "password": base64.b64encode(PASSWORD.encode()).decode(),
            },
        }
        setup.cluster.apply([secret, with_git_inputs(setup.manifest(approved=True), url, revision)])
        done = wait_for_session_end(
            setup.cluster.kube, setup.namespace, SESSION, timeout=600, describe=setup.describe
        )
        assert done["phase"] == "Succeeded", setup.describe()
        events = setup.events()
        seeded = {
            e.payload.subagent: e.payload.detail
            for e in events
            if isinstance(e.payload, Lifecycle)
            and e.payload.kind == LifecycleKind.RESTORED
            and (e.payload.checkpoint_id or "").endswith("/inputs")
        }
        assert sorted(seeded) == ["implementer", "researcher"]
        assert all(f"repo from {url} at {revision}" in detail for detail in seeded.values()), seeded
        record = json.dumps([e.model_dump(mode="json") for e in events])
        assert (
            PASSWORD not in record
            and base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode() not in record
        )
