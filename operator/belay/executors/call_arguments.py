"""A remote agent's call, checked against its tool's schema before anything records it as a
request: a call that does not fit is refused (recorded, answered with an error), never run."""

from __future__ import annotations

import json
from typing import Any

from belay.journal.tools import TOOLS, argument_problem, unknown_tool


def check_arguments(name: str, raw: Any) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as an object, and why they do not fit the tool's schema (None when
    they fit): unknown tool, not a JSON object, a required argument missing, a wrong type."""
    if name not in TOOLS:
        return {}, unknown_tool(name)
    arguments = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError as error:
            return {}, f"{name}: the arguments are not valid JSON ({error})"
    if not isinstance(arguments, dict):
        return {}, f"{name}: the arguments must be a JSON object, got {type(arguments).__name__}"
    return arguments, argument_problem(name, arguments)
