"""The workspace path rules as pure functions (no server)."""

from __future__ import annotations

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
