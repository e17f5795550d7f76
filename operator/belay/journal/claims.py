"""The claims a person's decision is appended under (`EventStore.append(..., claim=...)`): the
store refuses a second decision under a claim already taken, so two people deciding at once record
one decision."""

from __future__ import annotations


def approval_claim(approval_id: str) -> str:
    """Every decision on one approval: a person's approve or reject, a grant declared in the
    manifest or the AgentSession spec."""
    return f"approval/{approval_id}"


def wait_claim(wait_id: str) -> str:
    """The answer to one wait."""
    return f"wait/{wait_id}"


def rejection_claim(name: str, sha256: str) -> str:
    """The rejection of one deliverable's exact bytes."""
    return f"rejection/{name}/{sha256}"


def scope_claim(request_version: int) -> str:
    """Request version N: two people amending at once cannot both record it."""
    return f"scope/{request_version}"


def reconcile_claim(operation_id: str, unknown_seq: int) -> str:
    """The verdict on one unknown outcome of an operation, the one marked at `unknown_seq` (an
    operation reissued after "it did not take effect" can become unknown again)."""
    return f"reconcile/{operation_id}/{unknown_seq}"
