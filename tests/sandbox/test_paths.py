"""Every way of naming a file outside the workspace is refused, by every endpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from belay.sandbox import workspace
from belay.sandbox.client import SandboxError
from belay.sandbox.local import LocalSandbox
from belay.stores.base import UnsafePath

ESCAPES = ["../outside.txt", "a/../../outside.txt", "/etc/passwd", "..", "", "a/\x00b"]


@pytest.mark.parametrize("name", ESCAPES)
def test_lexical_check_refuses_escapes(name: str) -> None:
    with pytest.raises(UnsafePath):
        workspace.check_relative_name(name)


@pytest.mark.parametrize("name", ["a.txt", "a/b/c.txt", "./a.txt", "a/./b", "..hidden", "a..b"])
def test_lexical_check_accepts_plain_relative_names(name: str) -> None:
    workspace.check_relative_name(name)


def test_symlink_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    (tmp_path / "secret.txt").write_text("s")
    with pytest.raises(UnsafePath, match="symlink"):
        workspace.resolve_in_workspace(root, "link/secret.txt")
    with pytest.raises(UnsafePath):
        workspace.write_atomically(root, "link/new.txt", b"x")
    assert not (tmp_path / "new.txt").exists()


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
    await sandbox.client.call("run_command", {"command": f"ln -s {target} escape", "timeout_s": 5})
    assert (await sandbox.client.call("read_file", {"path": "escape/host.txt"}))["ok"] is False
    assert (await sandbox.client.call("write_file", {"path": "escape/new.txt", "content": "x"}))[
        "ok"
    ] is False
    assert not (target / "new.txt").exists()
    listed = await sandbox.client.call("list_files", {})
    assert listed["output"]["files"] == ["escape"]
    with pytest.raises(SandboxError, match="symlink"):
        await sandbox.client.get_file("escape/host.txt")


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
    (sandbox.workspace.parent / "outside.txt").write_text("o")
    with pytest.raises(SandboxError, match="escapes") as caught:
        await sandbox.client.manifest(["../outside.txt"])
    assert caught.value.status == 400
