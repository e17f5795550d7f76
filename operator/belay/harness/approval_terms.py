"""What a person is asked before a call runs: the ids of its approvals (to dispatch it, to retry it
after a failure), the request that asks, an approval the spec gives outright, and the answer to a
call whose approval a change withdrew."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from belay.api.agentsession import ApprovalGrant, SubagentSpec
from belay.journal.events import ApprovalRequest, ToolRequest
from belay.journal.state import SessionState
from belay.journal.state.records import ApprovalRecord


def latest_retry(state: SessionState, operation_id: str) -> ApprovalRecord | None:
    """The newest request to retry a failed external effect, if any."""
    retries = [a for a in state.approvals_for(operation_id) if a.kind == "retry"]
    return retries[-1] if retries else None


def declared_grant(
    grants: Sequence[ApprovalGrant], request: ToolRequest, approval_id: str, now: datetime
) -> ApprovalGrant | None:
    """An approval given in the spec for exactly this operation and payload, still in force."""
    for grant in grants:
        names_it = grant.operation_id == request.operation_id or grant.approval_id == approval_id
        if not names_it or grant.payload_sha256 != request.payload_sha256:
            continue
        if grant.expires_at is not None and grant.expires_at <= now:
            continue
        return grant
    return None


def not_run_withdrawn(approval: ApprovalRecord) -> str:
    """The answer to a call whose approval a change withdrew before anyone decided it."""
    return f"not run: no longer asked ({approval.withdrawn_because}); its step makes its calls again"


def approval_id_for(operation_id: str) -> str:
    return f"approve-{operation_id}"


def retry_approval_id(operation_id: str, number: int) -> str:
    """The approval asked for after the `number`-th failure of an unsafe operation."""
    return f"retry-{operation_id}" if number == 1 else f"retry-{operation_id}-{number}"


def approval_request(sub: SubagentSpec, request: ToolRequest) -> ApprovalRequest:
    return ApprovalRequest(
        approval_id=approval_id_for(request.operation_id),
        operation_id=request.operation_id,
        tool=request.tool,
        payload_sha256=request.payload_sha256,
        summary=f"{sub.name} wants to run {request.tool} {_short(request.arguments)}",
    )


def _short(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in sorted(arguments.items()) if k != "content")
    return text if len(text) <= 160 else text[:157] + "..."
