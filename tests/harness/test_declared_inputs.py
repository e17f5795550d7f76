"""A subagent's declared inputs are read from their sources only when its first sandbox is seeded
from them: an attempt that restores from the record never reads them again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from belay.api.agentsession import AgentSession
from belay.harness.declared import DeclaredInputs, read_inputs


def session_with_inputs(tmp_path: Path) -> AgentSession:
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "one.txt").write_text(f"{name} one")
        (tmp_path / name / "sub" / "two.txt").write_text(f"{name} two")
        (tmp_path / name / "__pycache__").mkdir()
        (tmp_path / name / "__pycache__" / "x.pyc").write_bytes(b"cache")
    spec = {
        "request": {"goal": "read inputs"},
        "executor": {"type": "scripted", "plan": str(tmp_path / "plan.yaml")},
        "subagents": [
            {
                "name": name,
                "inputs": [{"source": str(tmp_path / name), "target": "repo", "hostPath": True}],
                "declared": ["repo/*"],
            }
            for name in ("a", "b")
        ],
    }
    return AgentSession.model_validate({"metadata": {"name": "inputs"}, "spec": spec})


def test_inputs_are_read_when_a_subagent_asks_and_not_before(tmp_path: Path) -> None:
    session = session_with_inputs(tmp_path)
    inputs = DeclaredInputs(session)
    assert sorted(inputs) == ["a", "b"] and inputs.read == []
    assert inputs["a"] == [("repo/one.txt", b"a one"), ("repo/sub/two.txt", b"a two")]
    assert inputs.read == ["a"]
    # Gone from its source now: a subagent restored from the record never asks for it.
    shutil.rmtree(tmp_path / "b")
    assert inputs.get("a") == [("repo/one.txt", b"a one"), ("repo/sub/two.txt", b"a two")]
    with pytest.raises(FileNotFoundError, match="input directory"):
        inputs["b"]


def test_read_inputs_reads_every_subagents_at_once(tmp_path: Path) -> None:
    read = read_inputs(session_with_inputs(tmp_path))
    assert {name: [path for path, _ in files] for name, files in read.items()} == {
        "a": ["repo/one.txt", "repo/sub/two.txt"],
        "b": ["repo/one.txt", "repo/sub/two.txt"],
    }
