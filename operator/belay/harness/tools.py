"""The tool catalogue (`belay.journal.tools`) as the model adapters are given it: each tool's
`ToolSchema`, its parameters as a JSON Schema object.
"""

from __future__ import annotations

from typing import Any

from belay.harness.models.base import ToolSchema
from belay.journal.tools import TOOLS, ToolSpec


def tool_schema(spec: ToolSpec) -> ToolSchema:
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": spec.parameters,
        "additionalProperties": True,
    }
    if spec.required:
        parameters["required"] = list(spec.required)
    return ToolSchema(name=spec.name, description=spec.description, parameters=parameters)


def tool_schemas() -> list[ToolSchema]:
    return [tool_schema(spec) for spec in TOOLS.values()]
