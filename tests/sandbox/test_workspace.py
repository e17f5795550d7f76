"""The workspace path rules as pure functions (no server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from belay.sandbox import workspace
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


def test_describe_refuses_a_file_over_the_size_limit(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 2048)
    assert workspace.describe(tmp_path, "big.bin", max_bytes=2048).size == 2048
    with pytest.raises(workspace.WorkspaceRefusal) as caught:
        workspace.describe(tmp_path, "big.bin", max_bytes=2047)
    assert (caught.value.path, caught.value.rule) == ("big.bin", "size")


def test_describe_refuses_a_device(tmp_path: Path) -> None:
    (tmp_path / "null").symlink_to("/dev/null")  # the link is refused, and so is what it names
    with pytest.raises(workspace.WorkspaceRefusal, match=r"\(symlink\)"):
        workspace.describe(tmp_path, "null")
    with pytest.raises(workspace.WorkspaceRefusal) as caught:
        workspace.describe(Path("/dev"), "null")
    assert caught.value.rule == "device"


@pytest.mark.parametrize("swapped_in", ["pipe", "link"])
def test_a_file_swapped_after_the_check_is_refused_not_followed_or_waited_on(
    tmp_path: Path, swapped_in: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command running beside a download may replace the file between the server's look at it
    and its open: a pipe would block the reader for good, a link would be followed. What is opened
    is checked itself. (The swap is simulated by having the look see a regular file.)"""
    root = tmp_path / "ws"
    root.mkdir()
    if swapped_in == "pipe":
        os.mkfifo(root / "out.txt")
    else:
        (root / "target.txt").write_text("elsewhere")
        (root / "out.txt").symlink_to(root / "target.txt")
    real_resolve = workspace.resolve_in_workspace
    # As the check saw it: a regular file at the path, not yet swapped.
    monkeypatch.setattr(workspace, "resolve_in_workspace", lambda r, n: real_resolve(r, ".") / n)
    monkeypatch.setattr(Path, "is_file", lambda self: True)
    with pytest.raises(workspace.WorkspaceRefusal) as caught:
        workspace.hashed_file(root, "out.txt")
    assert (caught.value.path, caught.value.rule) == ("out.txt", "changed")
