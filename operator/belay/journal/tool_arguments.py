"""Each tool's arguments as a pydantic model: the one definition the schema a model is shown is
generated from (`belay.journal.tools.ToolSpec.parameters`) and every call is validated against
(`belay.journal.tools.argument_problem`; the sandbox's request models extend the sandbox tools'
ones with what only the harness sets). Extra keys are refused, so the schema says
`additionalProperties: false`: a schema that allowed them would invite calls that are then refused.

An optional argument is typed `X | None` for the harness's readers, but a call must leave it out
rather than send null: the schema shows only `X` (`parameters_schema` drops the null branch), and
the validator refuses null the same way.
"""

from __future__ import annotations

import copy
import functools
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

# The longest a command may be given to run (`run_command`'s `timeout_s`), as the sandbox takes it.
MAX_COMMAND_TIMEOUT_S = 24 * 3600
# The most a ticket's title and body may hold, as the ticket service takes them: a call past them
# is refused by the schema, before the call is issued, so an unsafe call never fails on them and
# then waits on a retry that could never succeed.
MAX_TICKET_TITLE_CHARS = 512
MAX_TICKET_BODY_CHARS = 64 * 1024
# A list argument of a harness tool (a note's evidence, a step's inputs) is recorded in the request
# as it is; bounded here, so a long one is the call's error instead of a request too large to record.
MAX_LIST_ITEMS = 64
MAX_LIST_ITEM_CHARS = 256

ListItem = Annotated[str, Field(max_length=MAX_LIST_ITEM_CHARS)]


def _text(description: str = "") -> Any:
    return Field(default=None, description=description or None)


def _list(description: str) -> Any:
    return Field(default=None, max_length=MAX_LIST_ITEMS, description=description)


class ToolArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerToolArguments(ToolArguments):
    """A declared MCP server's tool: what its arguments may be is the server's listed schema,
    which the harness checks the call against (`belay.harness.mcp_tools`), not a model of ours."""

    model_config = ConfigDict(extra="allow")


class RunCommandArguments(ToolArguments):
    command: Annotated[
        str | list[str],
        WithJsonSchema(
            {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "description": "the command line (or its argv)",
            }
        ),
    ]
    timeout_s: int | None = Field(default=None, ge=1, le=MAX_COMMAND_TIMEOUT_S)
    cwd: str | None = _text()


class ReadFileArguments(ToolArguments):
    path: str


class WriteFileArguments(ToolArguments):
    path: str
    content: str


class ListFilesArguments(ToolArguments):
    path: str | None = _text()


class PublishDeliverableArguments(ToolArguments):
    path: str = Field(description="workspace path")
    name: str | None = _text("deliverable name")


class RecordNoteArguments(ToolArguments):
    note_id: str
    kind: str | None = _text("hypothesis | decision | finding")
    text: str
    status: str | None = _text("open | supported | rejected | accepted | superseded")
    evidence: list[ListItem] | None = _list("the files, tests or outputs behind it")


class UpdatePlanArguments(ToolArguments):
    step: str = Field(description="step id")
    title: str | None = _text()
    status: str | None = _text("running | done")
    inputs: list[ListItem] | None = _list("starting a step: the request parts it depends on")
    verify: str | None = _text("finishing a step: the command that verifies it")
    expect_exit_code: int | None = _text("the verify command's expected exit")
    next_step: str | None = _text("finishing a step: the step that comes next (`end`: none)")


class WaitOnUserArguments(ToolArguments):
    reason: str | None = _text()


class WaitOnExternalArguments(ToolArguments):
    reason: str | None = _text()
    condition: str | None = _text()


class CreateTicketArguments(ToolArguments):
    title: str = Field(min_length=1, max_length=MAX_TICKET_TITLE_CHARS)
    body: str | None = Field(default=None, max_length=MAX_TICKET_BODY_CHARS)


class StartSessionArguments(ToolArguments):
    name: str = Field(description="the child session's name (a DNS label)")
    part: str = Field(description="which part of the objective it does")
    goal: str = Field(description="what it is asked to do")
    plan: str | None = _text("for a scripted child: its plan file")
    deliverable: str | None = _text("the deliverable the child owes: it completes once it is published")


class AwaitSessionArguments(ToolArguments):
    name: str = Field(description="the child session's name")


class RequestApprovalArguments(ToolArguments):
    summary: str | None = _text()


def parameters_schema(model: type[ToolArguments]) -> dict[str, Any]:
    """The model's JSON Schema as a tool's `parameters`: an object of its fields, the required
    ones named, no other key allowed; titles and null defaults left out (they only cost tokens).
    A copy of its own for each caller; generated once per model (every call is checked with it)."""
    return copy.deepcopy(_parameters_schema(model))


@functools.cache
def _parameters_schema(model: type[ToolArguments]) -> dict[str, Any]:
    generated = model.model_json_schema()
    properties = {name: _without_null(schema) for name, schema in generated["properties"].items()}
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if generated.get("required"):
        parameters["required"] = list(generated["required"])
    parameters["additionalProperties"] = False
    return parameters


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    schema = {key: value for key, value in schema.items() if key != "title"}
    if schema.get("default", ...) is None:
        del schema["default"]
    branches = schema.pop("anyOf", None)
    if branches is not None:
        kept = [branch for branch in branches if branch.get("type") != "null"]
        if len(kept) != 1:
            raise ValueError(f"a tool argument must have one JSON type, not {kept}")
        schema = {**_without_null(kept[0]), **schema}
    if isinstance(schema.get("items"), dict):
        schema["items"] = _without_null(schema["items"])
    return schema
