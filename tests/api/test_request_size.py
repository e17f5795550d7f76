"""The largest request the manifest allows still fits the one event it is recorded as: a goal or
parts that pass validation can never fail the first append (and every resume after it)."""

from __future__ import annotations

from belay.api.agentsession import GOAL_MAX_CHARS, PART_MAX_CHARS, PARTS_MAX, parse_manifest
from belay.journal.events import EventDraft, UserInput
from belay.stores.base import MAX_PAYLOAD_BYTES
from tests.api.invalid_manifests import changed


def test_the_largest_request_fits_one_event_even_when_every_character_is_escaped() -> None:
    # A control character takes the most JSON bytes of any character: \u00XX.
    worst = "\x01"
    parts = {f"{'p' * 61}{i:02d}": worst * PART_MAX_CHARS for i in range(PARTS_MAX)}
    session = parse_manifest(
        changed("largest", **{"spec.request": {"goal": worst * GOAL_MAX_CHARS, "parts": parts}})
    )
    request = session.spec.request
    draft = EventDraft(payload=UserInput(goal=request.goal, parts=dict(request.parts)))
    assert draft.payload_size <= MAX_PAYLOAD_BYTES
    assert draft.payload_size > MAX_PAYLOAD_BYTES * 0.9  # the bounds are not needlessly tight
