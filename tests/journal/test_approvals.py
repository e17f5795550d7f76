from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from belay.journal.approvals import (
    ApprovalState,
    approval_matches,
    approval_state,
    is_operation_approved,
    matching_approval,
)
from belay.journal.events import Approval, ApprovalRequest
from belay.journal.state import fold
from tests.journal.fixtures import NOW, PUBLISH_SHA, LogBuilder, realistic_log

hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
# A small pool, so that the asked payload often equals the approved one.
pooled_hashes = st.one_of(st.sampled_from(["1" * 64, "2" * 64]), hashes)
op_ids = st.sampled_from(["op-1", "op-2", "op-publish-1", "deploy"])
moments = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC))


@settings(max_examples=300)
@given(
    approved_op=op_ids,
    approved_sha=pooled_hashes,
    asked_op=op_ids,
    asked_sha=pooled_hashes,
    granted=st.booleans(),
    expires=st.one_of(st.none(), moments),
    now=moments,
)
def test_a_payload_approval_matches_only_its_operation_and_payload_before_expiry(
    approved_op: str,
    approved_sha: str,
    asked_op: str,
    asked_sha: str,
    granted: bool,
    expires: datetime | None,
    now: datetime,
) -> None:
    approval = Approval(
        approval_id="a",
        operation_id=approved_op,
        payload_sha256=approved_sha,
        granted=granted,
        expires_at=expires,
    )
    matched = approval_matches(approval, asked_op, asked_sha, now)
    expected = (
        granted
        and approved_op == asked_op
        and approved_sha == asked_sha
        and (expires is None or now < expires)
    )
    assert matched == expected


@settings(max_examples=200, deadline=None)
@given(other_sha=hashes, other_op=op_ids, minutes=st.integers(-600, 600))
def test_the_state_query_never_accepts_another_payload_operation_or_an_expired_grant(
    other_sha: str, other_op: str, minutes: int
) -> None:
    assume(other_sha != PUBLISH_SHA and other_op != "op-publish-1")
    log = LogBuilder()
    for event in realistic_log():
        log.add(event.payload, parent_seq=event.parent_seq, actor=event.actor)
    expires = NOW + timedelta(hours=1)
    log.add(
        Approval(
            approval_id="apr-publish",
            operation_id="op-publish-1",
            payload_sha256=PUBLISH_SHA,
            granted=True,
            by="dana",
            expires_at=expires,
        )
    )
    state = fold(log.events)
    now = NOW + timedelta(minutes=minutes)
    assert is_operation_approved(state, "op-publish-1", PUBLISH_SHA, now) == (now < expires)
    assert not is_operation_approved(state, "op-publish-1", other_sha, now)
    assert not is_operation_approved(state, other_op, PUBLISH_SHA, now)
    assert not is_operation_approved(state, other_op, other_sha, now)


def _state_with(*decisions: Approval, request_expiry: datetime | None = None):  # type: ignore[no-untyped-def]
    log = LogBuilder()
    log.add(
        ApprovalRequest(
            approval_id="a1",
            operation_id="op-1",
            tool="deploy",
            payload_sha256="1" * 64,
            summary="deploy",
            expires_at=request_expiry,
        )
    )
    for decision in decisions:
        log.add(decision)
    return fold(log.events)


def test_a_pending_request_is_not_an_approval() -> None:
    state = _state_with()
    assert not is_operation_approved(state, "op-1", "1" * 64, NOW)
    assert approval_state(state, "op-1", "1" * 64, NOW) == ApprovalState.PENDING


def test_a_grant_for_another_payload_leaves_the_requested_payload_unapproved() -> None:
    state = _state_with(
        Approval(approval_id="a1", operation_id="op-1", payload_sha256="2" * 64, granted=True)
    )
    assert not is_operation_approved(state, "op-1", "1" * 64, NOW)
    assert is_operation_approved(state, "op-1", "2" * 64, NOW)


def test_the_request_expiry_bounds_a_grant_without_its_own() -> None:
    state = _state_with(
        Approval(approval_id="a1", operation_id="op-1", payload_sha256="1" * 64, granted=True),
        request_expiry=NOW,
    )
    assert is_operation_approved(state, "op-1", "1" * 64, NOW - timedelta(seconds=1))
    assert not is_operation_approved(state, "op-1", "1" * 64, NOW)
    assert approval_state(state, "op-1", "1" * 64, NOW) == ApprovalState.EXPIRED


def test_a_rejection_after_a_grant_withdraws_it() -> None:
    grant = Approval(approval_id="a1", operation_id="op-1", payload_sha256="1" * 64, granted=True)
    revoke = Approval(approval_id="a2", operation_id="op-1", payload_sha256="1" * 64, granted=False)
    state = _state_with(grant, revoke)
    assert matching_approval(state, "op-1", "1" * 64, NOW) is None
    assert approval_state(state, "op-1", "1" * 64, NOW) == ApprovalState.REJECTED
    assert is_operation_approved(_state_with(revoke, grant), "op-1", "1" * 64, NOW)


def test_a_declared_grant_without_a_request_still_binds_to_its_payload() -> None:
    log = LogBuilder()
    log.add(Approval(approval_id="spec-1", operation_id="op-9", payload_sha256="9" * 64, granted=True))
    state = fold(log.events)
    assert is_operation_approved(state, "op-9", "9" * 64, NOW)
    assert not is_operation_approved(state, "op-9", "8" * 64, NOW)
    assert approval_state(state, "op-1", "1" * 64, NOW) == ApprovalState.NOT_REQUESTED


def test_now_must_be_timezone_aware() -> None:
    approval = Approval(approval_id="a", operation_id="op", payload_sha256="1" * 64, granted=True)
    with pytest.raises(ValueError, match="timezone-aware"):
        approval_matches(approval, "op", "1" * 64, datetime(2026, 1, 1))
