"""The plan vocabulary is documented from the tool catalogue itself, and a plan naming another
tool is refused with the nearest name and every tool."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from belay.harness.models.scripted import PlanError, load_plan
from belay.journal.tools import TOOLS, reference, unknown_tool

DOC = Path(__file__).parents[2] / "docs" / "tools.md"


def test_docs_tools_md_is_the_catalogue() -> None:
    assert DOC.read_text() == reference(), "run `python -m belay.journal.tools > docs/tools.md`"
    for name in TOOLS:
        assert f"| `{name}` |" in DOC.read_text()
    for waiting in ("wait_on_external", "wait_on_user", "request_approval"):
        assert waiting in DOC.read_text()


def test_an_unknown_tool_names_the_nearest_and_every_tool() -> None:
    message = unknown_tool("wait_for_ci")
    assert message.startswith("unknown tool 'wait_for_ci'; did you mean 'wait_on_user'?") or (
        "did you mean 'wait_on_external'?" in message
    )
    assert all(name in message for name in TOOLS)
    assert "did you mean" not in unknown_tool("zzzz")


def test_a_plan_with_a_misspelt_tool_is_refused_with_the_nearest_name(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    actions = [{"tool": "wait_on_externl", "arguments": {"condition": "ci-green"}}]
    plan = {"subagents": {"a": {"steps": [{"id": "s", "title": "t", "actions": actions}]}}}
    path.write_text(yaml.safe_dump(plan))
    with pytest.raises(PlanError, match="did you mean 'wait_on_external'") as refused:
        load_plan(path)
    assert "run_command" in str(refused.value)
