"""An external effect that fails after reconciliation does not pass silently: `create_ticket`'s
outcome is lost with the harness, the person reconciles it as never having taken effect, it is
issued again and fails (the tracker is unreachable). The session does not end `Succeeded`: it
waits on the person, and the brief shows the failure under "Needs attention" with what to do.
Retried once the tracker is back, the ticket is made once, and the brief lists it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.belay_cli import completed, kill_group, run_belay, run_until, start_belay, tickets_in
from tests.harness.example import MANIFEST, SESSION, brief_json, wait_for

pytestmark = pytest.mark.slow

TICKET = "researcher.diagnose.4"
RETRY = f"retry-{TICKET}"


def test_a_ticket_that_fails_after_reconciliation_waits_on_the_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    reached, _ = run_until(home, ["run", "--quiet", str(MANIFEST)], f"tool_request:{TICKET}")
    assert reached

    # The tracker cannot be asked: the outcome stays unknown until the person says it never took
    # effect; then the ticket is issued again, and the tracker is still unreachable.
    process = start_belay(home, "resume", "--quiet", "--no-ticket-service", SESSION)
    try:
        wait_for(
            home,
            lambda es: any(getattr(e.payload, "wait_id", "") == f"reconcile-{TICKET}" for e in es),
            "wait",
        )
        unknown = brief_json(home)
        assert [(n["kind"], n["id"]) for n in unknown["needs_attention"]] == [("unknown_effect", TICKET)]
        assert unknown["needs_attention"][0]["command"] == f"belay reconcile {SESSION} {TICKET} --succeeded"
        reconciled = run_belay(home, "reconcile", SESSION, TICKET, "--failed", "-m", "no such ticket")
        assert reconciled.returncode == 0, reconciled.stderr
        wait_for(home, lambda es: any(getattr(e.payload, "approval_id", "") == RETRY for e in es), RETRY)

        brief = brief_json(home)
        assert brief["phase"] == "WaitingOnUser"
        [attention] = brief["needs_attention"]
        assert (attention["kind"], attention["id"]) == ("failed_effect", TICKET)
        assert "no ticket service is configured" in attention["summary"]
        assert attention["command"].startswith(f"belay approve {SESSION} {RETRY}")
        assert attention["alternative"].startswith(f'belay reject {SESSION} {RETRY} --reason "..."')
        [effect] = brief["effects"]
        assert (effect["operation_id"], effect["outcome"]) == (TICKET, "failed")
        text = run_belay(home, "brief", SESSION).stdout
        attention_text = text.split("Needs attention")[1].split("\n\n")[0]
        assert f"failed effect {TICKET}: create_ticket ({TICKET}) failed and took no effect" in attention_text
        assert f"run: belay approve {SESSION} {RETRY}" in attention_text
    finally:
        kill_group(process)

    # Killed while it waited: still not Succeeded, still shown, nothing filed.
    events = wait_for(home, lambda es: True, "anything")
    assert not completed(events) and tickets_in(home, SESSION) == 0
    assert "failed effect" in run_belay(home, "brief", SESSION).stdout.split("Needs attention")[1]

    # The tracker is back: the person asks for one more try, and the session completes.
    assert run_belay(home, "approve", SESSION, RETRY, "--by", "dana").returncode == 0
    resumed = run_belay(home, "resume", "--quiet", SESSION)
    assert resumed.returncode == 0, resumed.stderr
    assert tickets_in(home, SESSION) == 1
    final = brief_json(home)
    assert final["phase"] == "Succeeded" and final["needs_attention"] == []
    [effect] = final["effects"]
    assert (effect["outcome"], effect["ref"]) == ("made", "TICKET-1")
    assert (
        "made    create_ticket researcher.diagnose.4 -> TICKET-1 at "
        in run_belay(home, "brief", SESSION).stdout
    )
