"""A manifest refused, in the apiserver's words: the error every refusal of a manifest is
(`ManifestError`), and a pydantic validation error described the way the apiserver describes the
same schema constraint, so `belay run` and `kubectl apply` refuse a manifest with the same text."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError


class ManifestError(ValueError):
    """A manifest that cannot be used, with every offending field named, on one line."""


def _field_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(root)"


# The type names the apiserver reports a value's type with.
_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    (int, "int64"),
    (float, "float64"),
    (str, "string"),
    ((list, tuple), "array"),
    (dict, "object"),
)
_EXPECTED_TYPES = {
    "string_type": "string",
    "int_type": "integer",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "bool_type": "boolean",
}
# The apiserver quotes long values in full; one line stays readable.
_VALUE_SHOWN = 80


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _VALUE_SHOWN else text[: _VALUE_SHOWN - 4] + '..."'


def describe_issue(issue: Any) -> str:
    """One pydantic error, in the words the apiserver uses for the same schema constraint."""
    path = _field_path(tuple(issue["loc"]))
    kind, context, value = issue["type"], issue.get("ctx") or {}, issue.get("input")
    match kind:
        case "missing":
            return f"{path}: Required value"
        case "extra_forbidden":
            return f'unknown field "{path}"'
        case "literal_error":
            allowed = ", ".join(f'"{v}"' for v in re.findall(r"'([^']*)'", str(context.get("expected", ""))))
            return f"{path}: Unsupported value: {_shown(value)}: supported values: {allowed}"
        case "string_too_long":
            return f"{path}: Too long: may not be more than {context['max_length']} characters"
        case "string_too_short":
            return (
                f"{path}: Invalid value: {_shown(value)}: {path} in body should be at least "
                f"{context['min_length']} chars long"
            )
        case "too_long":
            return f"{path}: Too many: {len(value)}: must have at most {context['max_length']} items"
        case "too_short":
            return (
                f"{path}: Invalid value: {len(value)}: {path} in body should have at least "
                f"{context['min_length']} items"
            )
        case "greater_than_equal":
            return (
                f"{path}: Invalid value: {_shown(value)}: {path} in body should be greater than or "
                f"equal to {context['ge']}"
            )
        case "less_than_equal":
            return (
                f"{path}: Invalid value: {_shown(value)}: {path} in body should be less than or "
                f"equal to {context['le']}"
            )
        case "string_pattern_mismatch":
            return (
                f"{path}: Invalid value: {_shown(value)}: {path} in body should match '{context['pattern']}'"
            )
        case "timezone_aware" | "datetime_parsing" | "datetime_from_date_parsing" | "datetime_type":
            shown = f'"{_json_type(value)}"' if not isinstance(value, str) else _shown(value)
            return (
                f"{path}: Invalid value: {shown}: {path} in body must be of type date-time: {shown} "
                "(RFC 3339, with a time zone)"
            )
        case _ if kind in _EXPECTED_TYPES:
            found = _json_type(value)
            expected = _EXPECTED_TYPES[kind]
            return f'{path}: Invalid value: "{found}": {path} in body must be of type {expected}: "{found}"'
    return f"{path}: {re.sub(r'^Value error, ', '', issue['msg'])}"


def describe_validation_error(error: ValidationError) -> str:
    return "; ".join(describe_issue(issue) for issue in error.errors())
