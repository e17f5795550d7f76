"""Tables of event handlers, keyed by the event's model class.

A handler names the events it takes in its annotation: `def on_tool_request(s: SessionState, e:
ToolRequestEvent) -> Updates` handles `ToolRequestEvent`, and `e: NoteEvent | ArtifactEvent` both.
`handler_table` reads those annotations, so a table cannot say one class while its handler expects
another, and mypy checks each handler against the payload it really gets. A caller looks the
handler up by `type(event)` (an envelope is always exactly one class of the union).

A table may be partial (a view that ignores most events) or exhaustive (the fold): `missing`
lists the event classes it has no handler for, so a test can require that it lists none.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from belay.journal.events import Event, EventBase

R = TypeVar("R")  # what the handlers of one table return


def _classes_in(annotation: Any) -> tuple[type[EventBase], ...]:
    """The event classes an annotation names (one class, a union of them, either `Annotated`), or
    () when it names anything else."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    if all(isinstance(member, type) and issubclass(member, EventBase) for member in members):
        return members
    return ()


def event_classes(union: Any) -> tuple[type[EventBase], ...]:
    """The envelope classes of a union of events (`Annotated[A | B, Field(...)]` or `A | B`), in
    the union's order."""
    classes = _classes_in(union)
    if not classes:
        raise TypeError(f"not a union of event classes: {union!r}")
    return classes


# Every class an event can be, read from the union that parses stored events.
EVENT_CLASSES: tuple[type[EventBase], ...] = event_classes(Event)


def handled_classes(handler: Callable[..., Any]) -> tuple[type[EventBase], ...]:
    """The event classes a handler takes: those its one event parameter is annotated with. The
    annotations are resolved in the handler's module, so the names they use are imported there."""
    hints = typing.get_type_hints(handler)
    hints.pop("return", None)
    found = [classes for classes in map(_classes_in, hints.values()) if classes]
    if len(found) != 1:
        raise TypeError(f"{handler.__qualname__} needs exactly one parameter annotated with event classes")
    return found[0]


def handler_table(*handlers: Callable[..., R]) -> dict[type[EventBase], Callable[..., R]]:
    """The handlers keyed by the event classes each takes. Two handlers for one class, or a
    handler of a class outside the union, are errors when the table is built."""
    table: dict[type[EventBase], Callable[..., R]] = {}
    for handler in handlers:
        for cls in handled_classes(handler):
            if cls not in EVENT_CLASSES:
                raise TypeError(f"{handler.__qualname__} handles {cls.__name__}, which is no event class")
            if cls in table:
                raise TypeError(
                    f"{cls.__name__} has two handlers: {table[cls].__qualname__} and {handler.__qualname__}"
                )
            table[cls] = handler
    return table


def missing(
    table: Mapping[type[EventBase], Any], classes: tuple[type[EventBase], ...] = EVENT_CLASSES
) -> tuple[type[EventBase], ...]:
    """The event classes (of `classes`, every class of the union by default) `table` has no
    handler for, in the union's order."""
    return tuple(cls for cls in classes if cls not in table)
