"""docs/plans.md: the scripted plan format, written from the models that parse a plan
(`belay.harness.models.scripted`), so the reference cannot drift from what is accepted. A test
checks the file equals it; `python -m belay.harness.models.plan_reference > docs/plans.md` writes
it again."""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Union

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from belay.harness.models.scripted import ScriptedPlan

INTRO = [
    "# Plans",
    "",
    "<!-- Generated from belay.harness.models.scripted by "
    "`python -m belay.harness.models.plan_reference > docs/plans.md`; "
    "tests/harness/test_plans_doc.py checks it is current. -->",
    "",
    "A session whose `spec.executor.type` is `scripted` follows a YAML plan (`spec.executor.plan`, a",
    "file next to the manifest): for each subagent, its steps, and for each step the calls the",
    "scripted model asks for. The model decides each turn from the record, so a resumed session goes",
    "on where its record stands. `belay run` refuses a plan that does not fit this format (a field",
    "not listed here, a wrong type, an unknown tool, a step id used twice, a subagent the manifest",
    "does not have), and the plans a scripted coordinator's `start_session` calls name, before",
    "anything starts. The tools and their arguments are in [tools.md](tools.md); runnable plans are",
    "in `examples/`.",
]


def _kind(annotation: Any) -> str:
    """A field's type as a person reads it; a model's name links to its section."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        shown = [_kind(a) for a in arguments if a is not type(None)]
        return " or ".join(shown)
    if origin is list:
        return f"list of {_kind(arguments[0])}"
    if origin is dict:
        return f"map of name to {_kind(arguments[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{_title(annotation)}](#{_title(annotation).lower().replace(' ', '-')})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, "any") if annotation is not Any else "any"


def _title(model: type[BaseModel]) -> str:
    """`ScriptedSubagentPlan` as "Subagent plan", `StepVerification` as "Step verification"."""
    words = re.findall(r"[A-Z][a-z]*", model.__name__.removeprefix("Scripted"))
    return " ".join([words[0], *(w.lower() for w in words[1:])])


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """The root and every model its fields name, each once, in the order a plan nests them."""
    found: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in found:
            return
        found.append(model)
        for field in model.model_fields.values():
            for inner in _inner_models(field.annotation):
                visit(inner)

    visit(root)
    return found


def _inner_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _inner_models(a)]


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        return "default: empty"
    if field.default is None or field.default is PydanticUndefined:
        return "optional"
    return f"default: `{field.default!r}`" if field.default != "" else 'default: `""`'


def reference() -> str:
    lines = list(INTRO)
    for model in _models(ScriptedPlan):
        lines += ["", f"## {_title(model)}", ""]
        if model.__doc__:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| field | type | given | what it means |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            cells = [
                f"`{field.alias or name}`",
                _kind(field.annotation),
                _default(field),
                field.description or "",
            ]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
