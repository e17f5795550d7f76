"""A writer process: appends batches of notes, until killed or until it has written `batches`.

    python writer_process.py '<store spec JSON>' <session id> <events per batch> <bytes per event> \
        [<batches, 0 = until killed>] [<writer label>] [relaxed]

With `relaxed`, every append is made with `durable=False`.

Each event's note_id is "<label>:<batch>:<index>:<batch size>", so a reader can tell which writer
wrote it and whether every batch it sees is complete. Before each append it prints
"begin <batch>", after it "done <batch> <seconds>".
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores import open_event_store


async def write_batches(
    spec: dict[str, object],
    session_id: str,
    batch_size: int,
    text_bytes: int,
    batches: int,
    label: str,
    durable: bool = True,
) -> None:
    store = open_event_store(spec)
    filler = "x" * text_bytes
    try:
        for batch in range(batches) if batches else itertools.count():
            drafts = [
                EventDraft(
                    payload=Note(
                        note_id=f"{label}:{batch}:{index}:{batch_size}", kind=NoteKind.FINDING, text=filler
                    )
                )
                for index in range(batch_size)
            ]
            print(f"begin {batch}", flush=True)
            started = time.perf_counter()
            await store.append(session_id, drafts, idempotency_key=f"{label}-batch-{batch}", durable=durable)
            print(f"done {batch} {time.perf_counter() - started:.4f}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    spec_json, session, size, text = sys.argv[1:5]
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    writer_label = sys.argv[6] if len(sys.argv) > 6 else "w"
    relaxed = sys.argv[7:8] == ["relaxed"]
    asyncio.run(
        write_batches(json.loads(spec_json), session, int(size), int(text), count, writer_label, not relaxed)
    )
