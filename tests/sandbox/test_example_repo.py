"""The parser-fix example repository fails as documented, and the fix in its FIX.md makes it pass,
run inside a real sandbox the way a session runs it."""

from __future__ import annotations

import re
from pathlib import Path

from belay.sandbox.local import LocalSandbox
from belay.sandbox.restore import push_directory

REPO = Path(__file__).resolve().parents[2] / "examples" / "parser-fix" / "repo"


def documented_fix() -> dict[str, str]:
    text = (REPO / "FIX.md").read_text()
    parser, regression = re.findall(r"```python\n(.*?)```", text, re.S)
    return {"confparse/parser.py": parser, "tests/test_regression_equals.py": regression}


async def test_example_fails_then_the_documented_fix_passes(sandbox: LocalSandbox) -> None:
    pushed = await push_directory(sandbox.client, REPO, prefix="repo")
    assert "repo/tests/test_parser.py" in [entry.name for entry in pushed]

    before = await sandbox.client.call("run_command", {"command": "python -m unittest", "cwd": "repo"})
    assert before["output"]["exit_code"] == 1
    assert "test_value_may_contain_equals_sign" in before["output"]["stderr"]
    assert "too many values to unpack" in before["output"]["stderr"]

    for path, content in documented_fix().items():
        written = await sandbox.client.call("write_file", {"path": f"repo/{path}", "content": content})
        assert written["ok"] is True

    after = await sandbox.client.call("run_command", {"command": "python -m unittest -v", "cwd": "repo"})
    assert after["output"]["exit_code"] == 0, after["output"]["stderr"]
    assert "Ran 8 tests" in after["output"]["stderr"]
    assert "test_trailing_equals_padding_is_kept" in after["output"]["stderr"]
