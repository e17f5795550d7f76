"""What a sandbox call may bring back into the harness: the manifest's caps (`spec.limits`) go to
the sandbox with every call, and what is larger reaches the artifact store in pieces, never whole
in the harness's memory.

- `read_file` of a file above `spec.limits.readFileBytes` is refused by the sandbox (which reads no
  further than the cap); the harness then streams the file into the artifact store and answers the
  call with a tool error naming the cap, the setting and the artifact (`output_ref`).
- `run_command`'s output is cut at `spec.limits.commandOutputBytes` per stream; the sandbox says so
  in the output.
- A deliverable, or a file an approval binds, is streamed the same way (`store_file`).

Whatever the model puts in a call's arguments, the cap is the manifest's: it is set after them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from belay.api.agentsession import ToolLimits
from belay.journal.events import ArtifactRef
from belay.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable
from belay.sandbox.protocol import TooLargeOutput
from belay.sandbox.workspace import MAX_FILE_BYTES
from belay.stores.base import ArtifactStore

READ_FILE_SETTING = "spec.limits.readFileBytes"


def with_caps(tool: str, arguments: dict[str, Any], limits: ToolLimits) -> dict[str, Any]:
    """A sandbox call's arguments with the manifest's cap for its tool."""
    if tool == "read_file":
        return {**arguments, "max_bytes": limits.read_file_bytes}
    if tool == "run_command":
        return {**arguments, "max_output_bytes": limits.command_output_bytes}
    return arguments


async def store_file(
    client: SandboxClient, artifacts: ArtifactStore, path: str, media_type: str = "application/octet-stream"
) -> ArtifactRef:
    """A workspace file streamed into the artifact store (at most MAX_FILE_BYTES)."""
    put = functools.partial(artifacts.put, media_type=media_type)
    return await client.download(path, put, MAX_FILE_BYTES)


@dataclass(frozen=True)
class Answer:
    """A sandbox tool's answer as the harness records it, and the artifact that holds what the
    answer could not."""

    response: dict[str, Any]
    stored: ArtifactRef | None = None


async def stored_when_too_large(
    client: SandboxClient, artifacts: ArtifactStore, tool: str, response: dict[str, Any]
) -> Answer:
    """A read_file the sandbox refused for its size: the file streamed into the artifact store, and
    a tool error that names the cap and where the content went. Any other answer as it came."""
    if tool != "read_file" or response.get("ok"):
        return Answer(response)
    try:
        refused = TooLargeOutput.model_validate(response.get("output"))
    except ValidationError:
        return Answer(response)
    too_large = (
        f"read_file refused {refused.path!r}: it is {refused.size} bytes, above the read_file cap of "
        f"{refused.cap} bytes ({READ_FILE_SETTING})"
    )
    try:
        ref = await store_file(client, artifacts, refused.path)
    except SandboxUnavailable:
        raise
    except SandboxError as failure:
        return Answer({**response, "error": f"{too_large}; its content was not stored either: {failure}"})
    error = (
        f"{too_large}; its content is stored as artifact sha256:{ref.sha256} ({ref.size} bytes). Read "
        f"parts of it with run_command (head, tail, grep, sed -n), or raise {READ_FILE_SETTING}"
    )
    output = {"path": refused.path, "size": ref.size, "cap": refused.cap, "stored_as_artifact": ref.sha256}
    return Answer({"ok": False, "output": output, "error": error}, ref)
