"""A run the drill waits for: to its end, unless it waits on a person or runs past its limit.

No person answers during a drill, so a `belay run` or `belay resume` that waits on one (an
approval the manifest does not cover, a question, an outcome to reconcile) would wait forever; and
a run that does not end within its limit is not going to. Either is stopped (its process group
killed, as a person's Ctrl-C would not be), and the run ends with `stalled` saying what it waited
on and the exact command that answers it in the drill's home, for the check that fails with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from belay.harness.attempt import fault_key
from belay.journal import commands
from belay.journal.events import Event
from belay.journal.state import fold
from belay.local.cli_process import RUN_TIMEOUT_S, kill_group, read_events, start_belay
from belay.views.briefing.build import briefing_sections

# A run waiting on the person with nothing recorded for this long gets no answer: a grant in the
# manifest is recorded milliseconds after the request it covers.
WAIT_QUIET_S = 3.0
POLL_S = 0.2


@dataclass(frozen=True)
class Watched:
    """How a watched run ended, in the terms of `subprocess.CompletedProcess` the checks read."""

    returncode: int
    stdout: str
    stderr: str  # what the process printed (its log in the home)
    stalled: str = ""  # why the drill stopped it, with the command that answers it; "" if it ended


def in_home(home: Path) -> commands.CommandStyle:
    """A command as a person runs it against the drill's home."""
    return lambda command: command.replace(commands.LOCAL_CLI, f"belay --home {home} ", 1)


def waiting_on_person(events: Sequence[Event], home: Path) -> str:
    """What the record waits on a person for, each with the command that answers it; "" if nothing."""
    sections = briefing_sections(fold(events), style=in_home(home))
    return "; ".join(
        f"{item.kind} {item.id}: {item.summary}"
        + (f", payload sha256 {item.payload_sha256}" if item.payload_sha256 else "")
        + f": `{item.command}`"
        for item in sections.waiting_on_you
    )


def run_watched(
    home: Path,
    args: Sequence[str],
    session_id: str,
    *,
    environment: Mapping[str, str] | None = None,
    timeout: float = RUN_TIMEOUT_S,
    quiet_s: float = WAIT_QUIET_S,
) -> Watched:
    """`belay ARGS` in `home` to its end; stopped when it waits on a person (nothing recorded for
    `quiet_s` while the record waits on one) or runs past `timeout`."""
    log = home / "belay.log"
    offset = log.stat().st_size if log.exists() else 0
    process = start_belay(home, *args, environment=environment)
    started = time.monotonic()
    length, changed = -1, started
    stalled = ""
    while process.poll() is None:
        time.sleep(POLL_S)
        events = read_events(home, session_id)
        now = time.monotonic()
        if len(events) != length:
            length, changed = len(events), now
        waiting = waiting_on_person(events, home) if now - changed >= quiet_s else ""
        if waiting:
            stalled = f"`belay {' '.join(args)}` waited on the person: {waiting}"
        elif now - started > timeout:
            last = f", the last {fault_key(events[-1])}" if events else ""
            stalled = (
                f"`belay {' '.join(args)}` ran past its limit of {timeout:.0f} s (the record ends at seq "
                f"{len(events)}{last}); where it stands: `{in_home(home)(commands.brief(session_id))}`"
            )
        if stalled:
            if process.poll() is None:
                kill_group(process)
            else:
                stalled = ""  # it ended by itself meanwhile
            break
    returncode = process.wait()
    output = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
    return Watched(returncode=returncode, stdout="", stderr=output, stalled=stalled)
