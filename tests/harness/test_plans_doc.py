"""The scripted plan format is documented from the models that parse a plan: docs/plans.md is
what `belay.harness.models.plan_reference` writes, every field a plan may hold is in it, and a
field it does not list is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from belay.harness.models.plan_reference import _models, reference
from belay.harness.models.scripted import PlanError, ScriptedPlan, load_plan

DOC = Path(__file__).parents[2] / "docs" / "plans.md"


def test_docs_plans_md_is_the_plan_format() -> None:
    assert DOC.read_text() == reference(), (
        "run `python -m belay.harness.models.plan_reference > docs/plans.md`"
    )


def test_every_field_a_plan_may_hold_is_described() -> None:
    text = DOC.read_text()
    for model in _models(ScriptedPlan):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            assert f"| `{name}` |" in text


def test_every_example_plan_fits_the_format() -> None:
    plans = sorted((Path(__file__).parents[2] / "examples").rglob("*plan*.yaml"))
    assert plans
    for plan in plans:
        load_plan(plan)


def test_a_field_the_reference_does_not_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    step = {"id": "s", "title": "t", "actions": [{"tool": "list_files", "retries": 3}]}
    path.write_text(yaml.safe_dump({"subagents": {"a": {"steps": [step]}}}))
    assert "`retries`" not in DOC.read_text()
    with pytest.raises(PlanError, match="retries"):
        load_plan(path)
