"""Kill the adapter's whole process group at every boundary between a remote event and its record,
and between a tool run and its result post, then `belay resume`, against each provider's stand-in
(a separate process, so the provider outlives the adapter):

- the remote session is recorded (and, for Anthropic, the agent it needs) / the next call is asked;
- a call the remote agent asked for is recorded / its tool request is recorded;
- the tool ran and its result is recorded / the result is posted;
- the result is accepted / the next call.

Every resume completes; the provider received each input and each tool result exactly once (for
Anthropic, which has no idempotency key: no call was ever answered twice); there is one remote
session and at most one ticket; the deliverable's sha256 is the uninterrupted run's.

The calls interrupted are one of each kind: a read, a command in the sandbox, a note kept by the
harness, the unsafe ticket, the deliverable's publication and the last call.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.journal.events import Event, RemoteEvent, ToolRequestEvent
from tests.belay_cli import (
    StandinProcess,
    completed,
    deliverables,
    provider_problems,
    read_events,
    remote_sessions,
    run_belay,
    run_until,
    tickets_in,
)
from tests.executors.example import PLAN, SESSION, SUBAGENT, example_manifest, review_sha256

pytestmark = pytest.mark.slow

EXECUTORS = ("openai-agents", "anthropic-managed")
HANG_S = 600
KINDS = ("read_file", "run_command", "record_note", "create_ticket", "publish_deliverable")


def boundaries(reference: list[Event]) -> list[str]:
    requests = [e.payload for e in reference if isinstance(e, ToolRequestEvent)]
    chosen = [next(r.operation_id for r in requests if r.tool == tool) for tool in KINDS]
    chosen.append(requests[-1].operation_id)
    points = [f"remote:session:{SUBAGENT}"]
    if any(isinstance(e, RemoteEvent) and e.payload.kind == "resource" for e in reference):
        points.append(f"remote:resource:{SUBAGENT}")  # the agent exists, not yet its session
    for operation in chosen:
        points += [
            f"remote:call:{operation}",
            f"tool_request:{operation}",
            f"tool_result:{operation}",
            f"remote:result_delivered:{operation}",
        ]
    return points


def interrupt_and_resume(executor: str, manifest: Path, point: str, home: Path) -> list[str]:
    """Problems found for one kill point (empty: all good)."""
    standin = StandinProcess(executor, PLAN, home / "standin")
    try:
        environment = standin.environment()
        reached, _ = run_until(
            home, ["run", "--quiet", str(manifest)], point, timeout=HANG_S, environment=environment
        )
        if not reached:
            return [f"{point}: the run ended before reaching it"]
        before = read_events(home, SESSION)
        # A hang guard, not a timing: three resumes run side by side, and importing a provider's
        # SDK alone takes seconds on a loaded machine.
        result = run_belay(home, "resume", "--quiet", SESSION, environment=environment, timeout=HANG_S)
        after = read_events(home, SESSION)
        problems = [f"{point}: {p}" for p in provider_problems(standin.stats(), subagents=1)]
    finally:
        standin.stop()
    if result.returncode != 0 or not completed(after):
        problems.append(f"{point}: resume exit {result.returncode}: {result.stderr[-300:]}")
    if tickets_in(home, SESSION) > 1:
        problems.append(f"{point}: {tickets_in(home, SESSION)} tickets")
    if deliverables(after).get("review.md") != review_sha256():
        problems.append(f"{point}: deliverables {deliverables(after)}")
    held = remote_sessions(before)
    if held and remote_sessions(after) != held:
        problems.append(f"{point}: remote session {held} before the kill, {remote_sessions(after)} after")
    return problems


@pytest.mark.parametrize("executor", EXECUTORS)
def test_kill_at_every_boundary_then_resume(executor: str, tmp_path: Path) -> None:
    manifest = example_manifest(tmp_path / "manifest", executor)
    home = tmp_path / "reference"
    standin = StandinProcess(executor, PLAN, home / "standin")
    try:
        result = run_belay(home, "run", "--quiet", str(manifest), environment=standin.environment())
        assert result.returncode == 0, result.stderr
        assert provider_problems(standin.stats(), subagents=1) == []
    finally:
        standin.stop()
    reference = read_events(home, SESSION)
    assert deliverables(reference)["review.md"] == review_sha256()
    points = boundaries(reference)
    assert len(points) >= 25
    with ThreadPoolExecutor(max_workers=3) as pool:
        found = pool.map(
            lambda item: interrupt_and_resume(executor, manifest, item[1], tmp_path / f"point-{item[0]}"),
            enumerate(points),
        )
        problems = [p for each in found for p in each]
    assert not problems, "\n".join(problems)
