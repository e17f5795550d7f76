"""A run the drill waits for: to its end (or to the point of its record where the drill kills it),
unless it waits on someone or runs past its limit.

No person answers during a drill, so a `belay run` or `belay resume` that waits on one (an
approval the manifest does not cover, a question, an outcome to reconcile) or on an external
condition (`wait_on_external`) would wait forever; and a run that does not end within its limit
is not going to. Either is stopped (its process group killed, as a person's Ctrl-C would not be),
and the run ends with `stalled` saying what it waited on and the exact command that answers it in
the drill's home, for the check that fails with it.

With `answer_waits` (`belay drill --answer-waits`) the drill answers the waits a person answers
without deciding anything, as a person would: an external condition is marked met (`belay approve
SESSION WAIT`) and a question gets a neutral answer (`belay answer SESSION WAIT TEXT`); the run
goes on and `answered` names each; so does an approval that asks for the very bytes granted to the
same step in an earlier round (a change reopened the step and its redone call sends what was
approved). Any other approval, an outcome to reconcile or a turn that ended without its deliverable
are decisions the drill never takes for the person: they stop the run as before.
A wait on a child session is not a stall: the child is working, and the drill watches the
child's record too (the waits there are named, or answered, the same way).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from belay.harness.attempt import fault_key
from belay.journal import commands
from belay.journal.events import CHILD_CONDITION_PREFIX, Event, ToolRequestEvent
from belay.journal.state import SessionState, fold
from belay.local.cli_process import RUN_TIMEOUT_S, is_stopped, kill_group, read_events, run_belay, start_belay
from belay.views.briefing.build import briefing_sections

# A run waiting on the person with nothing recorded for this long gets no answer: a grant in the
# manifest is recorded milliseconds after the request it covers.
WAIT_QUIET_S = 3.0
POLL_S = 0.2
KILL_POLL_S = 0.01  # a kill from outside at a point of a record: as soon as it is read there
# What the drill answers a question with under `--answer-waits`: it decides nothing.
NEUTRAL_ANSWER = "No preference: go on as you see fit."
APPROVED_BEFORE = "The same bytes were approved for this step before the change."


@dataclass(frozen=True)
class Watched:
    """How a watched run ended, in the terms of `subprocess.CompletedProcess` the checks read."""

    returncode: int
    stdout: str
    stderr: str  # what the process printed (its log in the home)
    stalled: str = ""  # why the drill stopped it, with the command that answers it; "" if it ended
    reached: bool = False  # with `stop_after`: the run recorded that point and was killed there
    answered: tuple[str, ...] = ()  # with `answer_waits`: each wait answered, with the command run


class Stalled(Exception):
    """A run the drill had to stop before the point it was to be killed at: the message says what
    it waited on and the command that answers it."""


@dataclass(frozen=True)
class OpenWait:
    """A wait the record holds open for someone outside the run."""

    text: str  # what it waits on, with the command that answers it in the drill's home
    external: bool  # an external condition, not the person
    answer: tuple[str, ...] = ()  # the `belay` arguments that answer it without deciding anything


def in_home(home: Path) -> commands.CommandStyle:
    """A command as a person runs it against the drill's home."""
    return lambda command: command.replace(commands.LOCAL_CLI, f"belay --home {home} ", 1)


def open_waits(events: Sequence[Event], home: Path) -> list[OpenWait]:
    """What the record waits on a person or an external condition for, each with the command that
    answers it, and how the drill answers it when it may (`--answer-waits`)."""
    state = fold(events)
    sid = state.session_id
    sections = briefing_sections(state, style=in_home(home))
    waits: list[OpenWait] = []
    for item in sections.waiting_on_you:
        question = item.kind == "decision" and item.id in state.waits
        answer: tuple[str, ...] = ()
        if question:
            answer = ("answer", sid, item.id, NEUTRAL_ANSWER)
        elif approved_before(state, item.id):
            answer = ("approve", sid, item.id, "-m", APPROVED_BEFORE)
        waits.append(
            OpenWait(
                text=f"{item.kind} {item.id}: {item.summary}"
                + (f", payload sha256 {item.payload_sha256}" if item.payload_sha256 else "")
                + f": `{item.command}`",
                external=False,
                answer=answer,
            )
        )
    for external in sections.waiting_on_external:
        if (external.condition or "").startswith(CHILD_CONDITION_PREFIX):
            continue  # the child session works on it
        condition = f" (condition {external.condition})" if external.condition else ""
        waits.append(
            OpenWait(
                text=f"external wait {external.wait_id}: {external.reason}{condition}: `{external.command}`",
                external=True,
                answer=("approve", sid, external.wait_id),
            )
        )
    return waits


