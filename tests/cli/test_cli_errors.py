"""Clear errors and non-zero exits on bad input, without running any session."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from belay.cli.main import app
from tests.harness.example import MANIFEST

runner = CliRunner()


def invoke(home: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.output


def write_manifest(path: Path, change: dict[str, object]) -> Path:
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["spec"]["subagents"][0].update(change)
    manifest["spec"]["executor"]["plan"] = str(MANIFEST.parent / "plan.yaml")
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_a_bad_manifest_names_the_field_and_why(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "bad.yaml", {"networkProfile": "everything"})
    code, output = invoke(tmp_path / "home", "run", str(manifest))
    assert code != 0
    assert 'spec.subagents[0].networkProfile: Unsupported value: "everything"' in output
    assert 'supported values: "none", "allowlist", "internet"' in output


def test_a_manifest_that_is_not_yaml_or_missing_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: [unclosed\n")
    code, output = invoke(tmp_path / "home", "run", str(broken))
    assert code != 0 and "not valid YAML" in output
    code, output = invoke(tmp_path / "home", "run", str(tmp_path / "absent.yaml"))
    assert code != 0 and "cannot read" in output


def test_a_missing_plan_is_named(tmp_path: Path) -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["spec"]["executor"]["plan"] = "nowhere.yaml"
    path = tmp_path / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, output = invoke(tmp_path / "home", "run", str(path))
    assert code != 0 and "spec.executor.plan" in output


def test_unknown_session_and_unknown_ids(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for args in (
        ("brief", "nope"),
        ("events", "nope", "--json"),
        ("artifacts", "nope"),
        ("artifacts", "get", "nope", "x", "-o", str(tmp_path / "x")),
        ("approve", "nope", "approve-x"),
        ("resume", "nope"),
        ("report", "nope", "-o", str(tmp_path / "report.html")),
    ):
        code, output = invoke(home, *args)
        assert code != 0, args
        assert "unknown session 'nope'" in output, (args, output)
    code, output = invoke(home, "artifacts", "get", "only-two")
    assert code != 0 and "usage" in output


def test_home_is_taken_after_the_command_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default home, ./.belay, is somewhere else
    home = tmp_path / "elsewhere"
    for args in (
        ["brief", "nope", "--home", str(home)],
        ["brief", f"--home={home}", "nope"],
        ["--home", str(home), "brief", "nope"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert f"unknown session 'nope' in {home}; run it there, or point --home" in result.output, args
    result = runner.invoke(app, ["sessions", "--home", str(tmp_path / "new")])
    assert result.exit_code == 0 and str(tmp_path / "new") in " ".join(result.output.split())
    assert not (tmp_path / ".belay" / "events.db").exists()
    # After `--`, `--home` is an argument like any other: here the session's name.
    result = runner.invoke(app, ["--home", str(home), "brief", "--", "--home"])
    assert "unknown session '--home'" in result.output


def test_help_shows_flags_without_a_type() -> None:
    for args in (["brief", "--help"], ["run", "--help"], ["drill", "--help"]):
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "--help" in result.output
        assert "<bool>" not in result.output, args
