"""A git input's files: the tree of one commit, fetched by the harness into a bare repository of
its own and read from git's objects (never a checkout, so a symbolic link in the repository cannot
make the harness read a file of its own machine).

The fetch asks for the commit itself first (one commit deep); a server that serves only what its
branches and tags point at gets a fetch of those, and the commit must be among them. Git may use
only the transports the API allows (`GIT_ALLOW_PROTOCOL`, which covers redirects too) and never
prompts. Credentials, when the input names a Secret, are read from the files the harness pod
mounts (`<credentials dir>/<secret>/username` and `password`) and reach git as an Authorization
header scoped to the input's URL through git's environment configuration
(`GIT_CONFIG_KEY_n`): never an argument (visible to every process of the machine), never a file,
never the record.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from belay.api.git_input import GIT_SCHEMES, GitInput

# Where the harness pod mounts each git credentials Secret, one directory per Secret name.
GIT_CREDENTIALS_DIR = Path("/var/run/belay/git-credentials")
FETCH_TIMEOUT_S = 600.0
REGULAR_FILE_MODES = ("100644", "100755")


# The reason a session stops on when an input cannot be had: a recovery failure (the session is
# `RecoveryFailed`, no further attempt starts) until the input is corrected in the spec, or, on one
# machine, a person resumes it once the repository serves it.
INPUT_UNAVAILABLE = "InputUnavailable"


class InputUnavailable(Exception):
    """An input's files cannot be had (a fetch that failed, a commit the repository lacks)."""


def git_input_label(target: str, git: GitInput) -> str:
    """The input as the record names it: where it goes and what it is."""
    return f"{target} from {git.url} at {git.revision}"


def git_input_files(
    git: GitInput, target: str, credentials_dir: Path | None = GIT_CREDENTIALS_DIR
) -> list[tuple[str, bytes]]:
    """(workspace path, bytes) of every file of the commit's tree, under `target`."""
    environment = _environment(git, credentials_dir)
    with tempfile.TemporaryDirectory(prefix="belay-git-") as scratch:
        repository = Path(scratch) / "input.git"
        _git(None, environment, "init", "--quiet", "--bare", str(repository))
        by_commit = _git(
            repository, environment, "fetch", "--quiet", "--no-tags", "--depth=1", "--", git.url, git.revision
        )
        if by_commit.returncode != 0:
            every_ref = _git(
                repository,
                environment,
                "fetch",
                "--quiet",
                "--",
                git.url,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            )
            if every_ref.returncode != 0:
                raise InputUnavailable(f"git could not fetch {git.url}: {_last_line(every_ref.stderr)}")
        if _git(repository, environment, "cat-file", "-e", f"{git.revision}^{{commit}}").returncode != 0:
            raise InputUnavailable(
                f"revision {git.revision} is not a commit of {git.url} "
                "(neither fetchable by its id nor reachable from a branch or a tag)"
            )
        return _tree_files(repository, environment, git, target)


def _tree_files(
    repository: Path, environment: Mapping[str, str], git: GitInput, target: str
) -> list[tuple[str, bytes]]:
    listed = _git(repository, environment, "ls-tree", "-r", "-z", "--full-tree", git.revision)
    if listed.returncode != 0:
        raise InputUnavailable(f"git could not list {git.revision} of {git.url}: {_last_line(listed.stderr)}")
    blobs: list[tuple[str, str]] = []
    for entry in listed.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, object_id = meta.decode().split(" ")
        path = raw_path.decode("utf-8", errors="replace")
        parts = path.split("/")
        # Git's own checks of a tree's names run only when asked (fsckObjects): a server may send a
        # tree holding `..` or `.git`, and its files would land outside the input's target.
        if "\ufffd" in path or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise InputUnavailable(
                f"{git.url} at {git.revision} holds a path the workspace refuses: {path!r}"
            )
        if kind != "blob" or mode not in REGULAR_FILE_MODES:
            # As for a directory input: files are copied one by one, and a link (or a submodule)
            # would stand for something outside the tree.
            what = "a submodule" if kind == "commit" else "a symbolic link" if mode == "120000" else mode
            raise InputUnavailable(
                f"{git.url} at {git.revision} holds {what} at {path}: an input is copied file by file"
            )
        blobs.append((path, object_id))
    contents = _read_blobs(repository, environment, [object_id for _, object_id in blobs])
    prefix = target.strip("/")
    return [(f"{prefix}/{path}", contents[object_id]) for path, object_id in sorted(blobs)]


def _read_blobs(repository: Path, environment: Mapping[str, str], object_ids: list[str]) -> dict[str, bytes]:
    """Every blob's bytes, through one `git cat-file --batch`."""
    if not object_ids:
        return {}
    unique = sorted(set(object_ids))
    batch = _git(repository, environment, "cat-file", "--batch", stdin="".join(f"{o}\n" for o in unique))
    if batch.returncode != 0:
        raise InputUnavailable(f"git could not read the input's files: {_last_line(batch.stderr)}")
    contents: dict[str, bytes] = {}
    output, at = batch.stdout, 0
    for object_id in unique:
        header_end = output.index(b"\n", at)
        name, kind, size = output[at:header_end].decode().split(" ")
        if name != object_id or kind != "blob":
            raise InputUnavailable(f"git answered {name} {kind} for blob {object_id}")
        start = header_end + 1
        contents[object_id] = output[start : start + int(size)]
        at = start + int(size) + 1  # the newline after the contents
    return contents


def _environment(git: GitInput, credentials_dir: Path | None) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        # A CA bundle for https is the machine's business; anything else of git's (a repository
        # to use, configuration, a helper to run) is not the input's.
        if not key.startswith("GIT_") or key in ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH")
        if key != "SSH_ASKPASS"
    }
    environment.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": ":".join(GIT_SCHEMES),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_COUNT": "0",
        }
    )
    if git.credentials_secret is None:
        return environment
    username, password = _credentials(git.credentials_secret, credentials_dir)
    basic = base64.b64encode(f"{username}:{password}".encode()).decode()
    environment.update(
        {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"http.{git.url}.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        }
    )
    return environment


def _credentials(secret: str, credentials_dir: Path | None) -> tuple[str, str]:
    if credentials_dir is None:
        raise InputUnavailable(f"credentialsSecret {secret}: this harness reads no Kubernetes Secret")
    directory = credentials_dir / secret
    try:
        username = (directory / "username").read_text().strip()
        password = (directory / "password").read_text().strip()
    except OSError:
        raise InputUnavailable(
            f"credentialsSecret {secret}: its username and password keys are not mounted at {directory}"
        ) from None
    return username, password


def _git(
    repository: Path | None, environment: Mapping[str, str], *arguments: str, stdin: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    where = ["-C", str(repository)] if repository is not None else []
    try:
        return subprocess.run(
            ["git", *where, *arguments],
            env=dict(environment),
            input=stdin.encode() if stdin is not None else None,
            capture_output=True,
            timeout=FETCH_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputUnavailable(f"git {arguments[0]} did not finish within {FETCH_TIMEOUT_S:.0f}s") from None
    except FileNotFoundError:
        raise InputUnavailable("git is not installed on the machine the harness runs on") from None


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(git said nothing)"
