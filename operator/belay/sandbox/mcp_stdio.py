"""A subagent's MCP tool servers, run inside its sandbox and spoken to over stdio.

The sandbox server starts the declared command in the workspace (inside the sandbox's walls, with
a command's environment), speaks MCP to it with the official SDK's client (`initialize`, then
`tools/list` or one `tools/call`) and stops it. A server is started afresh for each listing and
each call: nothing it keeps in memory outlives one call, and a sandbox replaced under it loses
nothing a call needs.

What the server answers is passed back as data and bounded: at most `MAX_LISTED_TOOLS` tools, and
an answer of at most `max_output_bytes` once serialised. A call's answer says whether the request
reached the server (`sent`): a call that was sent and got no answer (the server died, hung past
the timeout, answered garbage) may have taken effect, which the harness must know.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from belay.journal.tool_arguments import MAX_COMMAND_TIMEOUT_S
from belay.journal.tools import MAX_CAPTURE_BYTES
from belay.sandbox.protocol import MAX_OUTPUT_BYTES
from belay.sandbox.walls import CODE_DIR

# A server offering more tools than this is refused: its list goes into the record and the
# model's context, and no real server needs more.
MAX_LISTED_TOOLS = 256
# What stands for the server's own name and version when it gives none.
UNNAMED = ""


class McpServerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, max_length=64)
    timeout_s: int = Field(default=60, ge=1, le=MAX_COMMAND_TIMEOUT_S)
    max_output_bytes: int = Field(default=MAX_OUTPUT_BYTES, ge=1, le=MAX_CAPTURE_BYTES)


class McpListArgs(McpServerArgs):
    pass


class McpCallArgs(McpServerArgs):
    tool: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)


class McpListOutput(BaseModel):
    server: dict[str, str]  # name, version: as the server says them in its initialize answer
    protocol_version: str
    tools: list[dict[str, Any]]  # name, description, inputSchema, annotations


class McpCallOutput(BaseModel):
    content: list[dict[str, Any]] = Field(default_factory=list)
    structured_content: Any = None
    is_error: bool = False


class McpFailed(Exception):
    """The server could not be spoken to, or its answer is refused. `sent`: the call had reached
    it, so it may have taken effect."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def server_environment(base: dict[str, str]) -> dict[str, str]:
    """A command's environment, and the Python packages of the sandbox's runtime on its path (in
    local walls they are bound under CODE_DIR, where a plain `python` does not look), so a server
    written in Python with the `mcp` SDK runs as it would in an image that has it installed."""
    environment = dict(base)
    bound = [entry for entry in sys.path if entry.startswith(CODE_DIR)]
    if bound:
        environment["PYTHONPATH"] = os.pathsep.join([*bound, environment.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    return environment


def _parameters(argv: list[str], cwd: Path, environment: dict[str, str]) -> Any:
    from mcp import StdioServerParameters

    command, *rest = argv
    return StdioServerParameters(
        command=command, args=rest, cwd=str(cwd), env=server_environment(environment)
    )


def _client(parameters: Any) -> Any:
    from mcp import Client

    # The initialize handshake, as every stdio server takes it; no cache between calls.
    return Client(parameters, mode="legacy", cache=None)


def _bounded(payload: dict[str, Any], cap: int, what: str, sent: bool) -> dict[str, Any]:
    size = len(json.dumps(payload, default=str).encode())
    if size > cap:
        raise McpFailed(f"the server's {what} is {size} bytes, above the cap of {cap}", sent)
    return payload


async def list_tools(
    arguments: McpListArgs, argv: list[str], cwd: Path, environment: dict[str, str]
) -> McpListOutput:
    """The server's identity and every tool it offers (every page of `tools/list`). `argv` is the
    declared command as the sandbox starts it (under a command's walls)."""
    try:
        with anyio.fail_after(arguments.timeout_s):
            async with _client(_parameters(argv, cwd, environment)) as client:
                info = client.server_info
                tools: list[dict[str, Any]] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += [
                        tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools
                    ]
                    if len(tools) > MAX_LISTED_TOOLS:
                        raise McpFailed(f"the server offers more than {MAX_LISTED_TOOLS} tools", False)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                protocol = str(client.protocol_version)
    except McpFailed:
        raise
    except TimeoutError:
        raise McpFailed(f"the server did not list its tools within {arguments.timeout_s}s", False) from None
    except Exception as error:
        raise McpFailed(f"the server could not be listed: {type(error).__name__}: {error}", False) from None
    listed = {
        "server": {"name": info.name if info else UNNAMED, "version": info.version if info else UNNAMED},
        "protocol_version": protocol,
        "tools": [
            {key: tool[key] for key in ("name", "description", "inputSchema", "annotations") if key in tool}
            for tool in tools
        ],
    }
    return McpListOutput.model_validate(_bounded(listed, arguments.max_output_bytes, "tool list", False))


async def call_tool(
    arguments: McpCallArgs, argv: list[str], cwd: Path, environment: dict[str, str]
) -> McpCallOutput:
    """One `tools/call` and the server's answer. A failure says whether the call was sent."""
    sent = False
    try:
        with anyio.fail_after(arguments.timeout_s):
            async with _client(_parameters(argv, cwd, environment)) as client:
                sent = True
                result = await client.call_tool(arguments.tool, arguments.arguments)
    except TimeoutError:
        raise McpFailed(f"the server did not answer within {arguments.timeout_s}s", sent) from None
    except Exception as error:
        raise McpFailed(f"the server failed: {type(error).__name__}: {error}", sent) from None
    answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    output = {
        "content": answer.get("content", []),
        "structured_content": answer.get("structuredContent"),
        "is_error": bool(answer.get("isError", False)),
    }
    return McpCallOutput.model_validate(_bounded(output, arguments.max_output_bytes, "answer", True))
