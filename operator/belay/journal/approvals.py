"""Approval matching: one operation, one payload hash, before an expiry.

An approval is checked at dispatch against the operation about to run and the sha256 of its
canonical payload. Another operation, another payload, an expired approval or a rejection never
match, so resuming a session can never turn one approval into a broader one.

An approval's expiry is the earliest of the expiry on its request and the expiry on the decision;
with neither, it does not expire.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from belay.journal.events import Approval
from belay.journal.state import ApprovalRecord, SessionState


class ApprovalState(StrEnum):
    NOT_REQUESTED = "not_requested"
    PENDING = "pending"
    GRANTED = "granted"
    REJECTED = "rejected"
    EXPIRED = "expired"


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None:
        raise ValueError("`now` must be timezone-aware: approval expiries are compared in UTC")


def _earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def effective_expiry(approval: Approval | ApprovalRecord) -> datetime | None:
    if isinstance(approval, Approval):
        return approval.expires_at
    return _earliest(approval.request_expires_at, approval.decision_expires_at)


def approval_matches(
    approval: Approval | ApprovalRecord, operation_id: str, payload_sha256: str, now: datetime
) -> bool:
    """True only for a grant of this operation, for this exact payload hash, not yet expired."""
    _require_aware(now)
    approved_sha: str | None
    if isinstance(approval, Approval):
        granted, approved_sha = approval.granted, approval.payload_sha256
    else:
        granted, approved_sha = approval.decision == "granted", approval.decision_payload_sha256
    if not granted or approval.operation_id != operation_id or approved_sha != payload_sha256:
        return False
    expiry = effective_expiry(approval)
    return expiry is None or now < expiry


def _decisions_for(state: SessionState, operation_id: str, payload_sha256: str) -> list[ApprovalRecord]:
    decided = [
        r
        for r in state.approvals_for(operation_id)
        if r.decision is not None and r.decision_payload_sha256 == payload_sha256
    ]
    return sorted(decided, key=lambda r: r.decided_seq or 0)


def matching_approval(
    state: SessionState, operation_id: str, payload_sha256: str, now: datetime
) -> ApprovalRecord | None:
    """The approval that lets this operation run with this payload now, if any.

    The latest decision on this operation and payload wins: a rejection recorded after a grant
    withdraws it."""
    decisions = _decisions_for(state, operation_id, payload_sha256)
    if not decisions:
        return None
    latest = decisions[-1]
    return latest if approval_matches(latest, operation_id, payload_sha256, now) else None


def is_operation_approved(state: SessionState, operation_id: str, payload_sha256: str, now: datetime) -> bool:
    return matching_approval(state, operation_id, payload_sha256, now) is not None


def approval_state(
    state: SessionState, operation_id: str, payload_sha256: str, now: datetime
) -> ApprovalState:
    """Where approval of this operation and payload stands, for briefings and status."""
    _require_aware(now)
    decisions = _decisions_for(state, operation_id, payload_sha256)
    if decisions:
        latest = decisions[-1]
        if latest.decision == "rejected":
            return ApprovalState.REJECTED
        if approval_matches(latest, operation_id, payload_sha256, now):
            return ApprovalState.GRANTED
        return ApprovalState.EXPIRED
    requested = [r for r in state.approvals_for(operation_id) if r.pending]
    return ApprovalState.PENDING if requested else ApprovalState.NOT_REQUESTED
