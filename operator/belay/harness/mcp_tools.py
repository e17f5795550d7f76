"""The tools of a subagent's MCP servers (`toolServers`), under Belay's effect classes.

At the start of an attempt each declared server is listed in the subagent's sandbox (the server
runs there: `belay.sandbox.mcp_stdio`); the listing (the server's name and version, each tool's
name, input schema, annotations and the class it is given) is stored in the artifact store and
named by a `tools_listed` lifecycle event, with what changed since the listing before it. Its
tools are called as `<server>.<tool>`.

A tool server is as untrusted as the agent: its annotations are hints, which decide the default
class only (`readOnlyHint` -> read_only, `idempotentHint` -> idempotent, otherwise unsafe); the
manifest may class a tool more strictly, and less strictly only with `trust: override`. What a
server answers is data: redacted, bounded and recorded like any tool's output.

A call the server received and never answered (it died, it hung past its timeout) may have taken
effect: for an unsafe tool that is an unknown outcome (`OutcomeUnknown`), reconciled like any
other, never sent again. A reconciliation runs the server's declared probe, a read-only tool, and
shows what it found for a person to confirm.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from belay.api.agentsession import SubagentSpec
from belay.api.tool_servers import TOOL_NAME_PATTERN, ToolClass, ToolServerSpec
from belay.harness.attempt import Attempt
from belay.harness.models.base import ToolSchema
from belay.harness.recovery import Recovery
from belay.harness.redaction import Redactor, scanned
from belay.journal.events import EffectClass, Lifecycle, LifecycleKind, ToolRequest, canonical_json
from belay.journal.state import OperationRecord
from belay.journal.tools import SERVER_TOOL_SEPARATOR
from belay.sandbox.client import SandboxUnavailable
from belay.stores.base import ArtifactStore
from belay.views.escaping import one_line

# How strict each class is: a manifest may only raise a tool's class without `trust: override`.
STRICTNESS = {EffectClass.READ_ONLY: 0, EffectClass.IDEMPOTENT: 1, EffectClass.UNSAFE: 2}
# What of a tool's description, and of a probe's finding, is kept.
MAX_DESCRIPTION_CHARS = 1024
MAX_FINDING_CHARS = 2000


class ToolRuntime(Protocol):
    """What of the tool runtime (belay.harness.runtime) a server's listing and calls use."""

    attempt: Attempt
    artifacts: ArtifactStore
    recovery: Recovery
    redactor: Redactor


class OutcomeUnknown(Exception):
    """An unsafe server call was sent and never answered: it may have taken effect."""


def annotated_class(annotations: dict[str, Any]) -> EffectClass:
    """The class a tool's annotations give it; a tool that says nothing is unsafe."""
    if annotations.get("readOnlyHint") is True:
        return EffectClass.READ_ONLY
    if annotations.get("idempotentHint") is True:
        return EffectClass.IDEMPOTENT
    return EffectClass.UNSAFE


def tool_class(annotations: dict[str, Any], declared: ToolClass | None) -> tuple[EffectClass, str]:
    """The class a tool is called under, and how it came to it (recorded with the listing)."""
    hinted = annotated_class(annotations)
    if declared is None:
        return hinted, "from its annotations"
    wanted = EffectClass(declared.effect)
    if STRICTNESS[wanted] >= STRICTNESS[hinted]:
        return wanted, f"{wanted.value} by the manifest (its annotations say {hinted.value})"
    if declared.trust == "override":
        return (
            wanted,
            f"{wanted.value} by the manifest over its annotations ({hinted.value}): trust: override",
        )
    return hinted, (
        f"kept {hinted.value}: the manifest's {wanted.value} is less strict than its annotations and "
        "has no `trust: override`"
    )


@dataclass(frozen=True)
class ListedTool:
    server: str
    name: str
    effect: EffectClass
    input_schema: dict[str, Any]
    description: str = ""


