"""How a move to another executor reads, in every view (the briefing, `belay events`, the report,
the model's context): one phrase, written once."""

from __future__ import annotations


def executor_label(executor_type: str, model: str | None = None) -> str:
    """`openai-agents (gpt-5)`, or the type alone when it names no model (`scripted`)."""
    return f"{executor_type} ({model})" if model else executor_type


def change_phrase(
    from_type: str,
    from_model: str | None,
    to_type: str,
    to_model: str | None,
    *,
    by: str = "",
    at_seq: int = 0,
    reason: str = "",
) -> str:
    """`moved from openai-agents (gpt-5) to scripted at seq 30 by belay resume: why`."""
    where = f" at seq {at_seq}" if at_seq else ""
    who = f" by {by}" if by else ""
    why = f": {reason}" if reason else ""
    return (
        f"moved from {executor_label(from_type, from_model)} to {executor_label(to_type, to_model)}"
        f"{where}{who}{why}"
    )
