"""`belay run` refuses every invalid manifest of the shared table (tests/api/invalid_manifests.py)
with one `error:` line carrying the case's message, exits non-zero, and leaves the home as it was:
no manifest, plan or record written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from belay.cli.main import app
from belay.local.runtime import LocalHome, install_session, prepare_session
from tests.api.invalid_manifests import BOTH, CLI_ONLY, Case, valid_manifest

runner = CliRunner()


def snapshot(root: Path) -> dict[str, Any] | None:
    """Every path under root with its bytes (or link target): what "unchanged" compares."""
    if not root.exists():
        return None
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = ("link", str(path.readlink()))
        elif path.is_file():
            found[relative] = path.read_bytes()
        else:
            found[relative] = "directory"
    return found


def write_case(directory: Path, case: Case) -> Path:
    directory.mkdir()
    for relative, text in case.files.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_text(text)
    for relative, points_at in case.symlinks.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).symlink_to(points_at)
    manifest = directory / "session.yaml"
    manifest.write_text(yaml.safe_dump(case.manifest, sort_keys=False))
    return manifest


def test_the_valid_manifest_the_cases_derive_from_is_accepted(tmp_path: Path) -> None:
    case = Case("valid", valid_manifest(), "")
    installation = prepare_session(LocalHome(tmp_path / "home"), write_case(tmp_path / "valid", case))
    assert installation.session.session_id == "valid"
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("case", BOTH + CLI_ONLY, ids=[case.name for case in BOTH + CLI_ONLY])
def test_belay_run_refuses_the_manifest_with_one_error_line_and_writes_nothing(
    case: Case, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    if case.earlier is not None:
        install_session(LocalHome(home), write_case(tmp_path / "earlier", Case("earlier", case.earlier, "")))
    manifest = write_case(tmp_path / "case", case)
    before = snapshot(home)

    result = runner.invoke(app, ["--home", str(home), "run", str(manifest)])

    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert case.message in lines[0]
    assert snapshot(home) == before


def test_the_table_holds_at_least_forty_shared_cases_and_says_why_a_case_is_one_sided() -> None:
    assert len(BOTH) >= 40
    assert len({case.name for case in BOTH + CLI_ONLY}) == len(BOTH + CLI_ONLY)
    assert all(case.reason for case in CLI_ONLY)
    assert not any(case.reason for case in BOTH)
