"""Every way of naming a file outside the workspace is refused, by every endpoint."""

from __future__ import annotations

import hashlib

import pytest

from belay.sandbox.client import SandboxError, WorkspaceRefused
from belay.sandbox.local import LocalSandbox

# Each test here touches only its own paths, so the module shares one sandbox.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def sandbox(shared_sandbox: LocalSandbox) -> LocalSandbox:
    return shared_sandbox


ESCAPING_NAMES = ["../outside.txt", "a/../../outside.txt", "/tmp/outside.txt"]


async def test_tools_refuse_escaping_paths(sandbox: LocalSandbox) -> None:
    outside = sandbox.workspace.parent / "outside.txt"
    for name in ESCAPING_NAMES:
        for tool, arguments in [
            ("write_file", {"path": name, "content": "x"}),
            ("read_file", {"path": name}),
            ("list_files", {"path": name}),
            ("run_command", {"command": "true", "timeout_s": 5, "cwd": name}),
        ]:
            result = await sandbox.client.call(tool, arguments)
            assert result["ok"] is False, (tool, result)
            assert "path" in result["error"]
    assert not outside.exists()


async def test_tools_refuse_a_symlink_planted_by_a_command(sandbox: LocalSandbox) -> None:
    target = sandbox.workspace.parent / "host-dir"
    target.mkdir()
    (target / "host.txt").write_text("host")
    await sandbox.client.call("run_command", {"command": f"mkdir planted && ln -s {target} planted/escape"})
    assert (await sandbox.client.call("read_file", {"path": "planted/escape/host.txt"}))["ok"] is False
    written = await sandbox.client.call("write_file", {"path": "planted/escape/new.txt", "content": "x"})
    assert written["ok"] is False
    assert not (target / "new.txt").exists()
    listed = await sandbox.client.call("list_files", {"path": "planted"})
    assert listed["output"]["files"] == ["planted/escape"]
    with pytest.raises(SandboxError, match="symlink"):
        await sandbox.client.get_file("planted/escape/host.txt")


async def test_raw_file_endpoints_refuse_escaping_paths(sandbox: LocalSandbox) -> None:
    data = b"x"
    for name in ESCAPING_NAMES:
        with pytest.raises(SandboxError, match=r"escapes|absolute") as caught:
            await sandbox.client.put_file(name, data, hashlib.sha256(data).hexdigest())
        assert caught.value.status == 400
        with pytest.raises(SandboxError, match=r"escapes|absolute"):
            await sandbox.client.get_file(name)
    assert not (sandbox.workspace.parent / "outside.txt").exists()


async def test_manifest_refuses_escaping_paths(sandbox: LocalSandbox) -> None:
    (sandbox.workspace.parent / "outside-manifest.txt").write_text("o")
    with pytest.raises(SandboxError, match="escapes") as caught:
        await sandbox.client.manifest(["../outside-manifest.txt"])
    assert caught.value.status == 400


# A declared path whose content the sandbox will not describe, planted by a command, and the rule
# the manifest names for it (the harness hands both to the agent as its step's failure).
REFUSED_CONTENT = {
    "escape": (
        "mkdir -p {host} && echo h > {host}/h.txt && ln -s {host} refused-escape",
        "refused-escape/h.txt",
    ),
    "symlink": ("ln -s /etc/passwd refused-link.txt", "refused-link.txt"),
    "hard-link": ("echo mine > refused-own.txt && ln refused-own.txt refused-hard.txt", "refused-hard.txt"),
    "fifo": ("mkfifo refused-pipe", "refused-pipe"),
    "socket": (
        "python -c \"import socket; socket.socket(socket.AF_UNIX).bind('refused-socket')\"",
        "refused-socket",
    ),
}


@pytest.mark.parametrize("rule", sorted(REFUSED_CONTENT))
async def test_manifest_names_the_path_and_the_rule_of_refused_content(
    sandbox: LocalSandbox, rule: str
) -> None:
    command, name = REFUSED_CONTENT[rule]
    host = sandbox.workspace.parent / "refused-host"
    planted = await sandbox.client.call("run_command", {"command": command.format(host=host)})
    assert planted["ok"] and planted["output"]["exit_code"] == 0, planted
    with pytest.raises(WorkspaceRefused) as caught:
        await sandbox.client.manifest([name])
    assert (caught.value.path, caught.value.rule) == (name, rule)
    assert name in str(caught.value) and f"({rule})" in str(caught.value)
