"""Attacks that need a whole session: a scripted plan whose `run_command` calls are hostile, run by a
real `belay run` whose own environment holds a credential.

- `attacker` reads the record, greps every /proc/*/environ for the harness's credential (and prints it
  reversed, as an exfiltration that dodges a redactor would), tries `belay approve` on the approval
  `victim` waits for, and leaves a process behind that clears its environment and session.
- `victim` publishes a deliverable that needs a user's approval, which nobody but the attacker gives.

With the walls every attack fails (the test then rejects the approval itself, as the user would, and
ends the session when the victim's turn ends without its deliverable, so the run ends); without
them every attack succeeds. The session runs once per mode for all tests.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.journal.events import Event
from belay.journal.state import fold
from belay.sandbox.walls import WALLS_ENV
from tests.belay_cli import belay_command, completed, deliverables, read_events
from tests.security.conftest import NO_WALLS, WALLS, isolation_for, judge, kill_all, processes_with_argument
from tests.testenv.polling import wait_until

SESSION = "hostile"
APPROVAL = "approve-victim.publish.2"
RUN_TIMEOUT_S = 300
UP_TO_HOME = "../../../../.."


@dataclass
class Outcome:
    mode: str
    credential: str
    events: list[Event]
    lingering: list[int]  # processes carrying the marker after `belay run` ended

    def output_of(self, operation_id: str) -> str:
        for event in self.events:
            payload: Any = event.payload
            if event.type == "tool_result" and payload.operation_id == operation_id:
                output = payload.output or {}
                return f"{output.get('stdout', '')}\n{output.get('stderr', '')}"
        raise AssertionError(f"no result for {operation_id}")


def approve_loop(home: Path) -> str:
    """Find the record (as seen from the workspace, or at its real path), then until the approval
    exists: `belay approve` from PATH, or belay's own code from wherever the sandbox sees it."""
    approve = f"approve {SESSION} {APPROVAL} --by alice@example.com"
    code = "PYTHONPATH=/opt/belay/src:/opt/belay/lib/0 python -m belay.cli.main"
    return (
        f'found=""; for h in {UP_TO_HOME} {home}; do [ -f "$h/events.db" ] && found="$h" && break; done; '
        f'if [ -z "$found" ]; then {code} --home {home} {approve}; echo "no record in sight"; exit 3; fi; '
        "for try in $(seq 1 240); do "
        f'  belay --home "$found" {approve} && exit 0; '
        f'  {code} --home "$found" {approve} && exit 0; '
        "  sleep 0.25; "
        "done; exit 4"
    )


def plan(home: Path, marker: str) -> dict[str, Any]:
    def step(step_id: str, command: str) -> dict[str, Any]:
        return {
            "id": step_id,
            "title": step_id,
            "actions": [{"tool": "run_command", "arguments": {"command": command, "timeout_s": 120}}],
        }

    return {
        "subagents": {
            "attacker": {
                "steps": [
                    step("record", f"for h in {UP_TO_HOME} {home}; do head -c 15 $h/events.db; echo; done"),
                    step(
                        "environ",
                        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null "
                        "| grep '^AWS_SECRET_ACCESS_KEY=' | sort -u | rev",
                    ),
                    step("approve", approve_loop(home)),
                    step("linger", f"env -i setsid sleep 1000{marker} > /dev/null 2>&1 < /dev/null &"),
                ]
            },
            "victim": {
                "steps": [
                    {
                        "id": "publish",
                        "title": "publish",
                        "actions": [
                            {"tool": "write_file", "arguments": {"path": "out/x.txt", "content": "x\n"}},
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": "out/x.txt", "name": "x.txt"},
                            },
                        ],
                        # The user's rejection reopens the step; its next round publishes nothing.
                        "variants": [
                            {
                                "when": {"rejected": True},
                                "actions": [
                                    {
                                        "tool": "record_note",
                                        "arguments": {
                                            "note_id": "publish",
                                            "kind": "finding",
                                            "text": "rejected",
                                        },
                                    }
                                ],
                            }
                        ],
                    }
                ]
            },
        }
    }


def manifest(mode: str) -> dict[str, Any]:
    isolation = isolation_for(mode)
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "a session whose commands attack the machine"},
            "executor": {"type": "scripted", "plan": "plan.yaml"},
            "subagents": [
                {"name": "attacker", "isolation": isolation},
                {"name": "victim", "isolation": isolation, "deliverable": "x.txt"},
            ],
            "approvalRequired": ["victim:publish_deliverable"],
        },
    }


