"""A model-based test: random interleavings of appends, idempotent retries, key conflicts, lease
changes and fenced appends give exactly what a plain in-memory reference log predicts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from belay.journal.events import EventDraft, Note, NoteKind
from belay.stores.base import EventStore, IdempotencyConflict, StaleLease
from tests.conformance.backends import EventBackend

# One step of a writer's life. Integers pick a batch size or an earlier key; the model decides
# what the store must answer.
operation = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("append_keyed"), st.integers(1, 4)),
    st.tuples(st.just("retry"), st.integers(0, 1000)),
    st.tuples(st.just("conflict"), st.integers(0, 1000)),
    st.tuples(st.just("acquire_lease"), st.just(0)),
    st.tuples(st.just("fenced_append"), st.integers(1, 3)),
    st.tuples(st.just("stale_append"), st.integers(1, 3)),
)


@dataclass
class ReferenceLog:
    note_ids: list[str] = field(default_factory=list)
    batches_by_key: dict[str, tuple[list[str], list[int]]] = field(default_factory=dict)
    lease: int = 0


def drafts(ids: list[str]) -> list[EventDraft]:
    return [EventDraft(payload=Note(note_id=i, kind=NoteKind.FINDING, text="")) for i in ids]


async def check_append(
    store: EventStore, model: ReferenceLog, session: str, ids: list[str], key: str | None, lease: int | None
) -> None:
    events = await store.append(session, drafts(ids), idempotency_key=key, lease=lease)
    first = len(model.note_ids) + 1
    assert [e.seq for e in events] == list(range(first, first + len(ids)))
    model.note_ids.extend(ids)
    if key is not None:
        model.batches_by_key[key] = (ids, [e.seq for e in events])


_counter = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # each example uses a fresh session
)
@given(operations=st.lists(operation, min_size=1, max_size=14))
async def test_the_store_behaves_like_a_reference_log(
    event_backend: EventBackend, event_store: EventStore, operations: list[tuple[str, int]]
) -> None:
    session = event_backend.session(f"model-{next(_counter)}")
    model = ReferenceLog()
    for step, (kind, number) in enumerate(operations):
        ids = [f"{step}-{i}" for i in range(number)] if kind != "retry" and kind != "conflict" else []
        keys = sorted(model.batches_by_key)
        if kind == "append":
            await check_append(event_store, model, session, ids, None, None)
        elif kind == "append_keyed":
            await check_append(event_store, model, session, ids, f"key-{step}", None)
        elif kind == "retry" and keys:
            key = keys[number % len(keys)]
            original_ids, original_seqs = model.batches_by_key[key]
            replayed = await event_store.append(session, drafts(original_ids), idempotency_key=key)
            assert [e.seq for e in replayed] == original_seqs
        elif kind == "conflict" and keys:
            key = keys[number % len(keys)]
            try:
                await event_store.append(session, drafts([f"{step}-other"]), idempotency_key=key)
            except IdempotencyConflict:
                pass
            else:
                raise AssertionError(f"reusing {key} for another batch was accepted")
        elif kind == "acquire_lease":
            lease = await event_store.acquire_lease(session, f"attempt-{step}")
            model.lease += 1
            assert lease.number == model.lease
        elif kind == "fenced_append" and model.lease:
            await check_append(event_store, model, session, ids, None, model.lease)
        elif kind == "stale_append":
            try:
                await event_store.append(session, drafts(ids), lease=model.lease - 1)
            except StaleLease:
                pass
            else:
                raise AssertionError(f"lease {model.lease - 1} was accepted under lease {model.lease}")
        assert await event_store.last_seq(session) == len(model.note_ids)
    stored = await event_store.read(session)
    assert [e.seq for e in stored] == list(range(1, len(model.note_ids) + 1))
    assert [e.payload.note_id for e in stored if isinstance(e.payload, Note)] == model.note_ids
