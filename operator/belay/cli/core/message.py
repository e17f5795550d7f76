"""`message`: which subagent a person's message goes to, or why it goes nowhere.

A message answers a subagent whose turn ended without its deliverable (`belay.journal.turns`): it
is its next user turn (on a managed executor, a user message to its remote session). Both command
lines read the open waits (`OpenItems`): locally from the folded record, in a cluster from the
AgentSession's status; the local one records the message (`belay.journal.decisions.message_write`),
`kubectl belay` writes it into `spec.decisions` as the answer to the wait, which the operator
records the same way.
"""

from __future__ import annotations

from belay.cli.core.decide import OpenItems, OpenWait
from belay.cli.core.errors import CommandError
from belay.journal import commands


def to_message(items: OpenItems, to: str | None) -> OpenWait:
    """The wait `message SESSION TEXT [--to SUBAGENT]` answers: the turn's end of the subagent
    named, or of the only subagent that waits for a message."""
    ended = [w for w in items.waits if w.owed]
    if not ended:
        raise CommandError(
            f"no subagent of {items.session} ended its turn without its deliverable: nothing waits for a "
            f"message (`{items.style(commands.brief(items.session))}` shows what the session waits on)"
        )
    named = [w for w in ended if to is None or w.subagent == to]
    waiting = ", ".join(sorted(str(w.subagent) for w in ended))
    if not named:
        raise CommandError(f"{to} does not wait for a message in {items.session} (waiting: {waiting})")
    if len(named) > 1:
        raise CommandError(
            f"several subagents wait for a message in {items.session} ({waiting}): name one with --to"
        )
    return named[0]
