"""Whose record it is. A session's record is keyed by its namespace and name
(`belay.controller.names.record_id`) and bound to the AgentSession it was written for, by uid: the
operator writes nothing to, and deletes nothing of, a record bound to another uid (a session deleted
with its record retained, then created again under the same name), unless the new session's spec
says to adopt it (`spec.adoptRecord`).

A record is bound by the operator's writes that start or take it up, whose idempotency keys (kept
in every event's envelope) carry the uid; the latest of them names the owner:

- `request/<uid>/<generation>`: the request the operator records before the first attempt;
- `fork/<uid>`: a fork's copy of its source's history;
- `moved/<uid>`: a record moved from its bare-name key (below);
- `adopted/<uid>`: a record taken up with `spec.adoptRecord` (a decision note says by whom).

Records written before they were keyed by namespace sit under the session's bare name. The first
pass of a session moves such a record to its own key, once, when the record is bound to the
session's uid or to none (it predates the binding: the session it was written for cannot be told,
and it was that name's record), or when the spec says to adopt it; a record bound to another uid
stays where it is (docs/operator.md#whose-record-it-is).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from belay.controller.desired import SessionRef
from belay.controller.names import FIELD_MANAGER, record_id
from belay.controller.record import OPERATOR, RecordWrite
from belay.journal.events import Event, EventDraft, Note, NoteKind
from belay.stores.base import EventStore

log = logging.getLogger("belay.operator")

BINDING_WRITES = ("request", "fork", "moved", "adopted")


def record_of(ref: SessionRef) -> str:
    return record_id(ref.namespace, ref.name)


def record_of_body(body: dict[str, Any]) -> str:
    return record_id(body["metadata"]["namespace"], body["metadata"]["name"])


def bound_uid(event: Event) -> str | None:
    """The uid an event's write binds its record to, if it is one of the binding writes."""
    parts = (event.idempotency_key or "").split("/")
    if parts[0] == "request":
        # `belay run` keys its request by the session's name alone (`request/<name>`).
        return parts[1] if len(parts) == 3 and event.actor.kind == "operator" and parts[1] else None
    if parts[0] in BINDING_WRITES and len(parts) == 2 and parts[1]:
        return parts[1]
    return None


def owner_after(events: Iterable[Event], owner: str | None = None) -> str | None:
    """The uid the record belongs to after `events`, given who it belonged to before them."""
    for event in events:
        owner = bound_uid(event) or owner
    return owner


def belongs_to(owner: str | None, uid: str, last_seq: int) -> bool:
    """Whether the record is the session's own: bound to its uid, or empty (its to start). A
    record with events but bound to nobody was written by someone else."""
    return owner == uid or (owner is None and last_seq == 0)


def refusal(record: str, owner: str | None, uid: str) -> str:
    whose = f"AgentSession uid {owner}" if owner else "no AgentSession (it names no uid)"
    return (
        f"the record {record} was written for {whose}, not for this one (uid {uid}); nothing was "
        "recorded or deleted: set spec.adoptRecord: true to take it up, or use another name"
    )


def adoption_write(uid: str, record: str, owner: str | None) -> RecordWrite:
    """The record taken up by the session `uid`: a decision note, under the key that binds it."""
    before = f"uid {owner}" if owner else "no uid"
    note = Note(
        note_id=f"adopted/{uid}",
        kind=NoteKind.DECISION,
        status="accepted",
        text=f"record {record}, written for {before}, adopted by AgentSession uid {uid} (spec.adoptRecord)",
    )
    return RecordWrite(f"adopted/{uid}", (EventDraft(payload=note, actor=OPERATOR),))


def move_write(uid: str, events: Sequence[Event]) -> RecordWrite:
    """A whole record, for its new key: one batch, the same seqs, the same payloads and actors,
    bound to `uid`. Its times are those of the move, and its hash chain is made anew (the source's
    was checked on the read)."""
    drafts = tuple(EventDraft(payload=e.payload, parent_seq=e.parent_seq, actor=e.actor) for e in events)
    return RecordWrite(f"moved/{uid}", drafts)


async def move_legacy_record(store: EventStore, name: str, record: str, uid: str, adopt: bool) -> bool:
    """Move the record under the session's bare name to `record`, once, when it is the session's
    (bound to `uid`, or to no uid) or `adopt` says to take it. The old key's lease is taken first,
    so a harness still writing there is fenced, and carried to the new key (an attempt's number is
    its lease's).
    A move cut short is finished on the next call. False when a record is left under the bare name
    because it is not the session's."""
    if await store.last_seq(name) == 0:
        return True
    owner = owner_after(await store.read(name))
    if owner not in (None, uid) and not adopt:
        log.info("record %s (uid %s) is not %s's: left where it is", name, owner, record)
        return False
    first = await store.read(record, 1, 1)
    if first and first[0].idempotency_key != f"moved/{uid}":
        log.info("%s has a record of its own: the record under %s is left where it is", record, name)
        return True
    if not first:
        fenced = await store.acquire_lease(name, holder=FIELD_MANAGER)
        write = move_write(uid, await store.read(name))  # read again: nothing is appended past the fence
        await store.append(record, list(write.drafts), idempotency_key=write.idempotency_key)
        lease = await store.current_lease(record)
        while lease is None or lease.number < fenced.number:
            lease = await store.acquire_lease(record, holder=FIELD_MANAGER)
        log.info("moved the record %s to %s (%s events)", name, record, len(write.drafts))
    await store.delete_session(name)
    return True
