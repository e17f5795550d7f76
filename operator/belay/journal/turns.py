"""A subagent whose turn ended without the deliverable it owes: the wait it opens on a person.

A model that ends its turn (a self-hosted model answering without a call, a managed agent whose
remote session goes idle with its turn completed) while the subagent's declared deliverable is not
published has not done its part: its task is not done, and nothing is interrupted either. The
harness records the turn's end as a wait on a person (`Wait.owed` names the deliverable) and the
subagent's task as blocked. A person answers it with a message (`belay message`: the subagent's
next user turn), an amend of the request (its next turn goes on with the new request), or a no
(`belay reject` of the wait: the session ends without the deliverable).

The wait's id says where the subagent's work stood, `turn-ended-<the operation id its next call
would get>` (`belay.journal.operations`), so it names the same place on every executor; a second
end at the same place adds `-2`, `-3`.
"""

from __future__ import annotations

import re

from belay.journal import commands
from belay.journal.commands import CommandStyle
from belay.journal.operations import ProposedCall, operation_ids
from belay.journal.state import SessionState, UserMessageRecord, WaitRecord

TURN_ENDED_PREFIX = "turn-ended-"
SAID_CHARS = 240  # of the agent's last words, quoted in the wait's reason
# Where the commands begin in a turn's end's reason (the agent's words come before them).
_COMMANDS = re.compile(r"; `(?:kubectl )?belay message ")


def turn_end_wait_id(state: SessionState, subagent: str) -> str:
    """The id of the wait a turn's end opens now: where the subagent's next call would stand."""
    [(next_call, _)] = operation_ids(state, subagent, [ProposedCall("", {})])
    base = f"{TURN_ENDED_PREFIX}{next_call}"
    wait_id, again = base, 1
    while wait_id in state.waits:
        again += 1
        wait_id = f"{base}-{again}"
    return wait_id


def ended_at(state: SessionState, operation_id: str) -> bool:
    """Whether a turn ended where the call `operation_id` was next (a scripted plan's end of a
    turn before that call, done once)."""
    return f"{TURN_ENDED_PREFIX}{operation_id}" in state.waits


def turn_end_reason(
    session_id: str, subagent: str, owed: str, said: str, wait_id: str, style: CommandStyle = commands.local
) -> str:
    """Why the session waits on the person, with what each answer does, each command spelled for
    where the session runs."""
    words = " ".join(said.split())
    if len(words) > SAID_CHARS:
        words = words[:SAID_CHARS] + "..."
    quoted = f' (it said: "{words}")' if words else ""
    return (
        f"{subagent} ended its turn without {owed}, which it owes{quoted}; "
        f"`{style(commands.message(session_id))}` gives it your next message, "
        f"`{style(commands.amend(session_id))}` changes the request, "
        f"`{style(commands.reject(session_id, wait_id))}` ends the session without {owed}"
    )


def open_turn_end(state: SessionState, subagent: str) -> WaitRecord | None:
    """The wait the subagent's latest turn's end opened, while it is open."""
    wait_id = state.turn_ends.get(subagent)
    return state.waits.get(wait_id) if wait_id is not None and wait_id in state.open_waits else None


def last_turn_end(state: SessionState, subagent: str) -> WaitRecord | None:
    """The wait the subagent's latest turn's end opened, open or answered."""
    wait_id = state.turn_ends.get(subagent)
    return state.waits.get(wait_id) if wait_id is not None else None


def open_turn_ends(state: SessionState) -> list[WaitRecord]:
    """Every subagent's turn's end that waits on a person, in the order they opened."""
    return [w for w in state.open_wait_records() if w.owed]


def message_of(state: SessionState, wait: WaitRecord) -> UserMessageRecord | None:
    return state.user_messages.get(wait.wait_id)


def message_command(state: SessionState, wait: WaitRecord, style: CommandStyle = commands.local) -> str:
    """`belay message`, naming the subagent when more than one waits for a message."""
    several = len(open_turn_ends(state)) > 1
    return style(commands.message(state.session_id, wait.subagent if several else None))


def turn_end_summary(reason: str) -> str:
    """A turn's end's reason without the commands it names (a view names them itself)."""
    found = list(_COMMANDS.finditer(reason))
    return reason[: found[-1].start()] if found else reason
