"""The stored JSON of events: what every event store writes for a batch, assembled around each
draft's serialized part (`belay.journal.events.EventDraft.stored_tail`)."""

from __future__ import annotations

import functools
import json
from datetime import datetime

from belay.journal.events import DATETIME_JSON, EventDraft

# A session's id is serialized once: appends to one session repeat it, and a cache hit is one
# lookup where json.dumps is several Python calls.
_session_json = functools.lru_cache(maxsize=4096)(json.dumps)


class EnvelopeJson:
    """The stored JSON of a batch's events, assembled around each draft's serialized part.

    Serializing each whole envelope was the largest single cost of an append. The fields a store
    assigns to a batch are serialized once here (the timestamp by pydantic), the rest was serialized
    when the draft was made, so the text parses back to exactly the event `build_event` returns
    (the conformance suite compares them). Every backend stores this text, after the chain field
    the store puts in front (`belay.stores.integrity.Chain.stored`): `fields` is the text after
    the opening brace, the part the chain hashes.
    """

    def __init__(self, session_id: str, created_at: datetime, idempotency_key: str | None) -> None:
        key_json = "null" if idempotency_key is None else json.dumps(idempotency_key)
        self._assigned = (
            f'"session_id":{_session_json(session_id)},'
            f'"created_at":{DATETIME_JSON.dump_json(created_at).decode()},'
            f'"idempotency_key":{key_json},'
        )

    def around(self, draft: EventDraft, seq: int) -> str:
        """The envelope without its chain field."""
        return f'{{"seq":{seq},{self._assigned}{draft.stored_tail}'

    def fields(self, draft: EventDraft, seq: int) -> bytes:
        """The envelope's text after its opening brace, as stored bytes."""
        return f'"seq":{seq},{self._assigned}{draft.stored_tail}'.encode()
