"""`resume --executor TYPE [--model ID]`: the executor a session moves to, or a refusal that says
what to do instead; the same for `belay resume` (which records the move) and `kubectl belay resume`
(which edits `spec.executor`, recorded by the operator as the same move)."""

from __future__ import annotations

from typing import Any

from belay.api.agentsession import (
    MANAGED_EXECUTORS,
    MODEL_EXECUTORS,
    PLAN_EXECUTORS,
    AgentSession,
    ExecutorSpec,
    ManifestError,
)
from belay.cli.core.errors import CommandError
from belay.journal.events import ExecutorChange

# `self-hosted` is how the drill names Belay's own loop over the session's plan: `scripted`.
ALIASES = {"self-hosted": "scripted"}
TYPES = ("self-hosted", "scripted", "openai", "anthropic", *MANAGED_EXECUTORS)


def moved_executor(session: AgentSession, to_type: str, model: str | None) -> AgentSession | None:
    """The session on the executor `--executor to_type --model model` asks for, validated as the
    API validates it; None when it is the one the session is on already. Refused (CommandError)
    when it is no executor or lacks what its type needs."""
    current = session.spec.executor
    wanted = ALIASES.get(to_type, to_type)
    if wanted not in TYPES:
        raise CommandError(f"no executor {to_type!r}; the executors are: {', '.join(TYPES)}")
    if model is not None and wanted not in MODEL_EXECUTORS:
        raise CommandError(f"--model does not apply to {to_type}: it names no model")
    if model is None and wanted in MODEL_EXECUTORS:
        model = current.model if current.type == wanted else None
        if model is None:
            raise CommandError(f"{to_type} needs a model: add --model ID (e.g. the provider's model id)")
    spec: dict[str, Any] = {"type": wanted}
    if model is not None:
        spec["model"] = model
    if wanted in PLAN_EXECUTORS and current.plan:
        spec["plan"] = current.plan  # what a scripted model, or a local stand-in, follows
    if wanted == "scripted" and not current.plan:
        raise CommandError(
            f"the session has no executor.plan, so it cannot move to {to_type} (a scripted model "
            "follows a plan); move it to a model executor instead"
        )
    if current.credentials_secret and wanted != "scripted" and same_provider(current.type, wanted):
        spec["credentialsSecret"] = current.credentials_secret
    try:
        moved = session.on_executor(spec)
    except ManifestError as error:
        raise CommandError(str(error)) from None
    executor = moved.spec.executor
    same = executor.type == current.type and executor.model == current.model
    return None if same else moved


def same_provider(a: str, b: str) -> bool:
    """Whether two executor types read the same provider's credentials (`OPENAI_*`, `ANTHROPIC_*`)."""
    return a.split("-")[0] == b.split("-")[0]


def change_event(
    session: AgentSession, new: ExecutorSpec, *, at_seq: int, by: str, reason: str
) -> ExecutorChange:
    """The record of the move, as `belay resume --executor` writes it."""
    old = session.spec.executor
    return ExecutorChange(
        from_type=old.type,
        from_model=old.model,
        to_type=new.type,
        to_model=new.model,
        executor=new.model_dump(mode="json", by_alias=True, exclude_none=True),
        at_seq=at_seq,
        by=by,
        reason=reason,
    )
