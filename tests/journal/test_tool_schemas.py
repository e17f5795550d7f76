"""The schema a model is shown for each tool is exactly what a call may give: it refuses what the
harness's check refuses (a key the tool does not take, a value of another JSON type, past a bound)
and allows what it allows. A schema that said `additionalProperties: true` once invited a real model
to send extra keys, and four of its six calls were refused."""

from __future__ import annotations

from typing import Any

import pytest

from belay.harness.tools import tool_schemas
from belay.journal.tools import TOOLS, argument_problem

# One value of each JSON type, each inside every bound the catalogue sets.
SAMPLES: dict[str, Any] = {
    "string": "x",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "object": {"k": "v"},
    "array": ["x"],
    "null": None,
}


def minimal_call(schema: dict[str, Any]) -> dict[str, Any]:
    """Only the required arguments, each a value of its first declared type."""
    call = {}
    for key in schema.get("required", []):
        declared = schema["properties"][key]["type"]
        call[key] = SAMPLES[declared[0] if isinstance(declared, list) else declared]
    return call


def declared_types(schema: dict[str, Any]) -> set[str]:
    declared = schema["type"]
    return set(declared) if isinstance(declared, list) else {declared}


@pytest.mark.parametrize("shown", tool_schemas(), ids=lambda s: s.name)
def test_the_schema_shown_refuses_and_allows_what_the_check_does(shown: Any) -> None:
    schema = shown.parameters
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(TOOLS[shown.name].arguments.model_fields)

    call = minimal_call(schema)
    assert argument_problem(shown.name, call) is None
    for key in schema.get("required", []):
        short = {k: v for k, v in call.items() if k != key}
        assert argument_problem(shown.name, short) == f"{shown.name}: missing required argument {key}"

    # What additionalProperties false refuses, the check refuses, in words a model can act on.
    problem = argument_problem(shown.name, {**call, "additionalProperties": True})
    assert problem is not None and "unexpected argument 'additionalProperties'" in problem

    for key, property_schema in schema["properties"].items():
        allowed = declared_types(property_schema)
        for kind, value in SAMPLES.items():
            fits = kind in allowed or (kind == "integer" and "number" in allowed)
            problem = argument_problem(shown.name, {**call, key: value})
            assert (problem is None) == fits, (key, kind, problem)
        for bound, past in bounds_of(property_schema):
            assert argument_problem(shown.name, {**call, key: bound}) is None, (key, bound)
            problem = argument_problem(shown.name, {**call, key: past})
            assert problem is not None and repr(key) in problem, (key, past)


def bounds_of(schema: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Each bound the schema sets: a value on it (allowed) and one just past it (refused)."""
    pairs: list[tuple[Any, Any]] = []
    if "minimum" in schema:
        pairs.append((schema["minimum"], schema["minimum"] - 1))
    if "maximum" in schema:
        pairs.append((schema["maximum"], schema["maximum"] + 1))
    if "minLength" in schema:
        pairs.append(("x" * schema["minLength"], "x" * (schema["minLength"] - 1)))
    if "maxLength" in schema:
        pairs.append(("x" * schema["maxLength"], "x" * (schema["maxLength"] + 1)))
    if "maxItems" in schema:
        pairs.append((["x"] * schema["maxItems"], ["x"] * (schema["maxItems"] + 1)))
    items = schema.get("items", {})
    if "array" in declared_types(schema) and "maxLength" in items:
        pairs.append((["x" * items["maxLength"]], ["x" * (items["maxLength"] + 1)]))
    return pairs


def test_every_sandbox_request_model_extends_the_model_its_tool_is_shown_from() -> None:
    """The sandbox validates a call with the same model, plus only what the harness sets."""
    from belay.sandbox.protocol import ListFilesArgs, ReadFileArgs, RunCommandArgs, WriteFileArgs

    for tool, request_model in {
        "run_command": RunCommandArgs,
        "read_file": ReadFileArgs,
        "write_file": WriteFileArgs,
        "list_files": ListFilesArgs,
    }.items():
        assert issubclass(request_model, TOOLS[tool].arguments)
        assert request_model.model_config.get("extra") == "forbid"
