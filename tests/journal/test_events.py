"""The stored form of an event: the JSON every backend stores, assembled around each draft's part."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from belay.journal.envelope import EnvelopeJson
from belay.journal.events import (
    Actor,
    EventDraft,
    Note,
    NoteKind,
    Payload,
    build_event,
    event_from_json,
)
from tests.journal.strategies import payloads


@settings(max_examples=300, deadline=None)
@given(
    session_id=st.text(min_size=1),
    key=st.none() | st.text(),
    parent_seq=st.none() | st.integers(1, 10**12),
    payload=payloads | st.builds(Note, note_id=st.just("n"), kind=st.just(NoteKind.DECISION), text=st.text()),
    actor=st.builds(
        Actor,
        attempt=st.integers(0, 1000),
        harness_version=st.text(),
        model_id=st.none() | st.text(),
        subagent=st.none() | st.text(),
    ),
    seq=st.integers(1, 10**12),
    created_at=st.datetimes(timezones=st.just(UTC)),
)
def test_the_stored_json_parses_back_to_the_event_returned(
    session_id: str,
    key: str | None,
    parent_seq: int | None,
    payload: Payload,
    actor: Actor,
    seq: int,
    created_at: datetime,
) -> None:
    draft = EventDraft(payload=payload, parent_seq=parent_seq, actor=actor)
    stored = EnvelopeJson(session_id, created_at, key).around(draft, seq)
    expected = build_event(draft, seq=seq, session_id=session_id, created_at=created_at, idempotency_key=key)
    assert event_from_json(stored) == expected


def test_the_payload_size_is_the_size_of_its_utf8_json() -> None:
    draft = EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="é" * 10))
    assert draft.payload_size == len(draft.payload.model_dump_json().encode())
    assert draft.payload_size > len(draft.payload.model_dump_json())


def test_a_changed_copy_of_a_draft_is_stored_with_its_own_fields() -> None:
    draft = EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="first"))
    changed = draft.model_copy(
        update={"payload": Note(note_id="n", kind=NoteKind.FINDING, text="second"), "parent_seq": 4}
    )
    at = datetime(2026, 1, 1, tzinfo=UTC)
    stored = event_from_json(EnvelopeJson("s", at, None).around(changed, 5))
    assert stored.payload == Note(note_id="n", kind=NoteKind.FINDING, text="second")
    assert stored.parent_seq == 4
    assert changed.payload_size == len(changed.payload.model_dump_json().encode())
