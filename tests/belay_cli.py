"""What the tests use to drive `belay` and judge what it recorded, from one place.

Most pieces are the drill's own: running the command line as a process group and stopping it at
a point of its record (`belay.local.cli_process`) or until it waits on a person
(`belay.local.drill.waiting`), a provider's stand-in as a process
(`belay.local.standin_process`: a test's own, or the one `belay run` started for a session), the
session moved to another executor (`belay.local.drill`), and the judgments of a record
(`belay.journal.verdicts`). Three are the tests' alone: every point of a record a run can be
interrupted at, the wait for a run to stop itself at its point, and the session's stand-in found
in a home."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from belay.harness.attempt import fault_key
from belay.journal.events import CheckpointEvent, Event, ToolRequestEvent
from belay.journal.verdicts import (
    attempts,
    completed,
    deliverables,
    deliveries,
    remote_sessions,
    steps_run_twice,
)
from belay.local.cli_process import (
    RUN_TIMEOUT_S,
    belay_command,
    belay_environment,
    is_stopped,
    kill_group,
    read_events,
    run_belay,
    run_until,
    start_belay,
    tickets_in,
)
from belay.local.drill.manifest import DEFAULT_MANIFEST, manifest_for
from belay.local.drill.waiting import run_watched
from belay.local.runtime import LocalHome
from belay.local.standin_process import StandinProcess, provider_problems, stop_session_standins
from tests.testenv.polling import wait_until


def interruption_points(events: Sequence[Event]) -> list[str]:
    """Every step boundary (checkpoint) and every gap between a tool request and its result."""
    return [
        fault_key(e)
        for e in events
        if isinstance(e, ToolRequestEvent)
        or (isinstance(e, CheckpointEvent) and not e.payload.checkpoint_id.endswith("/inputs"))
    ]


def session_standin(home: Path, session_id: str, executor: str) -> StandinProcess | None:
    """The stand-in `belay run` started for the session in `home`, found as `belay resume` finds
    it; None when it is not running."""
    return StandinProcess.found(executor, LocalHome(home).standin_dir(session_id, executor))


def wait_until_stopped(process: subprocess.Popen[bytes], point: str, timeout: float = RUN_TIMEOUT_S) -> None:
    """Until the harness of `process`, started with `stop_after=point`, has stopped itself there."""
    wait_until(
        lambda: is_stopped(process.pid),
        f"the run to stop itself at {point}",
        timeout=timeout,
        interval=0.005,
        while_running=process,
    )


__all__ = [
    "DEFAULT_MANIFEST",
    "RUN_TIMEOUT_S",
    "StandinProcess",
    "attempts",
    "belay_command",
    "belay_environment",
    "completed",
    "deliverables",
    "deliveries",
    "failed_checks",
    "interruption_points",
    "is_stopped",
    "kill_group",
    "manifest_for",
    "provider_problems",
    "read_events",
    "remote_sessions",
    "run_belay",
    "run_until",
    "run_watched",
    "session_standin",
    "start_belay",
    "steps_run_twice",
    "stop_session_standins",
    "tickets_in",
    "wait_until_stopped",
]


def failed_checks(failed: list[dict[str, Any]]) -> str:
    """A drill's failed checks in full, one per line: pytest's repr of the list would cut each
    detail in the middle, where the step or deliverable it names is."""
    return "\n".join(f"FAIL {check['name']}: {check['detail']}" for check in failed)
