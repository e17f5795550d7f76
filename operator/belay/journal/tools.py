"""The tool catalogue: every tool's name, effect class, where it runs, what it is for, its
parameters, how an unknown outcome is probed and whether it always needs an approval. Pure data.

The effect class decides what a new harness attempt does with a request that has no result
(docs/architecture.md, "Recovery"; `belay.journal.recovery`): read_only and idempotent run again,
keyed runs again with the same key, unsafe is never repeated blindly: its outcome is unknown until
a probe or a person reconciles it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from belay.journal.events import EffectClass
from belay.journal.tool_arguments import (
    AwaitSessionArguments,
    CreateTicketArguments,
    ListFilesArguments,
    PublishDeliverableArguments,
    ReadFileArguments,
    RecordNoteArguments,
    RequestApprovalArguments,
    RunCommandArguments,
    ServerToolArguments,
    StartSessionArguments,
    ToolArguments,
    UpdatePlanArguments,
    WaitOnExternalArguments,
    WaitOnUserArguments,
    WriteFileArguments,
    parameters_schema,
)

# "server": a tool of a subagent's declared MCP server (`<server>.<tool>`), run by that server in
# the subagent's sandbox; its effect class comes from the server's listing (belay.harness.mcp_tools).
Where = Literal["sandbox", "harness", "server"]
SERVER_TOOL_SEPARATOR = "."

# What one sandbox call may bring back into the harness (and into the model's context): a file
# above the read_file cap is refused, its bytes streamed to the artifact store instead; a command's
# output is cut at the output cap, per stream. The defaults, and the most a manifest may set
# (`spec.limits`), which bounds the JSON the sandbox answers with.
DEFAULT_READ_FILE_BYTES = 1024 * 1024
DEFAULT_COMMAND_OUTPUT_BYTES = 1024 * 1024
MAX_CAPTURE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ToolSpec:
    name: str
    effect: EffectClass
    where: Where
    description: str
    arguments: type[ToolArguments]  # what a call may give: the schema shown and the one checked
    reconcile_probe: str | None = None  # how an unknown outcome is settled without repeating it
    needs_approval: bool = False
    # What the harness itself adds to a recorded request beside the call's arguments (never shown
    # to a model, never taken from one: the harness sets it over whatever a call sent).
    harness_set: tuple[str, ...] = ()

    @property
    def schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema, as a model is shown it."""
        return parameters_schema(self.arguments)

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.schema["properties"])

    @property
    def required(self) -> tuple[str, ...]:
        """Arguments a call must give."""
        return tuple(self.schema.get("required", ()))


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "run_command",
            EffectClass.IDEMPOTENT,
            "sandbox",
            "Run a shell command in the workspace; returns exit_code, stdout, stderr.",
            RunCommandArguments,
        ),
        ToolSpec("read_file", EffectClass.READ_ONLY, "sandbox", "Read a workspace file.", ReadFileArguments),
        ToolSpec(
            "write_file",
            EffectClass.IDEMPOTENT,
            "sandbox",
            "Write a workspace file (whole content).",
            WriteFileArguments,
        ),
        ToolSpec("list_files", EffectClass.READ_ONLY, "sandbox", "List workspace files.", ListFilesArguments),
        ToolSpec(
            "publish_deliverable",
            EffectClass.IDEMPOTENT,
            "harness",
            "Copy a workspace file out of the sandbox into the artifact store as a deliverable.",
            PublishDeliverableArguments,
            harness_set=("content_sha256",),
        ),
        ToolSpec(
            "record_note",
            EffectClass.IDEMPOTENT,
            "harness",
            "Record a hypothesis, decision or finding with its status.",
            RecordNoteArguments,
        ),
        ToolSpec(
            "update_plan",
            EffectClass.IDEMPOTENT,
            "harness",
            "Start or finish a step of your plan; finishing a step checkpoints the workspace.",
            UpdatePlanArguments,
        ),
        ToolSpec(
            "wait_on_user",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until the user answers.",
            WaitOnUserArguments,
        ),
        ToolSpec(
            "wait_on_external",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until an external condition holds.",
            WaitOnExternalArguments,
        ),
        ToolSpec(
            "create_ticket",
            EffectClass.UNSAFE,
            "harness",
            "Open a ticket in the team's tracker. Not deduplicated by the tracker.",
            CreateTicketArguments,
            reconcile_probe="find_tickets",
        ),
        ToolSpec(
            "start_session",
            EffectClass.IDEMPOTENT,
            "harness",
            "Start a child session for one part of this session's objective (the operator in a "
            "cluster, the embedded runtime on one machine creates it); its deliverables come back as "
            "this session's artifacts. Wait for it with await_session.",
            StartSessionArguments,
        ),
        ToolSpec(
            "await_session",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until a child session ends; returns how it ended and its deliverables.",
            AwaitSessionArguments,
        ),
        ToolSpec(
            "request_approval",
            EffectClass.IDEMPOTENT,
            "harness",
            "Ask the user to approve something before going on.",
            RequestApprovalArguments,
            needs_approval=True,
        ),
    )
}


