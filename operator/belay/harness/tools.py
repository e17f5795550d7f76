"""The tool catalogue (`belay.journal.tools`) as the model adapters are given it: each tool's
`ToolSchema`, its parameters the JSON Schema generated from the model its calls are validated
against (`belay.journal.tool_arguments`), so a model is shown exactly what a call may give.
"""

from __future__ import annotations

from belay.harness.models.base import ToolSchema
from belay.journal.tools import TOOLS, ToolSpec


def tool_schema(spec: ToolSpec) -> ToolSchema:
    return ToolSchema(name=spec.name, description=spec.description, parameters=spec.schema)


def tool_schemas() -> list[ToolSchema]:
    return [tool_schema(spec) for spec in TOOLS.values()]
