"""The drill's handover (`belay drill --executor A --handover-to B`): every scenario that
interrupts runs on executor A and is resumed on executor B, as a person moves a session, with
`belay resume SESSION --executor B [--model M]`. Beside each scenario's usual checks, the resumed
record is judged on what a handover must keep:

- the move is recorded once, from A to B, at the record's last event before the resume;
- no verified step redone across the handover: no checkpoint or step verified before the kill is
  verified again after it (B starts from the record, not from A's memory);
- no approval widened: each grant names the payload sha256 of the request it answers, and each
  operation dispatched after the handover ran under a grant of its own payload's hash;
- where A was managed, no remote session from before the move is used after it; where B is,
  its stand-in saw each input and each tool result of the new remote sessions once.

Pure functions of the record judge; `handover_checks` records them on the drill."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from belay.api.agentsession import MANAGED_EXECUTORS
from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequestEvent,
    CheckpointEvent,
    Event,
    ExecutorChangeEvent,
    RemoteEvent,
    RemoteKind,
    TaskEvent,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.local.drill.manifest import recorded_type
from belay.local.standin_process import provider_problems, provider_summary

if TYPE_CHECKING:
    from pathlib import Path

    from belay.local.drill.run import Drill

MOVED = "the move from {a} to {b} is recorded once, at the kill"
NOT_REDONE = "no verified step redone across the handover"
NOT_WIDENED = "no approval widened"
OLD_REMOTE_UNUSED = "no remote session from before the handover is used after it"
NEW_PROVIDER_ONCE = "the new executor's provider saw each input and each tool result once"
# What uses a remote session (a `failed` or closing note about an old one does not).
USING = (RemoteKind.SESSION, RemoteKind.CALL, RemoteKind.RESULT_DELIVERED)


def verified_again(before: Sequence[Event], after: Sequence[Event]) -> tuple[int, list[str]]:
    """How many checkpoints and steps the record held verified at the kill, and those of them
    verified more than once in the whole record after the resume."""
    checkpoints = {
        e.payload.checkpoint_id for e in before if isinstance(e, CheckpointEvent) and e.payload.verified
    }
    steps = {e.payload.task_id for e in before if isinstance(e, TaskEvent) and e.payload.status == "verified"}
    again = [
        f"checkpoint {c} verified {n} times"
        for c in sorted(checkpoints)
        if (
            n := sum(
                isinstance(e, CheckpointEvent) and e.payload.verified and e.payload.checkpoint_id == c
                for e in after
            )
        )
        > 1
    ] + [
        f"step {s} verified {n} times"
        for s in sorted(steps)
        if (
            n := sum(
                isinstance(e, TaskEvent) and e.payload.status == "verified" and e.payload.task_id == s
                for e in after
            )
        )
        > 1
    ]
    return len(checkpoints) + len(steps), again


def widened_approvals(events: Sequence[Event], since_seq: int) -> tuple[list[str], list[str]]:
    """(what was checked, what widened): each grant against the request it answers; each operation
    dispatched after `since_seq` against the last grant recorded for it before its result."""
    requests = {e.payload.approval_id: e.payload for e in events if isinstance(e, ApprovalRequestEvent)}
    grants = [e for e in events if isinstance(e, ApprovalEvent) and e.payload.granted]
    widened = []
    for grant in grants:
        asked = requests.get(grant.payload.approval_id)
        if asked is None:
            widened.append(f"{grant.payload.approval_id} granted at seq {grant.seq} with no request")
        elif (asked.operation_id, asked.payload_sha256) != (
            grant.payload.operation_id,
            grant.payload.payload_sha256,
        ):
            widened.append(
                f"{grant.payload.approval_id} granted for {grant.payload.operation_id} sha256 "
                f"{grant.payload.payload_sha256[:12]}, asked for {asked.operation_id} sha256 "
                f"{asked.payload_sha256[:12]}"
            )
    proposed = {e.payload.operation_id: e for e in events if isinstance(e, ToolRequestEvent)}
    covered = []
    for result in (e for e in events if isinstance(e, ToolResultEvent) and e.seq > since_seq):
        operation = result.payload.operation_id
        under = [g for g in grants if g.payload.operation_id == operation and g.seq < result.seq]
        request = proposed.get(operation)
        if not under or request is None:
            continue
        covered.append(operation)
        if under[-1].payload.payload_sha256 != request.payload.payload_sha256:
            widened.append(
                f"{operation} dispatched at seq {result.seq} with payload sha256 "
                f"{request.payload.payload_sha256[:12]} "
                f"under {under[-1].payload.approval_id} (sha256 {under[-1].payload.payload_sha256[:12]})"
            )
    checked = [f"{len(grants)} grants, each against its request"]
    checked.append(
        f"dispatched after the handover under an approval: {', '.join(covered)}, each under its own "
        "payload's hash"
        if covered
        else "no operation dispatched after the handover needed an approval"
    )
    return checked, widened


def handover_checks(drill: Drill, before: Sequence[Event], after: Sequence[Event]) -> bool:
    """The checks every handover scenario ends with, on the record after the resume on B."""
    source, target = drill.executor, drill.handover_to or drill.executor
    killed_at = before[-1].seq if before else 0
    changes = [e for e in after if isinstance(e, ExecutorChangeEvent)]
    moves = [(c.payload.from_type, c.payload.to_type, c.payload.at_seq) for c in changes]
    moved = drill.check(
        MOVED.format(a=source, b=target),
        moves == [(recorded_type(source), recorded_type(target), killed_at)],
        "; ".join(
            f"seq {c.seq}: {c.payload.from_type} -> {c.payload.to_type} at seq {c.payload.at_seq}"
            for c in changes
        )
        or "no executor_change event",
    )
    count, again = verified_again(before, after)
    not_redone = drill.check(
        NOT_REDONE,
        not again,
        "; ".join(again)
        or f"{count} checkpoints and steps verified before the kill (seq {killed_at}), none again",
    )
    since = changes[0].seq if changes else killed_at
    checked, widened = widened_approvals(after, since)
    not_widened = drill.check(NOT_WIDENED, not widened, "; ".join(widened) or "; ".join(checked))
    return moved and not_redone and not_widened


def handover_provider_checks(
    drill: Drill, home: Path, before: Sequence[Event], after: Sequence[Event]
) -> bool:
    """In place of "the same remote session before and after": A's remote sessions are left
    behind, and B's provider saw what it was given once."""
    passed = True
    changes = [e.seq for e in after if isinstance(e, ExecutorChangeEvent)]
    moved_at = changes[0] if changes else (before[-1].seq if before else 0)
    if drill.executor in MANAGED_EXECUTORS:
        held = {
            e.payload.remote_session_id
            for e in before
            if isinstance(e, RemoteEvent) and e.payload.remote_session_id
        }
        reused = sorted(
            {
                str(e.payload.remote_session_id)
                for e in after
                if isinstance(e, RemoteEvent)
                and e.seq > moved_at
                and e.payload.kind in USING
                and e.payload.remote_session_id in held
            }
        )
        passed = drill.check(
            OLD_REMOTE_UNUSED,
            not reused,
            f"used again: {', '.join(reused)}"
            if reused
            else f"left behind: {', '.join(sorted(map(str, held)))}",
        )
    if drill.handover_to in MANAGED_EXECUTORS:
        new = {
            e.payload.subagent
            for e in after
            if isinstance(e, RemoteEvent) and e.seq > moved_at and e.payload.kind == "session"
        }
        stats = drill.target_standins[home].stats()
        problems = provider_problems(stats, len(new))
        passed = (
            drill.check(NEW_PROVIDER_ONCE, not problems, "; ".join(problems) or provider_summary(stats))
            and passed
        )
    return passed