def effect_of(tool: str, network_profile: str = "none", command_effect: str | None = None) -> EffectClass:
    """The effect class a call of `tool` is recorded with, in a sandbox of `network_profile`.
    `run_command` is idempotent in a sandbox that reaches nothing (whatever it does stays in the
    workspace, which a recovery restores); in one that reaches a network a command may change
    something outside (a push, a post, a deploy), so it is unsafe there, unless the manifest
    classes the subagent's commands otherwise (`commandEffect`)."""
    spec = tool_spec(tool)
    if spec.name != "run_command":
        return spec.effect
    if command_effect is not None:
        return EffectClass(command_effect)
    return spec.effect if network_profile == "none" else EffectClass.UNSAFE


def unknown_tool(name: str) -> str:
    """Why `name` is no tool: the nearest tool's name, when one is near, and every tool."""
    nearest = difflib.get_close_matches(name, TOOLS, n=1, cutoff=0.5)
    near = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return f"unknown tool {name!r}{near} (the tools are: {', '.join(sorted(TOOLS))}; docs/tools.md)"


def is_server_tool(name: str) -> bool:
    """Whether `name` is `<server>.<tool>`: no built-in tool's name holds a dot."""
    server, dot, tool = name.partition(SERVER_TOOL_SEPARATOR)
    return bool(server and dot and tool)


def tool_spec(name: str) -> ToolSpec:
    """The catalogue's tool; for `<server>.<tool>`, what holds for every server tool (the
    strictest class, which the server's listing replaces where it is known); for any other name,
    the spec of a tool that does not exist."""
    if is_server_tool(name):
        return ToolSpec(
            name, EffectClass.UNSAFE, "server", "a tool of a declared MCP server", ServerToolArguments
        )
    known = TOOLS.get(name)
    if known is not None:
        return known
    # A name a model made up: recorded as it asked, then refused as that call's error result
    # (`is_known_tool`), never run and never the end of the attempt. Read-only, since nothing of
    # it ever runs: a resume after a kill settles it by refusing it again.
    return ToolSpec(name, EffectClass.READ_ONLY, "harness", unknown_tool(name), ServerToolArguments)


def is_known_tool(name: str) -> bool:
    """Whether `name` is a built-in tool or a declared server's `<server>.<tool>` (which the
    server's listing then checks)."""
    return name in TOOLS or is_server_tool(name)


