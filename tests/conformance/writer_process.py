"""A writer process for the crash test: appends big batches until it is killed.

    python writer_process.py '<store spec JSON>' <session id> <events per batch> <bytes per event>

Each event's note_id is "<batch>:<index>:<batch size>", so a reader can tell whether every batch it
sees is complete. Before each append it prints "begin <batch>", after it "done <batch> <seconds>".
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores import open_event_store


async def write_until_killed(
    spec: dict[str, object], session_id: str, batch_size: int, text_bytes: int
) -> None:
    store = open_event_store(spec)
    filler = "x" * text_bytes
    batch = 0
    while True:
        drafts = [
            EventDraft(
                payload=Note(note_id=f"{batch}:{index}:{batch_size}", kind=NoteKind.FINDING, text=filler)
            )
            for index in range(batch_size)
        ]
        print(f"begin {batch}", flush=True)
        started = time.perf_counter()
        await store.append(session_id, drafts, idempotency_key=f"crash-batch-{batch}")
        print(f"done {batch} {time.perf_counter() - started:.4f}", flush=True)
        batch += 1


if __name__ == "__main__":
    spec_json, session, size, text = sys.argv[1:5]
    asyncio.run(write_until_killed(json.loads(spec_json), session, int(size), int(text)))
