"""A git input behind authentication: `git http-backend`, run as a CGI program by a small HTTP
server started here on loopback, answers only requests that carry the expected Basic credentials.
The harness reads them from the files a harness pod mounts for the input's Secret
(`<dir>/<secret>/username` and `password`), and git sends them; without them, with the wrong ones,
or with the Secret not mounted, the input is unavailable and says why, never echoing the password."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.api.git_input import GitInput
from belay.harness.git_input import InputUnavailable, git_input_files
from tests.git_server import authenticated_git_server

USERNAME, PASSWORD = "reader", "s3cret-token-for-the-test"
FILES = {"README.md": b"behind a password\n", "src/lib.py": b"x = 1\n"}


def git(repository: Path, *arguments: str) -> str:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    done = subprocess.run(
        ["git", *identity, "-C", str(repository), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository holding FILES in its one commit, and that commit."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    for name, data in FILES.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "one")
    root = tmp_path / "root"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(root / "project.git")], check=True)
    return root, git(work, "rev-parse", "HEAD")


@pytest.fixture
def server(served: tuple[Path, str]) -> Iterator[str]:
    """The repository over HTTP behind Basic authentication; its URL."""
    root, _ = served
    with authenticated_git_server(root, "127.0.0.1", USERNAME, PASSWORD) as url:
        yield f"{url}/project.git"


def mounted(directory: Path, secret: str, username: str, password: str) -> Path:
    """The files a harness pod's Secret volume holds."""
    (directory / secret).mkdir(parents=True)
    (directory / secret / "username").write_text(username)
    (directory / secret / "password").write_text(password)
    return directory


def test_the_secrets_credentials_fetch_the_commits_tree(
    tmp_path: Path, served: tuple[Path, str], server: str
) -> None:
    _, revision = served
    credentials = mounted(tmp_path / "credentials", "git-token", USERNAME, PASSWORD)
    git_input = GitInput(url=server, revision=revision, credentials_secret="git-token")
    files = git_input_files(git_input, "repo", credentials)
    assert files == sorted((f"repo/{name}", data) for name, data in FILES.items())


def test_without_the_right_credentials_the_input_is_unavailable_and_says_why(
    tmp_path: Path, served: tuple[Path, str], server: str
) -> None:
    _, revision = served
    with pytest.raises(InputUnavailable, match=f"git could not fetch {server}") as anonymous:
        git_input_files(GitInput(url=server, revision=revision), "repo", None)
    wrong = mounted(tmp_path / "wrong", "git-token", USERNAME, "not-the-password")
    with pytest.raises(InputUnavailable, match=f"git could not fetch {server}") as refused:
        git_input_files(
            GitInput(url=server, revision=revision, credentials_secret="git-token"), "repo", wrong
        )
    assert "not-the-password" not in str(refused.value) and PASSWORD not in str(anonymous.value)
    with pytest.raises(
        InputUnavailable, match="credentialsSecret other: its username and password keys are not"
    ):
        git_input_files(GitInput(url=server, revision=revision, credentials_secret="other"), "repo", wrong)
    with pytest.raises(InputUnavailable, match="credentialsSecret git-token: this harness reads no"):
        git_input_files(GitInput(url=server, revision=revision, credentials_secret="git-token"), "repo", None)
