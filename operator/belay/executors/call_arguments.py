"""A remote agent's call, checked against its tool's schema before anything records it as a
request: a call that does not fit is refused (recorded, answered with an error), never run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from belay.journal.tools import TOOLS, unknown_tool


def check_arguments(name: str, raw: Any) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as an object, and why they do not fit the tool's schema (None when
    they fit): unknown tool, not a JSON object, a required argument missing, a wrong type."""
    spec = TOOLS.get(name)
    if spec is None:
        return {}, unknown_tool(name)
    arguments = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError as error:
            return {}, f"{name}: the arguments are not valid JSON ({error})"
    if not isinstance(arguments, dict):
        return {}, f"{name}: the arguments must be a JSON object, got {type(arguments).__name__}"
    missing = [key for key in spec.required if key not in arguments]
    if missing:
        return arguments, f"{name}: missing required argument {', '.join(missing)}"
    for key, schema in spec.parameters.items():
        if key in arguments and not _fits(arguments[key], schema):
            return arguments, f"{name}: argument {key!r} must be of type {schema.get('type')}"
    return arguments, None


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    check = _JSON_TYPES.get(str(schema.get("type")))
    if check is None:
        return True
    if not check(value):
        return False
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return all(_fits(item, items) for item in value)
    return True
