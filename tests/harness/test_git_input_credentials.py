"""A git input behind authentication: `git http-backend`, run as a CGI program by a small HTTP
server started here on loopback, answers only requests that carry the expected Basic credentials.
The harness reads them from the files a harness pod mounts for the input's Secret
(`<dir>/<secret>/username` and `password`), and git sends them; without them, with the wrong ones,
or with the Secret not mounted, the input is unavailable and says why, never echoing the password."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from belay.api.git_input import GitInput
from belay.harness.git_input import InputUnavailable, git_input_files

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
    expected = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()

    class GitOverHttp(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.serve()

        def do_POST(self) -> None:
            self.serve()

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet

        def serve(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            environment = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": USERNAME,
                "REMOTE_ADDR": "127.0.0.1",
            }
            for header, variable in (
                ("Git-Protocol", "GIT_PROTOCOL"),
                ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ):
                if self.headers.get(header):
                    environment[variable] = self.headers[header]
            answer = subprocess.run(
                ["git", "http-backend"], input=body, env=environment, capture_output=True, check=False
            ).stdout
            head, _, content = answer.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode().split("\r\n"):
                name, _, value = line.partition(": ")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    http = ThreadingHTTPServer(("127.0.0.1", 0), GitOverHttp)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}/project.git"
    finally:
        http.shutdown()
        http.server_close()


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
