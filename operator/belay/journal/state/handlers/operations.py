"""Handlers of the calls a session makes: model outputs, tool requests and their results, and the
outcomes of operations settled after the fact."""

from __future__ import annotations

from typing import Any

from belay.journal.events import (
    EffectClass,
    EventBase,
    ModelOutputEvent,
    OperationOutcomeEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.journal.state.building import Updates, decided, new_record, note_ordinal, note_subagent, replaced
from belay.journal.state.invalidation import register_result
from belay.journal.state.records import (
    RECENT_LIMIT,
    DecisionRecord,
    OperationRecord,
    operation_payload_sha256,
)
from belay.journal.state.session import SessionState


def on_model_output(s: SessionState, e: ModelOutputEvent) -> Updates:
    p = e.payload
    updates: Updates = {"model_calls": s.model_calls + 1}
    if p.input_tokens or p.output_tokens:
        updates["input_tokens"] = s.input_tokens + p.input_tokens
        updates["output_tokens"] = s.output_tokens + p.output_tokens
        updates["cached_input_tokens"] = s.cached_input_tokens + p.cached_input_tokens
    return updates


# The tools that hand a part of the objective to a child session.
DELEGATION_TOOLS = frozenset({"start_session", "await_session"})


def on_tool_request(s: SessionState, e: ToolRequestEvent) -> Updates:
    p = e.payload
    subagent = p.subagent or e.actor.subagent
    record = new_record(
        OperationRecord,
        operation_id=p.operation_id,
        tool=p.tool,
        effect=p.effect,
        request_seq=e.seq,
        payload_sha256=p.payload_sha256 or operation_payload_sha256(p.tool, p.arguments),
        step=p.step,
        subagent=subagent,
        idempotency_key=p.idempotency_key,
        provider_call_id=p.provider_call_id,
        attempt=e.actor.attempt,
        request_version=s.request.version,
    )
    updates: Updates = {
        "operations": s.operations.set(p.operation_id, record),
        "open_operations": s.open_operations.set(p.operation_id, e.seq),
    }
    note_ordinal(s, updates, p.operation_id)
    if p.tool in DELEGATION_TOOLS:
        updates["delegations"] = s.delegations.set(p.operation_id, f"{p.tool} {p.arguments.get('name', '')}")
    if p.provider_call_id and subagent:
        updates["provider_calls"] = s.provider_calls.set(f"{subagent}/{p.provider_call_id}", p.operation_id)
    if p.effect in (EffectClass.UNSAFE, EffectClass.KEYED) and p.operation_id not in s.external_operations:
        updates["external_operations"] = s.external_operations.set(p.operation_id, e.seq)
        recent = (*s.recent_external_operations, p.operation_id)
        updates["recent_external_operations"] = recent[-RECENT_LIMIT:]
    if p.step:
        updates["current_step"] = p.step
    if p.redactions:
        updates["secrets_redacted"] = s.secrets_redacted + p.redactions
    note_subagent(s, updates, subagent, e.seq)
    return updates


def operation_named(s: SessionState, e: EventBase, operation_id: str) -> OperationRecord:
    """The operation an event names. One whose request we never saw is still tracked (as unsafe,
    the cautious class), so its result or outcome closes it rather than being dropped."""
    existing = s.operations.get(operation_id)
    if existing is not None:
        return existing
    return new_record(
        OperationRecord,
        operation_id=operation_id,
        tool="",
        effect=EffectClass.UNSAFE,
        request_seq=e.parent_seq or e.seq,
        payload_sha256="",
    )


def on_tool_result(s: SessionState, e: ToolResultEvent) -> Updates:
    p = e.payload
    existing = operation_named(s, e, p.operation_id)
    fields: dict[str, Any] = {
        "result_seq": e.seq,
        "result_at": e.created_at,
        "ok": p.ok,
        "error": p.error,
        "result_id": p.result_id,
    }
    updates: Updates = {}
    requested = s.external_operations.get(p.operation_id)
    if requested is not None:
        fields["effect_ref"] = _effect_ref(p.output) if p.ok else ""
        failed = s.failed_external_operations
        if not p.ok:
            updates["failed_external_operations"] = failed.set(p.operation_id, requested)
        elif p.operation_id in failed:
            updates["failed_external_operations"] = failed.delete(p.operation_id)
    delegation = s.delegations.get(p.operation_id)
    if delegation is not None:
        failed_delegations = s.failed_delegations
        if not p.ok:
            updates["failed_delegations"] = failed_delegations.set(delegation, p.operation_id)
        elif delegation in failed_delegations:
            updates["failed_delegations"] = failed_delegations.delete(delegation)
    record = replaced(existing, fields)
    updates["operations"] = s.operations.set(p.operation_id, record)
    if p.operation_id in s.open_operations:
        updates["open_operations"] = s.open_operations.delete(p.operation_id)
    if p.redactions:
        updates["secrets_redacted"] = s.secrets_redacted + p.redactions
    if p.result_id:
        register_result(
            s,
            updates,
            result_id=p.result_id,
            source="tool_result",
            label=record.tool or p.operation_id,
            seq=e.seq,
            derived_from=p.derived_from,
            output_sha256=p.output_ref.sha256 if p.output_ref else None,
            step=record.step,
        )
    return updates


def _effect_ref(output: Any) -> str:
    """What an external effect made, as its system names it (a ticket's id), when it says."""
    if isinstance(output, dict):
        for key in ("id", "url", "key"):
            if isinstance(output.get(key), str | int):
                return str(output[key])
    return ""


def on_operation_outcome(s: SessionState, e: OperationOutcomeEvent) -> Updates:
    p = e.payload
    existing = operation_named(s, e, p.operation_id)
    record = replaced(
        existing,
        {
            "outcome": p.outcome,
            "outcome_seq": e.seq,
            "reconciled_succeeded": p.succeeded if p.outcome == "reconciled" else None,
            "outcome_detail": p.detail,
            "effects": p.effects or existing.effects,
        },
    )
    updates: Updates = {"operations": s.operations.set(p.operation_id, record)}
    if len(p.effects) > 1:
        updates["repeated_effects"] = s.repeated_effects.set(p.operation_id, e.seq)
    if p.outcome == "unknown":
        updates["unknown_outcomes"] = s.unknown_outcomes.set(p.operation_id, e.seq)
    else:
        if p.operation_id in s.unknown_outcomes:
            updates["unknown_outcomes"] = s.unknown_outcomes.delete(p.operation_id)
        updates["reconciled_operations"] = s.reconciled_operations.set(p.operation_id, e.seq)
        if e.actor.kind == "user":
            decided(
                s,
                updates,
                new_record(
                    DecisionRecord,
                    seq=e.seq,
                    kind="reconciliation",
                    item=p.operation_id,
                    outcome="took effect" if p.succeeded else "took no effect",
                    by=p.by or e.actor.name or "user",
                    at=e.created_at,
                    reason=p.detail,
                ),
            )
        # Reconciling settles the operation: it no longer waits for a result.
        if p.operation_id in s.open_operations:
            updates["open_operations"] = s.open_operations.delete(p.operation_id)
    return updates
