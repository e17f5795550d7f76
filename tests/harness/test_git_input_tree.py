"""What a git input's tree may hold: regular files only, under names that stay inside the input's
target. A repository is the tenant's (or anyone's who can push to it): a symbolic link, or a
tree crafted with `..` (which git accepts over the wire unless told to check), is refused with the
path named, and nothing is copied. Served over `file:///`, which the API allows too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from belay.api.git_input import GitInput
from belay.harness.git_input import InputUnavailable, git_input_files

IDENTITY = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]


def git(repository: Path, *arguments: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", *IDENTITY, "-C", str(repository), *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def bare(tmp_path: Path) -> Path:
    repository = tmp_path / "project.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(repository)], check=True)
    return repository


def commit_of(repository: Path, *entries: str) -> str:
    """A commit of a tree made from `mktree` lines, as a server could send it."""
    tree = git(repository, "mktree", stdin="".join(f"{e}\n" for e in entries))
    return git(repository, "commit-tree", tree, "-m", "crafted")


def test_a_plain_tree_is_copied_under_the_target(tmp_path: Path) -> None:
    repository = bare(tmp_path)
    blob = git(repository, "hash-object", "-w", "--stdin", stdin="hello\n")
    inner = git(repository, "mktree", stdin=f"100755 blob {blob}\trun.sh\n")
    commit = commit_of(repository, f"100644 blob {blob}\tREADME", f"040000 tree {inner}\tbin")
    files = git_input_files(GitInput(url=f"file://{repository}", revision=commit), "repo", None)
    assert files == [("repo/README", b"hello\n"), ("repo/bin/run.sh", b"hello\n")]


@pytest.mark.parametrize("name", ["..", ".git", ".GIT"])
def test_a_tree_that_climbs_out_or_writes_git_metadata_is_refused(tmp_path: Path, name: str) -> None:
    repository = bare(tmp_path)
    blob = git(repository, "hash-object", "-w", "--stdin", stdin="escaped\n")
    inner = git(repository, "mktree", stdin=f"100644 blob {blob}\tpayload\n")
    commit = commit_of(repository, f"100644 blob {blob}\tREADME", f"040000 tree {inner}\t{name}")
    with pytest.raises(InputUnavailable, match=f"holds a path the workspace refuses: '{name}/payload'"):
        git_input_files(GitInput(url=f"file://{repository}", revision=commit), "repo", None)


def test_a_symbolic_link_is_refused_naming_it(tmp_path: Path) -> None:
    repository = bare(tmp_path)
    target = git(repository, "hash-object", "-w", "--stdin", stdin="/var/run/belay/git-credentials")
    commit = commit_of(repository, f"120000 blob {target}\tsecrets")
    with pytest.raises(
        InputUnavailable, match="holds a symbolic link at secrets: an input is copied file by file"
    ):
        git_input_files(GitInput(url=f"file://{repository}", revision=commit), "repo", None)
