"""How handlers build the records they change: without a second validation, since every value
comes from an event that was validated when it was parsed (this is the hot path of `apply`)."""

from __future__ import annotations

from typing import Any, TypeVar

from immutables import Map
from pydantic import BaseModel

from belay.journal.state.records import RECENT_LIMIT, DecisionRecord, SubagentRecord, operation_ordinal
from belay.journal.state.session import SessionState

# The fields of SessionState a handler changes, by name.
Updates = dict[str, Any]


def push_recent(items: tuple[str, ...], item: str) -> tuple[str, ...]:
    if items and items[-1] == item:
        return items
    if item in items:
        items = tuple(i for i in items if i != item)
    return (*items, item)[-RECENT_LIMIT:]


def decided(s: SessionState, updates: Updates, decision: DecisionRecord) -> None:
    """Keep a person's decision among the latest ones, and count it."""
    updates["decisions"] = (*s.decisions, decision)[-RECENT_LIMIT:]
    updates["decision_count"] = s.decision_count + 1


_M = TypeVar("_M", bound=BaseModel)


# Per record class: every field in declaration order with its default (required fields map to
# None until given), and the names of the required fields. Reading `model_fields` on every call
# would cost more than building the record.
_SHAPES: dict[type[BaseModel], tuple[dict[str, Any], frozenset[str]]] = {}


def _shape(cls: type[BaseModel]) -> tuple[dict[str, Any], frozenset[str]]:
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = cls.model_fields
        template = {
            name: None if info.is_required() else info.get_default(call_default_factory=True)
            for name, info in fields.items()
        }
        required = frozenset(name for name, info in fields.items() if info.is_required())
        shape = _SHAPES[cls] = (template, required)
    return shape


def new_record(cls: type[_M], **fields: Any) -> _M:
    """Build a record from values that were validated already (they come from parsed events),
    skipping a second validation on the hot path of `apply`. Unknown or missing fields still fail."""
    template, required = _shape(cls)
    values = {**template, **fields}  # keeps declaration order, as validation would
    if len(values) != len(template) or not required.issubset(fields):
        unknown = sorted(set(fields) - template.keys())
        missing = sorted(required - fields.keys())
        raise TypeError(f"{cls.__name__}: unknown fields {unknown}, missing fields {missing}")
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", set(fields))
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def replaced(model: _M, updates: dict[str, Any]) -> _M:
    """`model_copy(update=...)` without its generic deep-copy machinery: records are frozen and
    their values immutable, so sharing them is safe, and this is the hot path of `apply`."""
    new = object.__new__(type(model))
    object.__setattr__(new, "__dict__", {**model.__dict__, **updates})
    object.__setattr__(new, "__pydantic_fields_set__", model.__pydantic_fields_set__)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def note_subagent(s: SessionState, updates: dict[str, Any], name: str | None, seq: int) -> None:
    if not name:
        return
    subagents: Map[str, SubagentRecord] = updates.get("subagents", s.subagents)
    if name not in subagents:
        updates["subagents"] = subagents.set(name, new_record(SubagentRecord, name=name, first_seq=seq))


def note_ordinal(s: SessionState, updates: dict[str, Any], operation_id: str) -> None:
    """The highest ordinal recorded where `operation_id` counts calls, raised to its own."""
    found = operation_ordinal(operation_id)
    if found is None:
        return
    place, ordinal = found
    ordinals: Map[str, int] = updates.get("operation_ordinals", s.operation_ordinals)
    if ordinal > ordinals.get(place, 0):
        updates["operation_ordinals"] = ordinals.set(place, ordinal)