@dataclass
class ServerTools:
    """What this attempt's listings offered, per subagent and server."""

    tools: dict[str, dict[str, ListedTool]] = field(default_factory=dict)  # subagent -> name -> tool
    unlisted: dict[tuple[str, str], str] = field(default_factory=dict)  # (subagent, server) -> why

    def effect(self, sub: SubagentSpec, name: str) -> EffectClass:
        """The class a call of `name` is recorded with: its listing's; for a tool the listing does
        not offer, the manifest's class of it, or unsafe."""
        listed = self.tools.get(sub.name, {}).get(name)
        if listed is not None:
            return listed.effect
        server, _, tool = name.partition(SERVER_TOOL_SEPARATOR)
        spec = server_spec(sub, server)
        declared = spec.tools.get(tool) if spec is not None else None
        return EffectClass(declared.effect) if declared is not None else EffectClass.UNSAFE

    def schemas(self, sub: SubagentSpec) -> list[ToolSchema]:
        """The subagent's server tools as a model is given them, by this attempt's listings."""
        return [
            ToolSchema(
                name=tool.name,
                description=f"{tool.description} (a tool of the server {tool.server}; {tool.effect.value})",
                parameters=tool.input_schema or {"type": "object", "properties": {}},
            )
            for tool in sorted(self.tools.get(sub.name, {}).values(), key=lambda t: t.name)
        ]

    # ---------------------------------------------------------------------------------------------
    # Listing

    async def list_servers(self, runtime: ToolRuntime, sub: SubagentSpec) -> None:
        for spec in sub.tool_servers:
            await self.list_server(runtime, sub, spec)

    async def list_server(self, runtime: ToolRuntime, sub: SubagentSpec, spec: ToolServerSpec) -> None:
        while True:
            try:
                response = await runtime.recovery.handle(sub.name).client.call(
                    "mcp_list", {"command": spec.command, "timeout_s": spec.timeout_seconds}
                )
                break
            except SandboxUnavailable as lost:
                await runtime.recovery.replace_sandbox(sub, lost)
        if not response.get("ok"):
            why = one_line(str(response.get("error") or "it did not answer"))
            self.unlisted[(sub.name, spec.name)] = why
            await runtime.attempt.record(
                [
                    Lifecycle(
                        kind=LifecycleKind.TOOLS_LISTED,
                        subagent=sub.name,
                        reason=spec.name,
                        detail=f"tool server {spec.name} could not be listed: {why}",
                    )
                ],
                subagent=sub.name,
            )
            return
        listing = (
            await scanned(runtime.redactor.output, listing_of(spec, response.get("output") or {}))
        ).value
        offered = self.tools.setdefault(sub.name, {})
        for entry in listing["tools"]:
            offered[entry["call_as"]] = ListedTool(
                spec.name,
                entry["call_as"],
                EffectClass(entry["effect"]),
                entry["input_schema"],
                entry["description"],
            )
        body = canonical_json(listing)
        ref = await asyncio.to_thread(runtime.artifacts.put, body, media_type="application/json")
        state = await runtime.attempt.state()
        record = state.subagents.get(sub.name)
        before = dict(record.tool_listings).get(spec.name) if record is not None else None
        detail = describe(listing)
        if before is not None and before != ref.sha256:
            previous = json.loads(await asyncio.to_thread(runtime.artifacts.get, before))
            changed = changes(previous, listing)
            detail = f"tool server {spec.name} changed since its last listing: {changed}; {detail}"
        await runtime.attempt.record(
            [
                Lifecycle(
                    kind=LifecycleKind.TOOLS_LISTED,
                    subagent=sub.name,
                    reason=spec.name,
                    detail=detail,
                    listing=ref,
                )
            ],
            subagent=sub.name,
        )

    # ---------------------------------------------------------------------------------------------
    # Calls

    def refusal(self, sub: SubagentSpec, request: ToolRequest, arguments: dict[str, Any]) -> str | None:
        """Why a call is not sent: no such server, a tool its listing does not offer (it vanished),
        or arguments its schema's required names are missing from; None: send it."""
        server, _, tool = request.tool.partition(SERVER_TOOL_SEPARATOR)
        if server_spec(sub, server) is None:
            names = ", ".join(s.name for s in sub.tool_servers) or "none"
            return f"{request.tool}: subagent {sub.name} declares no tool server {server!r} (only: {names})"
        if (sub.name, server) in self.unlisted:
            why = self.unlisted[(sub.name, server)]
            return f"{request.tool}: tool server {server} could not be listed: {why}"
        listed = self.tools.get(sub.name, {}).get(request.tool)
        if listed is None:
            offered = sorted(n for n, t in self.tools.get(sub.name, {}).items() if t.server == server)
            return (
                f"{request.tool}: tool server {server} does not offer {tool!r} in this attempt's listing "
                f"(it offers: {', '.join(offered) or 'nothing'})"
            )
        missing = [key for key in listed.input_schema.get("required", []) if key not in arguments]
        if missing:
            return f"{request.tool}: missing required argument {', '.join(map(str, missing))}"
        return None

    async def call(
        self, runtime: ToolRuntime, sub: SubagentSpec, request: ToolRequest, arguments: dict[str, Any]
    ) -> tuple[bool, Any, str | None]:
        """The server's answer to one call, as (ok, output, error). Raises OutcomeUnknown for an
        unsafe call it received and never answered, SandboxUnavailable for a lost sandbox."""
        server, _, tool = request.tool.partition(SERVER_TOOL_SEPARATOR)
        spec = server_spec(sub, server)
        assert spec is not None  # refused otherwise
        client = runtime.recovery.handle(sub.name).client
        response = await client.call(
            "mcp_call",
            {
                "command": spec.command,
                "tool": tool,
                "arguments": arguments,
                "timeout_s": spec.timeout_seconds,
                "max_output_bytes": runtime.attempt.session.spec.limits.command_output_bytes,
            },
        )
        if not response.get("ok"):
            error = str(response.get("error") or "the tool server failed")
            sent = isinstance(response.get("output"), dict) and response["output"].get("sent") is True
            if sent and request.effect == EffectClass.UNSAFE:
                raise OutcomeUnknown(error)
            return False, None, error
        output = response.get("output") or {}
        if output.get("is_error"):
            return False, output, f"{request.tool} answered with an error: {text_of(output)}"
        return True, output, None

    async def probe(
        self, runtime: ToolRuntime, sub: SubagentSpec, op: OperationRecord, request: ToolRequest
    ) -> str:
        """What the server's probe finds for an operation whose outcome is unknown, said for the
        person who reconciles it (redacted, one line, bounded); "" when the server has no probe."""
        server, _, _ = op.tool.partition(SERVER_TOOL_SEPARATOR)
        spec = server_spec(sub, server)
        if spec is None or spec.probe is None:
            return ""
        name = f"{server}{SERVER_TOOL_SEPARATOR}{spec.probe}"
        listed = self.tools.get(sub.name, {}).get(name)
        if listed is None or listed.effect != EffectClass.READ_ONLY:
            why = (
                "not offered by this attempt's listing"
                if listed is None
                else f"listed as {listed.effect.value}"
            )
            return f"its probe {name} was not run: {why}"
        # The call's own arguments that the probe takes (a title, an id), as the request recorded them.
        properties = listed.input_schema.get("properties") or {}
        arguments = {key: value for key, value in request.arguments.items() if key in properties}
        probing = request.model_copy(update={"tool": name, "effect": EffectClass.READ_ONLY})
        try:
            ok, output, error = await self.call(runtime, sub, probing, arguments)
        except Exception as failed:  # a lost sandbox, a server gone: nothing found either way
            ok, output, error = False, None, str(failed)
        said = text_of(output) if ok else f"it failed: {error}"
        redacted = (await scanned(runtime.redactor.output, said)).value
        found = one_line(str(redacted))
        if len(found) > MAX_FINDING_CHARS:
            found = found[:MAX_FINDING_CHARS] + " ..."
        shown = json.dumps(arguments, sort_keys=True, default=str)
        return f"its probe {name}({shown}) found: {found}"


