"""Approve and reject at the same moment: one decision is recorded, the other decider is told who
decided first, and the gated operation runs only after a grant."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from belay.cli import home as local_cli
from belay.cli import main as cli
from belay.journal.events import (
    ApprovalEvent,
    ApprovalRequest,
    ArtifactEvent,
    EffectClass,
    Event,
    EventDraft,
    ToolRequest,
    ToolResultEvent,
    UserInput,
)
from belay.local.runtime import LocalHome
from tests.belay_cli import kill_group, read_events, start_belay
from tests.testenv.polling import wait_until

SESSION = "gated"
PAIRS = 100
# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 120


def gated_session(directory: Path, publishes: int) -> Path:
    """One subagent that writes a file and then publishes it `publishes` times, one step per
    publish, each waiting for its own approval. A rejected publish reopens its step, which the
    plan then does without publishing."""
    write = {
        "id": "write",
        "title": "Write the file",
        "actions": [{"tool": "write_file", "arguments": {"path": "out/a.txt", "content": "hello\n"}}],
    }
    copies = [
        {
            "id": f"copy-{i:03d}",
            "title": f"Publish copy {i}",
            "actions": [
                {
                    "tool": "publish_deliverable",
                    "arguments": {"path": "out/a.txt", "name": f"copy-{i:03d}.txt"},
                }
            ],
            "variants": [
                {
                    "when": {"rejected": True},
                    "actions": [
                        {
                            "tool": "record_note",
                            "arguments": {"note_id": f"copy-{i:03d}", "kind": "finding", "text": "rejected"},
                        }
                    ],
                }
            ],
        }
        for i in range(publishes)
    ]
    plan = {"subagents": {"worker": {"steps": [write, *copies]}}}
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "publish a file once for every approval it is given"},
            "executor": {"type": "scripted", "plan": str(directory / "plan.yaml")},
            "subagents": [{"name": "worker", "networkProfile": "none", "declared": ["out/*"]}],
            "approvalRequired": ["worker:publish_deliverable"],
            "budgets": {"maxModelCalls": 10 * publishes + 20},
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan))
    (directory / "session.yaml").write_text(yaml.safe_dump(manifest))
    return directory / "session.yaml"


def approval_ids(events: list[Event]) -> list[str]:
    return [e.payload.approval_id for e in events if isinstance(e.payload, ApprovalRequest)]


def wait_for_request(home: Path, index: int) -> str:
    requested = wait_until(
        lambda: approval_ids(read_events(home, SESSION)),
        f"approval request {index}",
        until=lambda requested: len(requested) > index,
        timeout=HANG_GUARD_SECONDS,
        interval=0.02,
    )
    return requested[index]


def race(approval_id: str) -> dict[bool, bool]:
    """An approve and a reject released at the same moment, each through the CLI's `decide`, on
    its own store handle: granted -> whether that decision was recorded."""
    start = threading.Barrier(2)
    recorded: dict[bool, bool] = {}

    def decider(granted: bool) -> None:
        start.wait()
        try:
            state = local_cli.known_state(SESSION)
            local_cli.decide(state, approval_id, granted, "", "alice" if granted else "bob")
        except typer.Exit:
            recorded[granted] = False
        else:
            recorded[granted] = True

    threads = [threading.Thread(target=decider, args=(granted,)) for granted in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD_SECONDS)
    return recorded


def test_concurrent_approve_and_reject_record_one_decision_and_gate_the_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setattr(cli.Context, "home", LocalHome(home))
    process = start_belay(home, "run", "--quiet", str(gated_session(tmp_path / "manifest", PAIRS)))
    outcomes: dict[str, dict[bool, bool]] = {}
    try:
        for index in range(PAIRS):
            approval_id = wait_for_request(home, index)
            outcomes[approval_id] = race(approval_id)
        process.wait(timeout=HANG_GUARD_SECONDS)
    finally:
        if process.poll() is None:
            kill_group(process)

    events = read_events(home, SESSION)
    decisions: dict[str, list[ApprovalEvent]] = {}
    for event in events:
        if isinstance(event, ApprovalEvent):
            decisions.setdefault(event.payload.approval_id, []).append(event)
    assert sorted(decisions) == sorted(outcomes) and len(outcomes) == PAIRS
    published = {e.payload.name: e.seq for e in events if isinstance(e, ArtifactEvent)}
    requests = {e.payload.operation_id: e for e in events if isinstance(e.payload, ApprovalRequest)}
    results = {e.payload.operation_id: e for e in events if isinstance(e, ToolResultEvent)}
    for approval_id, recorded in outcomes.items():
        [decision] = decisions[approval_id]  # exactly one decision each
        granted = decision.payload.granted
        assert recorded == {granted: True, not granted: False}, approval_id
        operation = decision.payload.operation_id
        name = f"{operation.split('.')[1]}.txt"  # worker.<step>.<position>, the step named after its copy
        result = results[operation]
        assert requests[operation].seq < decision.seq < result.seq
        if granted:
            assert result.payload.ok and decision.seq < published[name] <= result.seq
        else:
            assert not result.payload.ok and "rejected by bob" in (result.payload.error or "")
            assert name not in published
    # Both kinds of decision won some races: each pair really raced.
    assert {d.payload.granted for [d] in decisions.values()} == {True, False}


def test_the_decider_who_comes_second_is_told_who_decided_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two people read the record while the approval is pending; the first records a grant, the
    second's reject reaches the store afterwards and is refused there."""
    home = LocalHome(tmp_path)
    request = ToolRequest(
        operation_id="op-1",
        tool="publish_deliverable",
        effect=EffectClass.IDEMPOTENT,
        payload_sha256="a" * 64,
    )
    pending = ApprovalRequest(
        approval_id="approve-op-1",
        operation_id="op-1",
        tool="publish_deliverable",
        payload_sha256="a" * 64,
        summary="",
    )

    async def write() -> None:
        store = home.open_event_store()
        try:
            await store.append(
                SESSION, [EventDraft(payload=p) for p in (UserInput(goal="g"), request, pending)]
            )
        finally:
            await store.close()

    asyncio.run(write())
    runner = CliRunner()
    read_while_pending = local_cli.known_state
    monkeypatch.setattr(cli.Context, "home", home)
    stale = read_while_pending(SESSION)
    granted = runner.invoke(
        cli.app, ["--home", str(tmp_path), "approve", SESSION, "approve-op-1", "--by", "alice"]
    )
    assert granted.exit_code == 0, granted.output
    monkeypatch.setattr(cli, "known_state", lambda session_id: stale)
    refused = runner.invoke(
        cli.app, ["--home", str(tmp_path), "reject", SESSION, "approve-op-1", "--by", "bob"]
    )
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        "error: approval approve-op-1 was already granted by alice (seq 4); yours was not recorded "
        f"(see `belay brief {SESSION}`)"
    )
    assert [
        (e.payload.granted, e.payload.by)
        for e in read_events(tmp_path, SESSION)
        if isinstance(e, ApprovalEvent)
    ] == [(True, "alice")]
