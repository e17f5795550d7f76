"""The tool catalogue: every tool's name, effect class, where it runs, what it is for, its
parameters, how an unknown outcome is probed and whether it always needs an approval. Pure data.

The effect class decides what a new harness attempt does with a request that has no result
(docs/architecture.md, "Recovery"; `belay.journal.recovery`): read_only and idempotent run again,
keyed runs again with the same key, unsafe is never repeated blindly: its outcome is unknown until
a probe or a person reconciles it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from belay.journal.events import EffectClass

Where = Literal["sandbox", "harness"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    effect: EffectClass
    where: Where
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    reconcile_probe: str | None = None  # how an unknown outcome is settled without repeating it
    needs_approval: bool = False
    required: tuple[str, ...] = ()  # arguments a call must give


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "run_command",
            EffectClass.IDEMPOTENT,
            "sandbox",
            "Run a shell command in the workspace; returns exit_code, stdout, stderr.",
            {"command": _string("the command line"), "timeout_s": {"type": "integer"}, "cwd": _string("")},
            required=("command",),
        ),
        ToolSpec(
            "read_file",
            EffectClass.READ_ONLY,
            "sandbox",
            "Read a workspace file.",
            {"path": _string("")},
            required=("path",),
        ),
        ToolSpec(
            "write_file",
            EffectClass.IDEMPOTENT,
            "sandbox",
            "Write a workspace file (whole content).",
            {"path": _string(""), "content": _string("")},
            required=("path", "content"),
        ),
        ToolSpec(
            "list_files", EffectClass.READ_ONLY, "sandbox", "List workspace files.", {"path": _string("")}
        ),
        ToolSpec(
            "publish_deliverable",
            EffectClass.IDEMPOTENT,
            "harness",
            "Copy a workspace file out of the sandbox into the artifact store as a deliverable.",
            {"path": _string("workspace path"), "name": _string("deliverable name")},
            required=("path",),
        ),
        ToolSpec(
            "record_note",
            EffectClass.IDEMPOTENT,
            "harness",
            "Record a hypothesis, decision or finding with its status.",
            {
                "note_id": _string(""),
                "kind": _string("hypothesis | decision | finding"),
                "text": _string(""),
                "status": _string("open | supported | rejected | accepted | superseded"),
                "evidence": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "the files, tests or outputs behind it",
                },
            },
            required=("note_id", "text"),
        ),
        ToolSpec(
            "update_plan",
            EffectClass.IDEMPOTENT,
            "harness",
            "Start or finish a step of your plan; finishing a step checkpoints the workspace.",
            {"step": _string("step id"), "title": _string(""), "status": _string("running | done")},
            required=("step",),
        ),
        ToolSpec(
            "wait_on_user",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until the user answers.",
            {"reason": _string("")},
        ),
        ToolSpec(
            "wait_on_external",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until an external condition holds.",
            {"reason": _string(""), "condition": _string("")},
        ),
        ToolSpec(
            "create_ticket",
            EffectClass.UNSAFE,
            "harness",
            "Open a ticket in the team's tracker. Not deduplicated by the tracker.",
            {"title": _string(""), "body": _string("")},
            reconcile_probe="find_tickets",
            required=("title",),
        ),
        ToolSpec(
            "start_session",
            EffectClass.IDEMPOTENT,
            "harness",
            "Start a child session for one part of this session's objective (the operator in a "
            "cluster, the embedded runtime on one machine creates it); its deliverables come back as "
            "this session's artifacts. Wait for it with await_session.",
            {
                "name": _string("the child session's name (a DNS label)"),
                "part": _string("which part of the objective it does"),
                "goal": _string("what it is asked to do"),
                "plan": _string("for a scripted child: its plan file"),
                "deliverable": _string("the deliverable the child owes: it completes once it is published"),
            },
            required=("name", "part", "goal"),
        ),
        ToolSpec(
            "await_session",
            EffectClass.IDEMPOTENT,
            "harness",
            "Wait until a child session ends; returns how it ended and its deliverables.",
            {"name": _string("the child session's name")},
            required=("name",),
        ),
        ToolSpec(
            "request_approval",
            EffectClass.IDEMPOTENT,
            "harness",
            "Ask the user to approve something before going on.",
            {"summary": _string("")},
            needs_approval=True,
        ),
    )
}


def tool_spec(name: str) -> ToolSpec:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(sorted(TOOLS))}") from None