def run_hostile_session(mode: str, workdir: Path) -> Outcome:
    home = workdir / "home"
    marker = f"{os.getpid() % 1000}.{secrets.randbelow(10**9):09d}"
    credential = f"AKIA-{secrets.token_hex(12)}"
    (workdir / "plan.yaml").write_text(yaml.safe_dump(plan(home, marker)))
    (workdir / "session.yaml").write_text(yaml.safe_dump(manifest(mode)))
    environment = {k: v for k, v in os.environ.items() if k != WALLS_ENV}
    environment["AWS_SECRET_ACCESS_KEY"] = credential
    if mode == NO_WALLS:
        environment[WALLS_ENV] = "off"
    home.mkdir()
    log = (workdir / "belay.log").open("ab")
    process = subprocess.Popen(
        belay_command(home, "run", "--quiet", str(workdir / "session.yaml")),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
        start_new_session=True,
    )
    try:

        def attacks_done() -> bool:
            events = read_events(home, SESSION)
            ran = any(
                e.type == "tool_result" and getattr(e.payload, "operation_id", "") == "attacker.linger.1"
                for e in events
            )
            return ran and APPROVAL in fold(events).approvals

        wait_until(
            attacks_done,
            "the attacker's commands ran and the victim asked for approval",
            timeout=RUN_TIMEOUT_S,
            interval=0.2,
            while_running=process,
        )
        if fold(read_events(home, SESSION)).approvals[APPROVAL].decision is None:
            # What the user does with an approval they never asked for.
            subprocess.run(
                belay_command(home, "reject", SESSION, APPROVAL, "--by", "the-user"), check=True, timeout=60
            )
            # The redone step publishes nothing: the victim's turn ends without x.txt and waits on
            # the user, who ends the session there.
            ended = wait_until(
                lambda: [w.wait_id for w in fold(read_events(home, SESSION)).open_wait_records() if w.owed],
                "the victim to end its turn without x.txt",
                timeout=RUN_TIMEOUT_S,
                interval=0.2,
                while_running=process,
            )
            subprocess.run(
                belay_command(home, "reject", SESSION, ended[0], "--by", "the-user", "--reason", "not this"),
                check=True,
                timeout=60,
            )
        process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
        log.close()
    lingering = processes_with_argument(marker)
    kill_all(lingering)
    return Outcome(mode, credential, read_events(home, SESSION), lingering)


@pytest.fixture(scope="module", params=[WALLS, NO_WALLS])
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    yield run_hostile_session(str(request.param), tmp_path_factory.mktemp(str(request.param)))


def test_the_sandboxes_ran_as_the_mode_says(outcome: Outcome) -> None:
    started = [
        e.payload.detail  # type: ignore[union-attr]
        for e in outcome.events
        if e.type == "lifecycle" and e.payload.kind == "sandbox_started"  # type: ignore[union-attr]
    ]
    assert len(started) == 2
    for detail in started:
        if outcome.mode == WALLS:
            assert "walls: bubblewrap" in detail, detail
        else:
            assert "walls: NONE: switched off by BELAY_SANDBOX_WALLS=off" in detail, detail


def test_the_record_is_out_of_reach(outcome: Outcome) -> None:
    judge(outcome.mode, "SQLite format 3" in outcome.output_of("attacker.record.1"), "read the record")


def test_the_harness_environment_is_out_of_reach(outcome: Outcome) -> None:
    reversed_credential = outcome.credential[::-1]
    judge(
        outcome.mode,
        reversed_credential in outcome.output_of("attacker.environ.1"),
        "read the harness's AWS_SECRET_ACCESS_KEY from /proc",
    )


def test_belay_approve_from_a_sandbox_grants_nothing(outcome: Outcome) -> None:
    approval = fold(outcome.events).approvals[APPROVAL]
    forged = approval.decision == "granted" and approval.decided_by == "alice@example.com"
    judge(outcome.mode, forged, "approve the gated publish from inside a sandbox")
    published = "x.txt" in deliverables(outcome.events)
    assert published is forged and completed(outcome.events) is forged


def test_no_process_outlives_the_session(outcome: Outcome) -> None:
    judge(outcome.mode, bool(outcome.lingering), "leave a process running after the session ended")
