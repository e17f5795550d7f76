"""A subagent's turn that ended without the deliverable it owes (`belay.journal.turns`): recorded as
a wait on a person, then the answer awaited and handed to its executor.

The turn's end is recorded in one append: what the executor took in to reach it, the model's last
words, the wait (its reason names the commands that answer it) and the subagent's task blocked, not
done. The subagent's loop then waits, as it waits for an approval, until the wait is answered:

- by a person's message (`belay message`): the executor is told it (`Executor.tell`, under a key
  derived from the message's seq) and the subagent goes on;
- by an amend of the request: the harness answers the wait itself (under the wait's claim, so a
  message and an amend at once record one answer) and tells the executor what changed;
- by a no (`belay reject` of the wait): the session ends without the deliverable
  (`EndedWithoutDeliverable`).

A new attempt that finds the subagent blocked does the same from the record: it waits for the
answer, or tells the executor an answer the record holds (again, under the same key).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from belay.api.agentsession import SubagentSpec
from belay.harness.attempt import Attempt
from belay.harness.executor import Executor, ExecutorFailed
from belay.journal import commands
from belay.journal.claims import wait_claim
from belay.journal.decisions import resolved_wait
from belay.journal.events import ModelOutput, Payload, Task, TaskStatus, Wait, WaitKind
from belay.journal.state import SessionState, WaitRecord
from belay.journal.turns import last_turn_end, turn_end_reason, turn_end_wait_id
from belay.stores.base import ClaimTaken

ENDED_WITHOUT_DELIVERABLE = "EndedWithoutDeliverable"


def owed(state: SessionState, sub: SubagentSpec) -> str | None:
    """The subagent's declared deliverable while it is not published."""
    return sub.deliverable if sub.deliverable and sub.deliverable not in state.deliverables else None


async def record_turn_end(
    attempt: Attempt, sub: SubagentSpec, taken: Sequence[Payload], said: ModelOutput, deliverable: str
) -> None:
    """The turn's end as a wait on a person, the subagent's task blocked: one append."""
    state = await attempt.known_state()
    wait_id = turn_end_wait_id(state, sub.name)
    style = commands.in_cluster if attempt.holder.startswith("pod:") else commands.local
    reason = turn_end_reason(attempt.session.metadata.name, sub.name, deliverable, said.text, wait_id, style)
    await attempt.record(
        [
            *taken,
            said,
            Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason, owed=deliverable),
            Task(
                task_id=sub.name,
                status=TaskStatus.BLOCKED,
                owner=sub.name,
                detail=f"ended its turn without {deliverable}; waits on you ({wait_id})",
            ),
        ],
        subagent=sub.name,
    )


async def go_on_when_answered(attempt: Attempt, sub: SubagentSpec, executor: Executor, poll_s: float) -> None:
    """Wait for the answer to the subagent's turn's end, hand it to the executor and unblock the
    subagent; raise `ExecutorFailed` when the answer ends the session."""
    state = await attempt.state()
    wait = last_turn_end(state, sub.name)
    if wait is None:  # blocked by nothing this module opened: go on
        await unblock(attempt, sub, "goes on")
        return
    while not wait.resolved:
        if state.request.seq > wait.opened_seq:
            await answer_with_amend(attempt, state, wait)
        else:
            await asyncio.sleep(poll_s)
        state = await attempt.state()
        wait = state.waits[wait.wait_id]
    message = state.user_messages.get(wait.wait_id)
    if message is not None:
        await executor.tell(message.text, message.seq)
        await unblock(attempt, sub, f"goes on after the message of {message.by or 'a person'}")
        return
    if state.request.seq > wait.opened_seq:
        await executor.tell(change_text(state), state.request.seq)
        await unblock(attempt, sub, f"goes on with request v{state.request.version}")
        return
    raise ExecutorFailed(
        ENDED_WITHOUT_DELIVERABLE,
        f"{sub.name} ended its turn without {wait.owed}, and the session was ended there: {wait.reason}",
    )


async def answer_with_amend(attempt: Attempt, state: SessionState, wait: WaitRecord) -> None:
    """The request changed while the wait was open: that is its answer (unless a person's message
    took the wait's claim first)."""
    answered = resolved_wait(wait, f"the request changed (v{state.request.version})")
    with contextlib.suppress(ClaimTaken):  # answered by a message first: read on the next look
        await attempt.record([answered], claim=wait_claim(wait.wait_id))


def change_text(state: SessionState) -> str:
    """What the executor is told of the request's change: the new request, and what changed."""
    change = state.last_scope_change()
    lines = [f"The request changed (version {state.request.version}): {change.summary if change else ''}"]
    lines.append(f"Goal: {state.request.goal}")
    lines += [f"- {name}: {text}" for name, text in sorted(state.request.parts.items())]
    lines.append("Go on with the request as it stands now.")
    return "\n".join(lines)


async def unblock(attempt: Attempt, sub: SubagentSpec, detail: str) -> None:
    await attempt.record(
        [Task(task_id=sub.name, status=TaskStatus.RUNNING, owner=sub.name, detail=detail)], subagent=sub.name
    )
