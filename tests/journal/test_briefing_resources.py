"""The briefing's resources and recovery: each subagent's sandbox, the budgets used and left, every
subagent's last verified checkpoint, and only what really happened to the attempts."""

from __future__ import annotations

import json
from datetime import timedelta

from belay.journal.events import (
    Checkpoint,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Task,
    TaskStatus,
    UserInput,
    Verification,
)
from belay.journal.phase import Liveness
from belay.journal.state import fold
from belay.views.briefing.build import briefing
from belay.views.briefing.model import SandboxItem
from belay.views.briefing.render import render_json, render_markdown, render_text
from tests.journal.fixtures import LogBuilder


def section(text: str, title: str) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


def verified(checkpoint_id: str, subagent: str, covers: int) -> Checkpoint:
    return Checkpoint(
        checkpoint_id=checkpoint_id,
        covers_seq=covers,
        subagent=subagent,
        verification=Verification(command="make test", status="passed", exit_code=0),
    )


def first_attempt() -> LogBuilder:
    """Two subagents, each sandbox started and seeded from its inputs, in attempt 1."""
    log = LogBuilder()
    log.add(UserInput(goal="fix the parser"))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1))
    for name in ("implementer", "researcher"):
        log.add(
            Lifecycle(
                kind=LifecycleKind.SANDBOX_STARTED,
                attempt=1,
                subagent=name,
                detail="clean workspace, pid 10, profile none, network isolated",
            )
        )
        log.add(
            Lifecycle(kind=LifecycleKind.RESTORED, attempt=1, subagent=name, checkpoint_id=f"{name}/inputs")
        )
    return log


def test_a_run_never_interrupted_says_so_and_nothing_about_restores() -> None:
    text = render_text(briefing(fold(first_attempt().events)))
    recovery = section(text, "Attempts and recovery")
    assert "attempt 1; no attempt lost, no sandbox replaced" in recovery
    assert "restored" not in recovery and "inputs" not in recovery


def test_after_a_lost_attempt_the_restores_and_their_checkpoints_are_told() -> None:
    log = first_attempt()
    log.add(verified("implementer/fix", "implementer", 6))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1))
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2))
    for name, checkpoint in (("implementer", "implementer/fix"), ("researcher", "researcher/inputs")):
        log.add(Lifecycle(kind=LifecycleKind.SANDBOX_REPLACED, attempt=2, subagent=name, detail="pid 20"))
        log.add(Lifecycle(kind=LifecycleKind.RESTORED, attempt=2, subagent=name, checkpoint_id=checkpoint))
    b = briefing(fold(log.events))
    assert (b.recovery.restores, b.recovery.recovery_restores) == (4, 2)
    recovery = section(render_text(b), "Attempts and recovery")
    assert (
        "attempt 2; harness lost 1x; sandboxes replaced 2x; restored 2x (last from researcher/inputs)"
        in recovery
    )
    resources = {s.subagent: s for s in b.sandboxes}
    assert resources["implementer"].restored_from == "implementer/fix"
    assert resources["researcher"].restored_from == "researcher/inputs"
    assert resources["implementer"].started_by_attempt == 2


def test_every_subagents_last_verified_checkpoint_is_listed() -> None:
    log = first_attempt()
    log.add(verified("implementer/regression-test", "implementer", 5))
    log.add(verified("researcher/reproduce", "researcher", 6))
    log.add(verified("implementer/fix", "implementer", 7))
    log.add(
        Checkpoint(checkpoint_id="implementer/verify", covers_seq=8, subagent="implementer")
    )  # not verified
    b = briefing(fold(log.events))
    assert [(c.subagent, c.checkpoint_id) for c in b.checkpoints] == [
        ("implementer", "implementer/fix"),
        ("researcher", "researcher/reproduce"),
    ]
    recovery = section(render_text(b), "Attempts and recovery")
    assert "last verified checkpoint implementer: implementer/fix (covers seq 7" in recovery
    assert "last verified checkpoint researcher: researcher/reproduce (covers seq 6" in recovery


def test_sandboxes_and_budgets_used_and_left() -> None:
    log = first_attempt()
    for cached in (0, 50, 75):
        log.add(ModelOutput(text="", input_tokens=100, output_tokens=20, cached_input_tokens=cached))
    log.add(Task(task_id="implementer/fix", status=TaskStatus.DONE, owner="implementer"))
    log.add(
        Task(task_id="implementer", status=TaskStatus.DONE, owner="implementer")
    )  # a subagent, not a step
    state = fold(log.events)
    observed = [
        SandboxItem(subagent="implementer", where="pid 10, /home/w-1", network_profile="none", alive=True),
        SandboxItem(subagent="researcher", network_profile="allowlist", alive=False),
    ]
    now = state.started_at + timedelta(minutes=30) if state.started_at else None
    b = briefing(
        state,
        sandboxes=observed,
        budgets={"maxModelCalls": 200, "maxTokens": 300, "maxSteps": 10, "maxWallClockS": 3600},
        liveness=Liveness(now=now, lease=1, renewed_lease=1, renewed_at=now, holder_alive=True),
    )
    assert {(x.name, x.used, x.left) for x in b.budgets} == {
        ("maxModelCalls", 3, 197),
        ("maxTokens", 360, 0),
        ("maxSteps", 1, 9),
        ("maxWallClockS", 1800, 1800),
    }
    resources = section(render_text(b), "Resources")
    assert "sandbox implementer: alive (pid 10, /home/w-1, profile none); started by attempt 1" in resources
    assert "recorded: clean workspace, pid 10, profile none, network isolated" in resources
    assert "sandbox researcher: not running (profile allowlist)" in resources
    assert "budget maxModelCalls: 3 used, 197 left of 200" in resources
    assert "budget maxTokens: 360 used, 0 left of 300" in resources
    # Of the 300 input tokens, what the provider said its prompt cache served.
    assert (b.usage.input_tokens, b.usage.cached_input_tokens) == (300, 125)
    assert (
        "usage: 3 model calls, 300 input tokens, 60 output tokens; 125 input tokens (41%) read from the "
        "provider's prompt cache"
    ) in resources
    # No budget set, no sandbox observed: what the record knows is still listed.
    bare = briefing(state)
    assert bare.budgets == [] and [s.alive for s in bare.sandboxes] == [None, None]


def test_the_interruption_reads_the_same_in_text_markdown_and_json() -> None:
    log = first_attempt()
    log.add(Task(task_id="implementer/fix", status=TaskStatus.RUNNING, owner="implementer"))
    state = fold(log.events)
    assert state.last_event_at is not None
    gone = Liveness(
        now=state.last_event_at + timedelta(minutes=5),
        lease=1,
        holder="harness process 77",
        renewed_lease=1,
        renewed_at=state.last_event_at,
        holder_alive=False,
    )
    b = briefing(state, liveness=gone)
    assert b.phase == "Interrupted" and b.running == []
    text = render_text(b)
    assert text.splitlines()[1].startswith("Interrupted since ")
    assert "attempt 1 is gone: its harness process 77 no longer exists" in text.splitlines()[1]
    assert "  it was doing: step implementer/fix" in text
    assert "    run: belay resume parser-fix" in text
    markdown = render_markdown(b)
    assert "## Interrupted since " in markdown and "- next: run `belay resume parser-fix`" in markdown
    data = json.loads(render_json(b))
    assert data["interruption"]["command"] == "belay resume parser-fix"
    assert data["interruption"]["since"].startswith(state.last_event_at.isoformat()[:19])
