"""A checkpoint's repository revision, patch and environment, made in the sandbox with git.

The workspace repository of a checkpoint is exactly its declared files: a git commit of them (in
`.belay/git` inside the workspace, never a declared path), whose parent is the commit of the
subagent's inputs. Author, committer and dates are fixed, so the same files and the same message
give the same commit on any machine: a restore that rebuilds the inputs commit, applies the
checkpoint's patch and commits again must arrive at the recorded revision, or the workspace is not
what the checkpoint declared.

Every git command runs in the sandbox (`run_command`), never on the host: the workspace is the
model's, and so is anything in it, `.belay/git` included. A tampered repository cannot pass for
a checkpoint: a restore rebuilds both commits from the artifact store and compares.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from belay.sandbox.client import SandboxError, SandboxUnavailable
from belay.views.escaping import one_line

STATE_DIR = ".belay"  # never declared (see belay.harness.declared)
PATCH_PATH = f"{STATE_DIR}/checkpoint.patch"
RESTORE_PATCH_PATH = f"{STATE_DIR}/restore.patch"
PATHS_PATH = f"{STATE_DIR}/checkpoint.paths"  # the paths to commit, NUL-separated
REVISION_TIMEOUT_S = 300

# Runs in the sandbox as `python -S -c SCRIPT ARGS_JSON`: the sandbox server is Python, so its
# interpreter is there wherever a sandbox runs; the script needs only the standard library, and
# `-S` (no site-packages) halves the interpreter's start. It prints one JSON object.
SCRIPT = r"""
import json, os, platform, subprocess, sys
args = json.loads(sys.argv[1])
state = ".belay"
env = {
    **os.environ,
    "GIT_DIR": state + "/git", "GIT_WORK_TREE": ".", "GIT_INDEX_FILE": state + "/index",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "belay", "GIT_AUTHOR_EMAIL": "belay@localhost",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "belay", "GIT_COMMITTER_EMAIL": "belay@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000",
}
# Given on every command rather than written to the repository's config: three processes fewer.
options = ["-c", "core.autocrlf=false", "-c", "core.filemode=true", "-c", "core.symlinks=true"]
def git(*argv, data=None):
    done = subprocess.run(["git", *options, *argv], env=env, input=data, capture_output=True)
    if done.returncode:
        sys.stderr.write(done.stderr.decode(errors="replace"))
        sys.exit(done.returncode)
    return done.stdout
os.makedirs(state, exist_ok=True)
if not os.path.isdir(state + "/git"):
    git("init", "-q")
if args.get("apply"):
    git("apply", "--binary", "--whitespace=nowarn", args["apply"])
if os.path.exists(state + "/index"):
    os.remove(state + "/index")
if args.get("paths"):
    with open(args["paths"], "rb") as listed:
        git("update-index", "--add", "-z", "--stdin", data=listed.read())
tree = git("write-tree").decode().strip()
parents = ["-p", args["parent"]] if args.get("parent") else []
commit = git("commit-tree", tree, *parents, "-m", args["message"]).decode().strip()
base = args.get("parent") or commit
with open(args["patch"], "wb") as out:
    out.write(git("diff", "--binary", "--full-index", "--no-renames", base, commit))
print(json.dumps({
    "revision": commit,
    "tree": tree,
    "environment": {
        "os": platform.system(), "release": platform.release(), "machine": platform.machine(),
        "libc": " ".join(platform.libc_ver()).strip(),
    },
    "dependencies": {
        "python": platform.python_implementation() + " " + platform.python_version(),
        "git": git("--version").decode().strip().removeprefix("git version "),
    },
}))
"""


class RevisionError(Exception):
    """The sandbox could not make (or rebuild) a revision of the workspace."""


class Revision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    revision: str = Field(pattern=r"^[0-9a-f]{40,64}$")
    tree: str
    environment: dict[str, str]
    dependencies: dict[str, str]


# Files whose hash says which dependencies a workspace asks for.
DEPENDENCY_MANIFESTS = (
    "requirements.txt",
    "requirements-dev.txt",
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "Pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "package.json",
    "package-lock.json",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Cargo.lock",
    "Gemfile.lock",
)


def dependency_manifests(declared: dict[str, str]) -> dict[str, str]:
    """`path -> sha256:<hash>` for the dependency manifests among the declared files."""
    return {
        name: f"sha256:{sha}"
        for name, sha in sorted(declared.items())
        if name.rsplit("/", 1)[-1] in DEPENDENCY_MANIFESTS
    }


async def make_revision(
    client: Any, paths: list[str], message: str, *, parent: str | None = None, apply: str | None = None
) -> tuple[Revision, bytes]:
    """Commit exactly `paths` (after applying the patch at `apply`, if given) with `parent`, and
    return the revision and the patch from the parent (or an empty one, with no parent)."""
    listed = None
    if paths:
        # Through a file, never argv: a repository's paths are far longer than one exec argument
        # may be (MAX_COMMAND_BYTES), and git reads them from its stdin.
        data = "".join(path + "\0" for path in paths).encode()
        try:
            await client.put_file(PATHS_PATH, data, hashlib.sha256(data).hexdigest())
        except SandboxUnavailable:
            raise
        except SandboxError as error:
            raise RevisionError(f"the paths of {message} cannot be written: {error}") from None
        listed = PATHS_PATH
    arguments = {"paths": listed, "message": message, "parent": parent, "apply": apply, "patch": PATCH_PATH}
    response = await client.call(
        "run_command",
        {"command": ["python", "-S", "-c", SCRIPT, json.dumps(arguments)], "timeout_s": REVISION_TIMEOUT_S},
    )
    output = response.get("output") or {}
    if not response.get("ok") or output.get("exit_code") != 0:
        detail = one_line(response.get("error") or (output.get("stderr") or "").strip()[-500:])
        raise RevisionError(f"git in the sandbox failed: {detail}")
    try:
        revision = Revision.model_validate(json.loads(output.get("stdout") or ""))
    except (ValueError, ValidationError) as error:
        raise RevisionError(f"git in the sandbox gave no revision: {error}") from None
    try:
        patch = await client.get_file(PATCH_PATH)
    except SandboxError as error:
        raise RevisionError(f"the patch of {message} cannot be read: {error}") from None
    return revision, patch