def call_arguments(name: str, recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded request's arguments as the call gave them: without what the harness added."""
    spec = TOOLS.get(name)
    added = spec.harness_set if spec is not None else ()
    return {key: value for key, value in recorded.items() if key not in added}


def argument_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call's arguments do not fit its tool's schema (an argument the tool does not take, a
    required one missing, a wrong type, a number out of its range); None when they fit. What a
    model or a plan sends is checked with this before anything else reads it: a call that does not
    fit is that call's error, in the schema's words, which the model is shown."""
    spec = TOOLS.get(name)
    if spec is None:
        return unknown_tool(name)
    parameters = spec.parameters
    unknown = [key for key in arguments if key not in parameters]
    if unknown:
        takes = ", ".join(parameters) or "no argument"
        return f"{name}: unexpected argument {', '.join(map(repr, unknown))} (it takes only: {takes})"
    missing = [key for key in spec.required if key not in arguments]
    if missing:
        return f"{name}: missing required argument {', '.join(missing)}"
    for key, schema in parameters.items():
        if key in arguments:
            problem = _value_problem(arguments[key], schema)
            if problem is not None:
                return f"{name}: argument {key!r} {problem}, got {_json_repr(arguments[key])}"
    try:
        spec.arguments.model_validate(arguments)
    except ValidationError as error:  # the model is the last word on what fits
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{name}: argument {where!r} {first['msg']}"
    return None


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    return [str(k) for k in kind] if isinstance(kind, list) else [str(kind)] if kind else []


def _value_problem(value: Any, schema: dict[str, Any]) -> str | None:
    kinds = _types(schema)
    if kinds and not any(_JSON_TYPES.get(kind, lambda _: True)(value) for kind in kinds):
        return f"must be of type {' or '.join(kinds)}"
    items = schema.get("items")
    if isinstance(value, list) and len(value) > schema.get("maxItems", len(value)):
        return f"must have at most {schema['maxItems']} items"
    if isinstance(value, list) and isinstance(items, dict):
        for index, item in enumerate(value):
            problem = _value_problem(item, items)
            if problem is not None and problem.startswith("must be of type"):
                return f"must be an array of {' or '.join(_types(items))}"
            if problem is not None:
                return f"item {index} {problem}"
    if isinstance(value, str):
        shortest, longest = schema.get("minLength", 0), schema.get("maxLength")
        if len(value) < shortest or (longest is not None and len(value) > longest):
            if longest is None:
                return f"must be at least {shortest} characters long"
            return f"must be {shortest} to {longest} characters long"
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return f"must be between {low} and {high}"
    return None


def _json_repr(value: Any) -> str:
    """The value as it came, in JSON's words, cut short: the complaint names what was sent."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _parameter(name: str, schema: dict[str, Any], required: tuple[str, ...]) -> str:
    kind = " or ".join(_types(schema))
    if "array" in _types(schema):
        kind = kind.replace("array", f"array of {' or '.join(_types(schema.get('items', {})))}".strip())
    described = f": {schema['description']}" if schema.get("description") else ""
    longest = f", at most {schema['maxLength']} characters" if "maxLength" in schema else ""
    if "maxItems" in schema:
        longest = f", at most {schema['maxItems']} items of at most {schema['items']['maxLength']} characters"
    return f"`{name}` ({kind}{', required' if name in required else ''}{longest}){described}"


def reference() -> str:
    """docs/tools.md: the plan vocabulary, written from this catalogue (a test checks the file
    equals it; `python -m belay.journal.tools > docs/tools.md` writes it again)."""
    lines = [
        "# Tools",
        "",
        "<!-- Generated from belay.journal.tools by `python -m belay.journal.tools > docs/tools.md`; "
        "tests/journal/test_tools_doc.py checks it is current. -->",
        "",
        "The tools a plan's actions and a model may call, by the name a plan writes in `tool:`. The",
        "effect class decides what a new attempt does with a call that has no result (read_only and",
        "idempotent run again, keyed runs again with its key, unsafe is never repeated blindly).",
        "A plan that names another tool is refused with the nearest name and this list.",
        "`run_command` is unsafe in a sandbox whose network profile is not `none` (a command that",
        "reaches a network may change something outside the sandbox), unless the subagent's",
        "`commandEffect` says `idempotent`.",
        "",
        "| tool | effect | runs in | approval | what it does | arguments |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in sorted(TOOLS):
        spec = TOOLS[name]
        arguments = "; ".join(
            _parameter(arg, schema, spec.required) for arg, schema in spec.parameters.items()
        )
        approval = "always" if spec.needs_approval else "when `spec.approvalRequired` names it"
        probe = spec.reconcile_probe and f" An unknown outcome is probed with `{spec.reconcile_probe}`."
        cells = [
            f"`{name}`",
            spec.effect.value,
            spec.where,
            approval,
            spec.description + (probe or ""),
            arguments or "-",
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join([*lines, *SERVER_TOOLS_REFERENCE]) + "\n"


# docs/tools.md's section on the tools of a subagent's MCP servers (belay.harness.mcp_tools).
SERVER_TOOLS_REFERENCE = [
    "",
    "## Tools of a subagent's MCP servers",
    "",
    "A subagent may declare MCP tool servers (`toolServers`); their tools are called as `<server>.<tool>`",
    "beside the tools above, and `approvalRequired` names them the same way (`tracker.open_issue`,",
    "`worker:tracker.open_issue`). Only stdio servers on the embedded runtime (`belay run`) are built:",
    "a manifest with another `transport` is refused, and so is, by the operator (`Stalled`,",
    "`NotAllowed`), a session in a cluster that declares tool servers.",
    "",
    "```yaml",
    "subagents:",
    "  - name: worker",
    "    networkProfile: internet      # what the server reaches is what the sandbox reaches",
    "    toolServers:",
    "      - name: tracker             # its tools are tracker.<tool>",
    "        command: [python, tools/tracker_server.py, https://tracker.example]",
    "        probe: find_issues        # a read-only tool a reconciliation runs",
    "        timeoutSeconds: 60        # one listing or one call, at most",
    "        tools:",
    "          open_issue: {effect: unsafe}",
    "          label_issue: {effect: read_only, trust: override}",
    "```",
    "",
    "- **Where it runs.** `command` is started in the subagent's workspace, inside its sandbox (its",
    "  walls, network profile and environment, and the resource walls of any of its commands), once to",
    "  list the tools at the start of every attempt",
    "  (`initialize`, `tools/list`) and once per call (`initialize`, `tools/call`), with the official",
    "  `mcp` SDK's client in the sandbox server. A server keeps nothing in memory from one call to the",
    "  next. Locally, a `python` server finds the Python packages installed beside Belay (the `mcp`",
    "  SDK among them).",
    "- **Offered to the model.** A plan calls them as `<server>.<tool>`; a plan that names a server",
    "  its subagent does not declare is refused before it runs. A self-hosted model (`openai`,",
    "  `anthropic`) is given each listed tool's schema beside the built-ins, named `<server>__<tool>`",
    "  (the providers' APIs take no `.`; other characters outside `[A-Za-z0-9_-]` written `_<hex>_`),",
    "  and its calls are recorded as `<server>.<tool>`. Managed executors are not given them yet.",
    "- **The listing.** Each listing is recorded: a `tools_listed` event names a JSON document in the",
    "  artifact store with the server's name and version and each tool's name, input schema,",
    "  annotations and the class it is given, and says what changed since the listing before it (a",
    "  tool gone, new, reclassed). A call to a tool the current listing does not offer (it vanished,",
    "  or the server could not be listed) is not sent: it is that call's error. A tool whose name",
    "  Belay cannot call (outside `[A-Za-z0-9_.-]`, longer than 128) is left out and named.",
    "- **Effect classes.** From the annotations: `readOnlyHint: true` is read_only, else",
    "  `idempotentHint: true` is idempotent, else unsafe (an unannotated tool is unsafe). `tools` may",
    "  class a tool more strictly; less strictly only with `trust: override`, and the listing records",
    "  which applied; without it the annotations' class is kept and the listing says so. `keyed` is not",
    "  offered: an MCP call carries no key a server would honour.",
    "- **Failures.** A call the server answers with `isError` is that call's failed result for the",
    "  model (it waits on no person). A call the server received and never answered (it died, or",
    "  passed `timeoutSeconds`) may have taken effect: for an unsafe tool that is an unknown outcome.",
    "- **Reconciliation.** An unsafe call without a result (cut off by a kill, or never answered) is",
    "  never sent again blindly. With a `probe`, the next attempt runs it (with the arguments of the",
    "  call that its input schema names) and shows what it found in the outcome and in the question",
    "  to the person (`belay reconcile SESSION OPERATION --succeeded` or `--failed`); the person",
    "  decides, since a server's answer is no proof of what Belay sent. Without a probe, the outcome",
    "  waits on the person alike. The probe must be read-only in the listing, or it is not run.",
]


if __name__ == "__main__":
    print(reference(), end="")
