"""A subagent's MCP tool servers (`spec.subagents[].toolServers`): stdio servers its sandbox runs.

Each server's tools are offered as `<server>.<tool>` beside the built-in tools. The effect class of
a tool comes from its annotations (`readOnlyHint` -> read_only, `idempotentHint` -> idempotent,
otherwise unsafe); `tools` may class one more strictly, and less strictly only with `trust:
override` (`belay.harness.mcp_listing`). `probe` names a read-only tool of the same server that a
reconciliation runs to show a person what an unsafe call cut off by a kill left behind.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from belay.api.base import ApiModel

SERVER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SERVER_NAME_MAX = 63
# MCP tool names: letters, digits, `_`, `-` and `.` (the protocol's recommendation), bounded.
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
TRANSPORT_MESSAGE = (
    "toolServers[].transport: only 'stdio' is supported (a command run inside the subagent's sandbox); "
    "streamable-HTTP servers are not built yet"
)
PROBE_CLASS_MESSAGE = "toolServers[].probe must be a read-only tool: tools[probe].effect must be read_only"
TOOL_NAME_MESSAGE = "toolServers[].tools: a tool's name is 1 to 128 letters, digits, '_', '-' or '.'"
UNIQUE_SERVERS_MESSAGE = "toolServers names must be unique within a subagent"

ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]


class ToolClass(ApiModel):
    """How the manifest classes one tool of a server."""

    # `keyed` is not offered: an MCP call carries no idempotency key a server would honour.
    effect: Literal["read_only", "idempotent", "unsafe"]
    # Needed to class a tool less strictly than its annotations do (an unannotated tool as
    # read_only, say); recorded with the listing.
    trust: Literal["override"] | None = None


class ToolServerSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.probe) || !has(self.tools) || !(self.probe in self.tools) || "
                    "self.tools[self.probe].effect == 'read_only'",
                    "message": PROBE_CLASS_MESSAGE,
                    "fieldPath": ".probe",
                }
            ]
        }
    )

    # Its tools are named `<name>.<tool>`, so the name holds no dot.
    name: str = Field(pattern=SERVER_NAME_PATTERN, max_length=SERVER_NAME_MAX)
    transport: Literal["stdio"] = "stdio"
    # The argv that starts the server, run in the subagent's workspace inside its sandbox.
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(min_length=1, max_length=64)
    # By the tool's own name (as the server lists it), how the manifest classes it.
    tools: dict[str, ToolClass] = Field(default_factory=dict, max_length=256)
    probe: ToolName | None = None
    # How long one listing or call may take before it is given up (a call then has an unknown outcome).
    timeout_seconds: int = Field(default=60, ge=1, le=3600)

    @field_validator("transport", mode="before")
    @classmethod
    def _stdio_only(cls, transport: object) -> object:
        if transport != "stdio":
            raise ValueError(TRANSPORT_MESSAGE)
        return transport

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, tools: dict[str, ToolClass]) -> dict[str, ToolClass]:
        wrong = sorted(name for name in tools if not re.fullmatch(TOOL_NAME_PATTERN, name))
        if wrong:
            raise ValueError(f"{TOOL_NAME_MESSAGE}, got: {', '.join(map(repr, wrong))}")
        return tools

    @model_validator(mode="after")
    def _probe_reads_only(self) -> ToolServerSpec:
        declared = self.tools.get(self.probe) if self.probe else None
        if declared is not None and declared.effect != "read_only":
            raise ValueError(PROBE_CLASS_MESSAGE)
        return self


def unique_servers(servers: list[ToolServerSpec]) -> list[ToolServerSpec]:
    names = [server.name for server in servers]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{UNIQUE_SERVERS_MESSAGE}, repeated: {', '.join(repeated)}")
    return servers
