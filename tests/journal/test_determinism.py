"""Same events, identical JSON, even across processes with different string-hash seeds (the
persistent maps iterate in hash order, so every projection must impose its own order)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings

from belay.journal.recovery import recovery_plan
from belay.journal.state import fold
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_json
from belay.views.status.build import session_status
from tests.journal.strategies import logs

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_json, render_text
from belay.journal.recovery import recovery_plan
from belay.journal.state import fold
from belay.views.status.build import session_status
from tests.journal.fixtures import realistic_log

state = fold(realistic_log())
print(render_json(briefing(state)))
print(render_text(briefing(state)))
print(session_status(state).model_dump_json())
print(recovery_plan(state).model_dump_json())
"""


def _projections_with_hash_seed(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_projections_are_identical_across_hash_seeds() -> None:
    assert _projections_with_hash_seed("1") == _projections_with_hash_seed("2")


@settings(max_examples=60, deadline=None)
@given(events=logs())
def test_projections_are_deterministic(events: list) -> None:
    first, second = fold(events), fold(list(events))
    assert render_json(briefing(first)) == render_json(briefing(second))
    assert session_status(first).model_dump_json() == session_status(second).model_dump_json()
    assert recovery_plan(first).model_dump_json() == recovery_plan(second).model_dump_json()