def approved_before(state: SessionState, approval_id: str) -> bool:
    """Whether a pending approval asks for the very bytes granted to the same step in an earlier
    round (a change reopened the step, and its redone call sends what was approved): approving it
    decides nothing new."""
    asked = state.approvals.get(approval_id)
    operation = state.operations.get(asked.operation_id) if asked is not None else None
    if asked is None or not asked.pending or operation is None or operation.step is None:
        return False
    for earlier in state.approvals.values():
        granted = state.operations.get(earlier.operation_id)
        if (
            earlier.decision == "granted"
            and granted is not None
            and granted.step == operation.step
            and earlier.operation_id != asked.operation_id
            and (earlier.decision_payload_sha256 or earlier.payload_sha256) == asked.payload_sha256
        ):
            return True
    return False


def child_sessions(events: Sequence[Event]) -> list[str]:
    """The child sessions the record started (`start_session`), in order."""
    return [
        str(e.payload.arguments.get("name"))
        for e in events
        if isinstance(e, ToolRequestEvent) and e.payload.tool == "start_session"
    ]


def waiting_on_person(events: Sequence[Event], home: Path) -> str:
    """What the record waits on a person or an external condition for, each with the command that
    answers it; "" if nothing."""
    return "; ".join(wait.text for wait in open_waits(events, home))


def stall_reason(args: Sequence[str], waits: Sequence[OpenWait], answering: bool) -> str:
    on = "an external condition" if all(w.external for w in waits) else "the person"
    hint = "" if answering or not any(w.answer for w in waits) else " (or drill with --answer-waits)"
    return f"`belay {' '.join(args)}` waited on {on}: {'; '.join(w.text for w in waits)}{hint}"


def answer(home: Path, wait: OpenWait, environment: Mapping[str, str] | None) -> str:
    """Answer `wait` as a person would; what was run, and its outcome when it failed."""
    result = run_belay(home, *wait.answer, environment=environment)
    ran = f"`{in_home(home)(commands.LOCAL_CLI + shlex.join(wait.answer))}`"
    if result.returncode != 0:
        raise Stalled(f"{ran} failed: {(result.stderr or result.stdout).strip()[-300:]}")
    return ran


def run_watched(
    home: Path,
    args: Sequence[str],
    session_id: str,
    *,
    environment: Mapping[str, str] | None = None,
    timeout: float = RUN_TIMEOUT_S,
    quiet_s: float = WAIT_QUIET_S,
    stop_after: str | None = None,
    kill_when: tuple[str, str] | None = None,
    answer_waits: bool = False,
) -> Watched:
    """`belay ARGS` in `home` to its end, or with `stop_after` until it records that point, or with
    `kill_when` (a session, a point) until that session's record holds the point (then its process
    group is killed: `reached`); stopped when it waits on someone (nothing recorded for `quiet_s`
    in its record or its children's while one of them waits on a person or an external condition,
    and the drill does not answer it) or runs past `timeout`."""
    log = home / "belay.log"
    offset = log.stat().st_size if log.exists() else 0
    process = start_belay(home, *args, stop_after=stop_after, environment=environment)
    started = time.monotonic()
    length, changed = -1, started
    stalled, reached = "", False
    answered: list[str] = []
    while process.poll() is None:
        time.sleep(POLL_S if kill_when is None else KILL_POLL_S)
        if stop_after and is_stopped(process.pid):  # the harness stopped itself at the point
            kill_group(process)
            reached = True
            break
        if kill_when and any(fault_key(e) == kill_when[1] for e in read_events(home, kill_when[0])):
            kill_group(process)
            reached = True
            break
        events = read_events(home, session_id)
        records = [events, *(read_events(home, child) for child in child_sessions(events))]
        now = time.monotonic()
        if sum(map(len, records)) != length:
            length, changed = sum(map(len, records)), now
        quiet = now - changed >= quiet_s
        waits = [w for record in records if record and quiet for w in open_waits(record, home)]
        if waits and answer_waits and all(w.answer for w in waits):
            try:
                answered += [answer(home, w, environment) for w in waits]
            except Stalled as error:
                stalled = str(error)
            else:
                changed = time.monotonic()
                continue
        elif waits:
            stalled = stall_reason(args, waits, answer_waits)
        if not stalled and now - started > timeout:
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
    return Watched(
        returncode=returncode,
        stdout="",
        stderr=output,
        stalled=stalled,
        reached=reached,
        answered=tuple(answered),
    )
