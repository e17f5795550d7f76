"""Handler tables keyed by event class (`belay.journal.dispatch`)."""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Literal

import pytest
from pydantic import Field

from belay.journal.dispatch import EVENT_CLASSES, event_classes, handled_classes, handler_table, missing
from belay.journal.events import (
    ENVELOPE_BY_TYPE,
    EVENT_TYPES,
    ArtifactEvent,
    EventBase,
    NoteEvent,
    Summary,
    ToolRequestEvent,
)


def test_the_event_classes_are_the_union_that_parses_stored_events() -> None:
    assert set(EVENT_CLASSES) == set(ENVELOPE_BY_TYPE.values())
    assert [cls.model_fields["type"].default for cls in EVENT_CLASSES] == list(EVENT_TYPES)


def _on_request(state: int, e: ToolRequestEvent) -> str:
    return f"{state} {e.payload.tool}"


def _on_note_or_artifact(e: NoteEvent | ArtifactEvent) -> str:
    return e.type


def test_a_table_is_keyed_by_the_classes_its_handlers_are_annotated_with() -> None:
    table = handler_table(_on_request, _on_note_or_artifact)
    assert table == {
        ToolRequestEvent: _on_request,
        NoteEvent: _on_note_or_artifact,
        ArtifactEvent: _on_note_or_artifact,
    }
    assert handled_classes(_on_note_or_artifact) == (NoteEvent, ArtifactEvent)
    assert len(missing(table)) == len(EVENT_CLASSES) - 3
    assert ToolRequestEvent not in missing(table)


def test_a_table_refuses_two_handlers_of_one_class_and_a_handler_of_no_event() -> None:
    def _again(e: NoteEvent) -> str:
        return ""

    def _no_event(state: int, name: str) -> str:
        return ""

    def _two_events(a: NoteEvent, b: ArtifactEvent) -> str:
        return ""

    def _not_in_the_union(e: EventBase) -> str:
        return ""

    with pytest.raises(TypeError, match="two handlers"):
        handler_table(_on_note_or_artifact, _again)
    for handler in (_no_event, _two_events):
        with pytest.raises(TypeError, match="exactly one parameter"):
            handler_table(handler)
    with pytest.raises(TypeError, match="no event class"):
        handler_table(_not_in_the_union)


def test_a_new_member_of_the_union_is_listed_as_missing_from_a_table_that_handled_every_other() -> None:
    class FutureEvent(EventBase):
        type: Literal["future"] = "future"
        payload: Summary

    everything = {cls: _on_request for cls in EVENT_CLASSES}
    assert missing(everything) == ()
    # The union as events.py would write it with one more member.
    extended = Annotated[
        functools.reduce(operator.or_, (*EVENT_CLASSES, FutureEvent)), Field(discriminator="type")
    ]
    assert event_classes(extended) == (*EVENT_CLASSES, FutureEvent)
    assert missing(everything, event_classes(extended)) == (FutureEvent,)
