"""The tool catalogue (`belay.journal.tools`) as the model adapters are given it: each tool's
`ToolSchema`, its parameters the JSON Schema generated from the model its calls are validated
against (`belay.journal.tool_arguments`), so a model is shown exactly what a call may give.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from belay.harness.models.base import ToolSchema
from belay.journal.tools import SERVER_TOOL_SEPARATOR, TOOLS, ToolSpec, is_server_tool

# What both providers' APIs take as a tool's name.
WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tool_schema(spec: ToolSpec) -> ToolSchema:
    return ToolSchema(name=spec.name, description=spec.description, parameters=spec.schema)


def tool_schemas() -> list[ToolSchema]:
    return [tool_schema(spec) for spec in TOOLS.values()]


def wire_name(name: str) -> str:
    """A tool's name as both providers' APIs take it: a built-in tool's as it is; a server tool's
    `<server>.<tool>` as `<server>__<tool>` (a built-in's name never holds `__`), each character
    of the tool's name outside `[A-Za-z0-9_-]` written `_<hex>_`; past 64 characters, or when two
    tools of one offer would share a name (`offered`), `<server>__` and a digest of the name."""
    if not is_server_tool(name):
        return name
    server, _, tool = name.partition(SERVER_TOOL_SEPARATOR)
    encoded = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else f"_{ord(c):x}_" for c in tool)
    wire = f"{server}__{encoded}"
    return wire if WIRE_NAME.match(wire) else digest_name(server, name)


def digest_name(server: str, name: str) -> str:
    return f"{server[:40]}__{hashlib.sha256(name.encode()).hexdigest()[:20]}"


def offered(server_tools: Sequence[ToolSchema]) -> tuple[list[ToolSchema], dict[str, str]]:
    """The schemas a model is given, built-ins and server tools under their wire names, and each
    wire name of a server tool with the tool it stands for."""
    named: dict[str, ToolSchema] = {}
    for schema in server_tools:
        wire = wire_name(schema.name)
        if wire in named or wire in TOOLS:
            wire = digest_name(schema.name.partition(SERVER_TOOL_SEPARATOR)[0], schema.name)
        named[wire] = schema
    schemas = [*tool_schemas(), *(schema.model_copy(update={"name": wire}) for wire, schema in named.items())]
    return schemas, {wire: schema.name for wire, schema in named.items()}
