"""`resume` of a session that has nothing left to do: said in one line, and no attempt starts (a
new attempt would only end again and print the whole page, as if it had done something)."""

from __future__ import annotations

from belay.journal import commands
from belay.journal.phase import Phase, phase_of
from belay.journal.state import SessionState


def nothing_to_resume(state: SessionState) -> str | None:
    """The line to print instead of resuming, or None when a resume has work: the record alone
    says the session succeeded (an amend or a rejection since its end reopens it, and then it is
    not Succeeded)."""
    if phase_of(state) != Phase.SUCCEEDED:
        return None
    session = state.session_id
    return (
        f"nothing to resume: session {session} succeeded (attempt {state.lifecycle.attempt}); "
        f"`{commands.brief(session)}` shows what it delivered; to ask for more, "
        f"`{commands.amend(session)}` or `{commands.reject(session, 'DELIVERABLE')}`"
    )
