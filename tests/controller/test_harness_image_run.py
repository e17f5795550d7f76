"""The built Belay image, run in the project's own Docker engine: who it runs as, that its entry
points start, the tools the sandbox needs, and a sandbox server in a container driven by the
project's sandbox client."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.controller.desired import HARNESS_MODULE
from belay.controller.settings import OperatorSettings
from belay.sandbox.client import SandboxClient, SandboxUnavailable
from tests.testenv.docker_engine import TEST_LABEL, HarnessImage
from tests.testenv.network import LOOPBACK, free_port
from tests.testenv.polling import wait_until_async

pytestmark = [pytest.mark.testenv, pytest.mark.slow]

TOKEN_DIR_IN_CONTAINER = "/var/run/belay-token"
WORKSPACE_IN_CONTAINER = "/home/belay/workspace"


def test_image_runs_as_the_pods_non_root_user(harness_image: HarnessImage) -> None:
    uid = OperatorSettings().run_as_user
    configured = harness_image.engine.docker(
        "image", "inspect", "--format", "{{json .Config}}", harness_image.tag
    )
    config = json.loads(configured.stdout)
    assert config["User"] == f"{uid}:{uid}"
    assert config["Cmd"] == ["python", "-m", HARNESS_MODULE]
    ran = harness_image.run("sh", "-c", "id -u; id -g")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(uid), str(uid)]


@pytest.mark.parametrize(
    "module", [HARNESS_MODULE, "belay.controller", "belay.sandbox.server", "belay.sandbox.loopback_exec"]
)
def test_entry_point_imports(harness_image: HarnessImage, module: str) -> None:
    # find_spec would not run the module's imports; importing it (without running main) does.
    ran = harness_image.run(
        "python", "-c", f"import runpy, sys; runpy.run_module({module!r}, run_name='imported')"
    )
    assert ran.returncode == 0, ran.stderr


def test_sandbox_tools_are_installed(harness_image: HarnessImage) -> None:
    ran = harness_image.run("sh", "-c", "for tool in git patch unshare; do command -v $tool || exit 1; done")
    assert ran.returncode == 0, ran.stderr
    assert [Path(line).name for line in ran.stdout.split()] == ["git", "patch", "unshare"]


@pytest.fixture
def sandbox_container(harness_image: HarnessImage, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A sandbox server started as the operator's sandbox pods start it, on the host's loopback
    (`--network host`). Yields its endpoint and token; the container is removed afterwards."""
    token = secrets.token_hex(16)
    token_dir = tmp_path / "token"
    token_dir.mkdir(mode=0o755)
    (token_dir / "token").write_text(token)
    (token_dir / "token").chmod(0o644)  # as a Secret volume mounts it: readable by the pod's user
    token_dir.chmod(0o755)
    port = free_port()
    name = f"belay-test-sandbox-{secrets.token_hex(4)}"
    harness_image.engine.docker(
        "run", "--detach", "--rm", "--name", name, "--label", TEST_LABEL, "--network", "host",
        "--volume", f"{token_dir}:{TOKEN_DIR_IN_CONTAINER}:ro",
        harness_image.tag,
        "python", "-m", "belay.sandbox.server",
        "--workspace", WORKSPACE_IN_CONTAINER,
        "--host", LOOPBACK, "--port", str(port),
        "--token-file", f"{TOKEN_DIR_IN_CONTAINER}/token",
        "--network-profile", "none",
    )  # fmt: skip
    try:
        yield f"http://{LOOPBACK}:{port}", token
    finally:
        harness_image.engine.docker("rm", "--force", name, check=False)


async def wait_for_health(client: SandboxClient, harness_image: HarnessImage, timeout: float = 60) -> None:
    def containers() -> str:
        listed = harness_image.engine.docker("ps", "--all", "--filter", f"label={TEST_LABEL}", check=False)
        return f"containers:\n{listed.stdout}"

    await wait_until_async(
        client.health,
        "the sandbox in the image to answer",
        until=lambda _: True,  # any answer: only SandboxUnavailable means not yet
        timeout=timeout,
        interval=0.2,
        ignoring=(SandboxUnavailable,),
        describe=containers,
    )


async def test_sandbox_server_in_the_image_runs_a_command_for_the_client(
    harness_image: HarnessImage, sandbox_container: tuple[str, str]
) -> None:
    endpoint, token = sandbox_container
    async with SandboxClient(endpoint, token) as client:
        await wait_for_health(client, harness_image)
        health = await client.health()
        assert health.profile == "none"
        assert health.workspace == WORKSPACE_IN_CONTAINER

        written = await client.call("write_file", {"path": "notes.txt", "content": "from the client\n"})
        assert written["ok"] is True, written
        script = (
            "id -u && git init -q . && git add notes.txt "
            "&& git -c user.name=belay -c user.email=belay@example.invalid commit -q -m first "
            "&& git log --format=%s && cat notes.txt"
        )
        result = await client.call("run_command", {"command": script, "timeout_s": 60})

    assert result["ok"] is True, result
    output = result["output"]
    assert output["exit_code"] == 0, output
    uid = OperatorSettings().run_as_user
    assert output["stdout"].splitlines() == [str(uid), "first", "from the client"]
