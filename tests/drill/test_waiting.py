"""A run the drill waits for is stopped once it waits on a person, or once it runs past its
limit, and says which, with the command that answers it; a run that ends is left alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.belay_cli import read_events, run_watched
from tests.harness.example import SESSION, manifest_copy

pytestmark = pytest.mark.slow

UNCOVERED = [{"operationId": "implementer.publish.3", "payloadSha256": "0" * 64}]


def test_a_run_past_its_limit_is_stopped_and_says_where_it_stands(tmp_path: Path) -> None:
    manifest = manifest_copy(tmp_path / "manifest", approvals=UNCOVERED)
    home = tmp_path / "home"
    # It would wait on the approval; told to notice that only after a minute, its limit comes first.
    run = run_watched(home, ["run", "--quiet", str(manifest)], SESSION, timeout=3, quiet_s=60)
    assert run.returncode != 0
    assert run.stalled.startswith(f"`belay run --quiet {manifest}` ran past its limit of 3 s")
    assert f"`belay --home {home} brief {SESSION}`" in run.stalled
    # What the record held when it was stopped (an append may land between that read and the kill).
    found = re.search(r"the record ends at seq (\d+)", run.stalled)
    assert found is not None and 0 < int(found.group(1)) <= len(read_events(home, SESSION))


def test_a_run_that_ends_is_not_stalled(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = run_watched(home, ["run", "--quiet", str(manifest_copy(tmp_path / "manifest"))], SESSION)
    assert (run.returncode, run.stalled) == (0, "")
