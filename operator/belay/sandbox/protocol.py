"""The sandbox server's wire shapes: one pydantic model per request and response body.

Server and client both validate against these, so the HTTP API has a single definition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from belay.journal.tool_arguments import (
    MAX_COMMAND_TIMEOUT_S,
    ListFilesArguments,
    ReadFileArguments,
    RunCommandArguments,
    WriteFileArguments,
)
from belay.journal.tools import DEFAULT_COMMAND_OUTPUT_BYTES, DEFAULT_READ_FILE_BYTES, MAX_CAPTURE_BYTES

NetworkProfile = Literal["none", "allowlist", "internet"]

# Header names of the raw file endpoints.
SHA256_HEADER = "X-Content-Sha256"
MODE_HEADER = "X-File-Mode"
# A client bound to one sandbox instance sends its id; any other instance refuses the request
# before doing anything, so a request meant for a lost workspace never runs on its empty
# replacement.
INSTANCE_HEADER = "X-Sandbox-Instance"
INSTANCE_MISMATCH_STATUS = 409
# A server told to stop (SIGTERM) lets the requests it is running finish and refuses new ones with
# this status: the request did not run, and the sandbox is going away.
STOPPING_STATUS = 503
# The workspace's content was refused (a symlink, a hard link, a pipe... in a declared path, a file
# that changed while it was read, a full workspace): the body's `rule` and `path` say which.
REFUSED_STATUS = 422
# A pool sandbox (started before anyone needed it, docs/operator.md#the-sandbox-pool) has no token
# until it is claimed: it takes no request but this one, which carries the one-time claim key (the
# bearer, whose sha256 the server was started with) and the token it requires from then on.
CLAIM_PATH = "/v1/claim"
# The claim asked of a sandbox that has a token of its own from its start (not a pool sandbox).
NOT_CLAIMABLE_RULE = "not-claimable"
# A local sandbox's instance marker (see belay.sandbox.local); the server takes it as its instance
# id when set, so the harness's handle and the server name the same instance.
INSTANCE_ENV = "BELAY_SANDBOX_INSTANCE"

# Captured output above this many bytes per stream is cut, and the result says so; the harness
# passes the manifest's cap (`spec.limits.commandOutputBytes`) as `max_output_bytes`.
MAX_OUTPUT_BYTES = DEFAULT_COMMAND_OUTPUT_BYTES
# Linux refuses a single exec argument above 128 KiB (MAX_ARG_STRLEN), and `sh -c COMMAND` passes
# the whole command as one; the sandbox's own wrapper needs room beside it. A longer command is
# refused with this limit named: a script written with write_file has no such bound.
MAX_COMMAND_BYTES = 64 * 1024


def command_size(command: object) -> int:
    """Bytes of a command line (a string, or an argv list), as the limit counts them."""
    if isinstance(command, str):
        return len(command.encode())
    if isinstance(command, list):
        return sum(len(str(part).encode()) + 1 for part in command)
    return 0


# The sandbox tools' requests: the arguments a call gives (the models a model's schema is generated
# from, extra keys refused) and what only the harness sets beside them (its caps, a file's mode).


class RunCommandArgs(RunCommandArguments):
    timeout_s: int = Field(default=120, ge=1, le=MAX_COMMAND_TIMEOUT_S)
    max_output_bytes: int = Field(default=MAX_OUTPUT_BYTES, ge=1, le=MAX_CAPTURE_BYTES)


class RunCommandOutput(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False


class ReadFileArgs(ReadFileArguments):
    # A larger file is refused (`TooLargeOutput`), read no further than this: the harness passes the
    # manifest's cap (`spec.limits.readFileBytes`) and streams the file to the artifact store.
    max_bytes: int = Field(default=DEFAULT_READ_FILE_BYTES, ge=1, le=MAX_CAPTURE_BYTES)


class ReadFileOutput(BaseModel):
    content: str


class TooLargeOutput(BaseModel):
    """The output of a read_file refused for its size (`ok: false`)."""

    path: str
    size: int  # bytes, as far as they were counted
    cap: int


class WriteFileArgs(WriteFileArguments):
    mode: int | None = Field(default=None, ge=0, le=0o7777)


class WriteFileOutput(BaseModel):
    sha256: str
    size: int


class ListFilesArgs(ListFilesArguments):
    path: str = "."


class ListFilesOutput(BaseModel):
    files: list[str]


class ToolResponse(BaseModel):
    """Every tool answers with this envelope. `ok` is true when the tool ran, even if the command it
    ran exited non-zero; it is false when the tool itself could not do its job."""

    ok: bool
    output: Any = None
    error: str | None = None


class Health(BaseModel):
    ok: bool = True
    profile: NetworkProfile
    network_isolated: bool
    detail: str
    pid: int
    workspace: str
    instance: str  # unique per server start: a replacement behind the same address has another


class ClaimRequest(BaseModel):
    """The token a claimed pool sandbox requires from then on: the claiming subagent's own."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=16, max_length=4096)


class ManifestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str]


class ErrorBody(BaseModel):
    ok: Literal[False] = False
    error: str
    # A refusal of the workspace's content (belay.sandbox.workspace.REFUSAL_RULES): the rule broken
    # and the path that broke it, so the harness can hand it to the agent as its step's failure.
    rule: str | None = None
    path: str | None = None


class ReadyFile(BaseModel):
    """What the server writes to --ready-file once it accepts requests."""

    pid: int
    endpoint: str
    network_isolated: bool
    detail: str