def server_spec(sub: SubagentSpec, server: str) -> ToolServerSpec | None:
    return next((spec for spec in sub.tool_servers if spec.name == server), None)


def listing_of(spec: ToolServerSpec, answer: dict[str, Any]) -> dict[str, Any]:
    """What is recorded of a server's answer to `tools/list`: its identity, and each tool whose
    name is one Belay can call, with the class it is given and why; the others are named as left
    out. Descriptions are cut to a bound."""
    server = answer.get("server")
    identity: dict[str, Any] = server if isinstance(server, dict) else {}
    tools, left_out = [], []
    for tool in answer.get("tools") or []:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not re.fullmatch(TOOL_NAME_PATTERN, name):
            left_out.append(str(name)[:64])
            continue
        annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
        schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {}
        effect, how = tool_class(annotations, spec.tools.get(name))
        tools.append(
            {
                "name": name,
                "call_as": f"{spec.name}{SERVER_TOOL_SEPARATOR}{name}",
                "description": str(tool.get("description") or "")[:MAX_DESCRIPTION_CHARS],
                "input_schema": schema,
                "annotations": annotations,
                "effect": effect.value,
                "class": how,
            }
        )
    return {
        "server": spec.name,
        "identity": {"name": str(identity.get("name", "")), "version": str(identity.get("version", ""))},
        "protocol_version": str(answer.get("protocol_version", "")),
        "tools": sorted(tools, key=lambda t: t["name"]),
        "left_out": sorted(left_out),
    }


def describe(listing: dict[str, Any]) -> str:
    identity = listing["identity"]
    tools = ", ".join(f"{t['call_as']} ({t['effect']}, {t['class']})" for t in listing["tools"])
    left = (
        f"; left out, names Belay cannot call: {', '.join(listing['left_out'])}"
        if listing["left_out"]
        else ""
    )
    return (
        f"tool server {listing['server']} is {identity['name'] or '(unnamed)'} "
        f"{identity['version'] or '(no version)'}: {len(listing['tools'])} tools: {tools or 'none'}{left}"
    )


def changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What differs between two listings of one server, tool by tool."""
    old = {t["name"]: t for t in before.get("tools", [])}
    new = {t["name"]: t for t in after.get("tools", [])}
    said = [f"{name} is gone" for name in sorted(old.keys() - new.keys())]
    said += [f"{name} is new" for name in sorted(new.keys() - old.keys())]
    for name in sorted(old.keys() & new.keys()):
        if old[name]["effect"] != new[name]["effect"]:
            said.append(f"{name} is now {new[name]['effect']} (was {old[name]['effect']})")
        elif old[name] != new[name]:
            said.append(f"{name} changed its schema, description or annotations")
    if before.get("identity") != after.get("identity"):
        said.append(f"the server is now {after['identity']['name']} {after['identity']['version']}")
    return ", ".join(said) or "its listing differs"


def text_of(output: Any) -> str:
    """A server's answer as text: its structured content, else its text blocks."""
    if not isinstance(output, dict):
        return ""
    if output.get("structured_content") is not None:
        return json.dumps(output["structured_content"], sort_keys=True, default=str)
    blocks = output.get("content") or []
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
