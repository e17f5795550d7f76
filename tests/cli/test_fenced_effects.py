"""Fenced effects: a harness checks its lease right before an unsafe call, so an attempt that was
only frozen and wakes up after its replacement finished creates no second ticket.

Each trial runs `belay run` until it has recorded its `create_ticket` request (the harness stops
itself there, `BELAY_FAULT_STOP_AFTER`), runs `belay resume` to the end (its probe finds no ticket,
so it creates the one), then wakes the frozen first attempt: the ticket service holds exactly one
ticket, 20 times out of 20. With the fence switched off (`BELAY_EFFECT_FENCE=off`, in the frozen
attempt's environment) the same trial ends with two tickets: the check can fail.

A reconcile probe that finds more than one effect for one operation records all of them and the
briefing shows them under "Needs attention".
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from belay.harness.effect_marks import EffectMarks
from belay.harness.runtime import FENCE_ENV
from belay.journal.events import OperationOutcomeEvent, ToolResultEvent
from belay.local.runtime import LocalHome
from belay.local.tickets import TicketDraft, add_ticket, load_tickets
from tests.belay_cli import completed, read_events, run_belay, run_until, start_belay, wait_until_stopped
from tests.scripted import write_scripted_session

pytestmark = pytest.mark.slow

SESSION = "ticket-filer"
OPERATION = "filer.file.1"
POINT = f"tool_request:{OPERATION}"
TRIALS = 20


def ticket_session(directory: Path) -> Path:
    """One subagent whose plan files one ticket."""
    create = {
        "tool": "create_ticket",
        "arguments": {"title": "parse() crashes on '='", "body": "split on the first '='"},
    }
    return write_scripted_session(
        directory,
        SESSION,
        "File a ticket for the parser crash.",
        [{"name": "filer", "networkProfile": "none"}],
        {"filer": [{"id": "file", "title": "File the ticket", "actions": [create]}]},
    )


def tickets(home: Path) -> list[str]:
    return [t.id for t in load_tickets(LocalHome(home).tickets_file(SESSION))]


def frozen_attempt_wakes_after_its_replacement(
    home: Path, manifest: Path, monkeypatch: pytest.MonkeyPatch, fenced: bool
) -> list[str]:
    """One trial; returns the tickets in the service afterwards."""
    with monkeypatch.context() as switch:
        if not fenced:
            switch.setenv(FENCE_ENV, "off")
        zombie = start_belay(home, "run", "--quiet", str(manifest), stop_after=POINT)
    try:
        wait_until_stopped(zombie, POINT, timeout=120)
        assert tickets(home) == []
        replacement = run_belay(home, "resume", "--quiet", SESSION)
        assert replacement.returncode == 0, replacement.stdout + replacement.stderr
        assert len(tickets(home)) == 1
        os.killpg(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=120) != 0  # superseded
    finally:
        if zombie.poll() is None:
            os.killpg(zombie.pid, signal.SIGKILL)
            zombie.wait()
    events = read_events(home, SESSION)
    assert completed(events)
    # Whatever it did outside, the frozen attempt wrote nothing after its request.
    request_seq = next(
        e.seq
        for e in events
        if e.type == "tool_request" and e.actor.attempt == 1 and e.payload.operation_id == OPERATION
    )
    assert not [
        e for e in events if e.seq > request_seq and e.actor.kind == "harness" and e.actor.attempt == 1
    ]
    return tickets(home)


def test_a_frozen_attempt_woken_after_its_replacement_creates_no_second_ticket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = ticket_session(tmp_path / "manifest")
    outcomes = [
        frozen_attempt_wakes_after_its_replacement(
            tmp_path / f"trial-{n}", manifest, monkeypatch, fenced=True
        )
        for n in range(TRIALS)
    ]
    assert [len(found) for found in outcomes] == [1] * TRIALS


def test_without_the_fence_the_frozen_attempt_creates_a_second_ticket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = ticket_session(tmp_path / "manifest")
    found = frozen_attempt_wakes_after_its_replacement(
        tmp_path / "trial", manifest, monkeypatch, fenced=False
    )
    assert found == ["TICKET-1", "TICKET-2"]


def test_a_probe_that_finds_several_effects_records_them_all_and_the_brief_asks_for_attention(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    manifest = ticket_session(tmp_path / "manifest")
    reached, _ = run_until(home, ["run", "--quiet", str(manifest)], POINT)
    assert reached
    # The request took effect twice before any result was recorded (a superseded attempt's call
    # got through between its lease check and the call).
    state_file = LocalHome(home).tickets_file(SESSION)
    reference = EffectMarks(LocalHome(home).effect_key(), SESSION).reference(OPERATION)
    for _ in range(2):
        add_ticket(state_file, TicketDraft(title="parse() crashes on '='", client_ref=reference))
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert tickets(home) == ["TICKET-1", "TICKET-2"]  # nothing issued again

    events = read_events(home, SESSION)
    [outcome] = [
        e for e in events if isinstance(e, OperationOutcomeEvent) and e.payload.outcome == "reconciled"
    ]
    assert outcome.payload.effects == ("TICKET-1", "TICKET-2") and outcome.payload.succeeded
    [result] = [e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == OPERATION]
    assert [t["id"] for t in result.payload.output["effects"]] == ["TICKET-1", "TICKET-2"]

    brief = run_belay(home, "brief", SESSION)
    assert "Needs attention" in brief.stdout
    assert f"create_ticket {OPERATION} took effect 2 times (TICKET-1, TICKET-2)" in brief.stdout
    as_json = json.loads(run_belay(home, "brief", SESSION, "--json").stdout)
    [repeated] = as_json["needs_attention"]
    assert (repeated["kind"], repeated["id"], repeated["effects"]) == (
        "repeated_effect",
        OPERATION,
        ["TICKET-1", "TICKET-2"],
    )
