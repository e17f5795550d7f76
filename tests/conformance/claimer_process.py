"""A decider process: tries to take claims "approval/0" .. "approval/<count - 1>" in order, one
append each, and prints one line per claim: "won <i> <seq>" or "lost <i> <seq of the winner>".

    python claimer_process.py '<store spec JSON>' <session id> <label> <count>

It waits for a line on stdin before it starts, so that several deciders start together.
"""

from __future__ import annotations

import asyncio
import json
import sys

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores import open_event_store
from belay.stores.base import ClaimTaken


async def decide_all(spec: dict[str, object], session_id: str, label: str, count: int) -> None:
    store = open_event_store(spec)
    try:
        await store.last_seq(session_id)  # connected before the start signal
        sys.stdin.readline()
        for index in range(count):
            draft = EventDraft(payload=Note(note_id=f"{label}:{index}", kind=NoteKind.DECISION, text=label))
            try:
                [event] = await store.append(session_id, [draft], claim=f"approval/{index}")
            except ClaimTaken as taken:
                print(f"lost {index} {taken.seq}", flush=True)
            else:
                print(f"won {index} {event.seq}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    spec_json, session, decider, claims = sys.argv[1:5]
    asyncio.run(decide_all(json.loads(spec_json), session, decider, int(claims)))
