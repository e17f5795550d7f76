"""`belay`: run agent sessions on the embedded runtime and ask them where they stand.

Every command reads or writes the session record in the home directory (`--home`, `BELAY_HOME`,
default `./.belay`), or in the stores the session's manifest names (`spec.stores`) or `--events` /
`--artifacts` name; nothing here keeps state of its own. Every command first stops the sandbox
servers that attempts whose harness process is gone left running, and says so on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from belay.api.agentsession import AgentSession, ManifestError, load_manifest
from belay.cli import drilling, terminal
from belay.cli.core import artifacts as artifact_commands
from belay.cli.core import brief as brief_command
from belay.cli.core.amend import Request, children_reopened
from belay.cli.core.amend import amend as amended
from belay.cli.core.decide import (
    OnApproval,
    OnDeliverable,
    OnWait,
    OpenItems,
    collected_by_parent,
    to_answer,
    to_approve,
    to_reconcile,
    to_reject,
)
from belay.cli.core.events import event_line
from belay.cli.core.message import to_message
from belay.cli.core.report import write_page, written
from belay.cli.core.resume import nothing_to_resume
from belay.cli.failures import UserErrorsAsOneLine
from belay.cli.home import (
    Context,
    append_decision,
    decide,
    follow_brief,
    home_of,
    known_record,
    known_session,
    known_state,
    move_executor,
    print_brief,
    read_liveness,
    reject_collected_deliverable,
    reopened_after,
    stop_orphans,
)
from belay.cli.running import run_session
from belay.cli.terminal import fail
from belay.journal.claims import rejection_claim, scope_claim
from belay.journal.decisions import DecisionError, message_write, reconcile_write
from belay.journal.events import (
    Actor,
    ArtifactRef,
    Event,
    EventDraft,
    Rejection,
    ScopeChange,
)
from belay.journal.events import (
    event_line as event_json,
)
from belay.journal.phase import attempt_alive
from belay.journal.state.repeats import REPEATED_FAILURE, repeated_failure, repeated_failure_text
from belay.local.attempt_lock import attempt_lock
from belay.local.children import collect_ended_children, reopen_children, reopen_in_parent
from belay.local.drill import DEFAULT_MANIFEST, EXECUTORS, drill_executor, handover_refusal
from belay.local.fleet import LocalFleet, without_clock
from belay.local.garbage import GRACE_S, collect, duration_s, shown_size
from belay.local.record import open_session, reading
from belay.local.runtime import (
    ARTIFACTS_ENV,
    EVENTS_ENV,
    HOME_ENV,
    LocalHome,
    install_session,
    load_installed,
)
from belay.local.standin_process import stop_orphan_standins
from belay.views.briefing.build import briefing
from belay.views.briefing.render import render_change_verdicts, render_rows
from belay.views.fleet.build import fleet_view, objective_view
from belay.views.fleet.model import FleetRow
from belay.views.fleet.render import render_fleet, render_objective
from belay.views.fleet.selectors import SelectorError
from belay.views.report.build import session_report

app = typer.Typer(
    name="belay",
    help="Long-lived AI agent sessions whose record outlives every process.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=UserErrorsAsOneLine,
    context_settings=terminal.UNWRAPPED_CONTEXT,
)
console = terminal.console()
PRIVATE_UMASK = 0o077


@app.callback()
def main(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", envvar=HOME_ENV, help="Home directory of the embedded runtime (default ./.belay)."
        ),
    ] = None,
    events_url: Annotated[
        str | None,
        typer.Option(
            "--events",
            envvar=EVENTS_ENV,
            help="Event store URL (etcd://HOST:PORT/PREFIX) in place of the home's events.db.",
        ),
    ] = None,
    artifacts_url: Annotated[
        str | None,
        typer.Option(
            "--artifacts",
            envvar=ARTIFACTS_ENV,
            help="Artifact store URL (s3://BUCKET/PREFIX) in place of the home's artifacts/.",
        ),
    ] = None,
) -> None:
    # Whatever this command creates (the record, blobs, logs, liveness and stand-in files, the
    # processes it starts) is its owner's alone, whatever the umask it was started with.
    os.umask(PRIVATE_UMASK)
    ctx.with_resource(terminal.printable_output())
    Context.home = LocalHome.resolve(home, events_url, artifacts_url)
    Context.home.check()  # before any command reads or writes it; UserErrorsAsOneLine words a refusal
    Context.home.keep_private()
    stop_orphans(Context.home)


# --------------------------------------------------------------------------------------------------
# Running


@app.command()
def run(
    manifest: Annotated[Path, typer.Argument(help="An AgentSession YAML manifest.")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no briefing.")] = False,
) -> None:
    """Run a session in the foreground until it completes, then print its briefing."""
    home = Context.home
    try:
        session = install_session(home, manifest)
    except ManifestError as error:
        raise fail(f"bad manifest: {error}") from None
    with attempt_lock(home, session.session_id):
        run_installed(session.session_id, quiet)


def run_installed(session_id: str, quiet: bool) -> None:
    """`belay run` of an installed session, under its attempt lock."""
    home = Context.home
    state = asyncio.run(open_session(home_of(session_id), session_id)).state
    if state.lifecycle.completed:
        terminal.echo(
            f"session {session_id} already completed in {home.root}; its briefing follows "
            "(use another --home for a fresh run)",
            err=True,
        )
        if not quiet:
            print_brief(session_id, "text")
        return
    if state.last_seq:
        raise fail(
            f"session {session_id} already exists in {home.root}; "
            f"continue it with `belay resume {session_id}`"
        )
    run_session(session_id, quiet)


def what_to_do(session_id: str) -> str:
    """What a person can do about a repeated failure: anything that moves the point it recurs at."""
    return (
        "another attempt would end the same way, so none is started (nothing was recorded). Change "
        f"what it starts from: amend the request (`belay amend {session_id} --goal ...`), reject "
        f"the step's work (`belay reject {session_id} ITEM`), or go on with another executor "
        f"(`belay resume {session_id} --executor TYPE`); or leave the session ended here"
    )


@app.command()
def resume(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    no_ticket_service: Annotated[
        bool, typer.Option("--no-ticket-service", hidden=True, help="Drill: the tracker is unreachable.")
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            metavar="TYPE",
            help="Go on with another executor: self-hosted (scripted), openai, anthropic, "
            "openai-agents or anthropic-managed. It starts from the record, not the old executor's memory.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", metavar="ID", help="The model the executor runs.")
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why the session moves (recorded).")] = "",
) -> None:
    """Start a new harness attempt that recovers the session from its record and continues it,
    on the executor it was on or (--executor, --model) on another one. Refused, recording nothing,
    while another attempt of the session runs."""
    try:
        session = load_installed(Context.home, session_id)
    except ManifestError as error:
        raise fail(str(error)) from None
    with attempt_lock(Context.home, session_id):
        resume_installed(session, quiet, not no_ticket_service, executor, model, reason)


def resume_installed(
    session: AgentSession,
    quiet: bool,
    with_tickets: bool,
    executor: str | None,
    model: str | None,
    reason: str,
) -> None:
    """`belay resume` of an installed session, under its attempt lock."""
    session_id = session.session_id
    # The record is checked before a new attempt takes the session over (RecordCorrupt): the events
    # after the latest snapshot here, those before it when the snapshot was taken.
    state = asyncio.run(open_session(home_of(session_id), session_id)).state
    if state.children and executor is None and model is None:
        # A child redone on its own since: its new end collected before anything else is decided.
        collected = asyncio.run(collect_ended_children(home_of(session_id), session_id))
        if collected:
            if not quiet:
                terminal.echo("\n".join(collected))
            state = asyncio.run(open_session(home_of(session_id), session_id)).state
    if executor is None and model is None and (done := nothing_to_resume(state)):
        return terminal.echo(done)
    repeated = repeated_failure(state)
    if repeated is not None and executor is None and model is None:
        raise fail(f"{REPEATED_FAILURE}: {repeated_failure_text(repeated)}; {what_to_do(session_id)}")
    if executor is not None or model is not None:
        try:
            on_record = session.as_recorded(state.executor_changes)
        except ManifestError as error:
            raise fail(f"the record's last executor change cannot be used: {error}") from None
        move_executor(on_record, state, executor or on_record.spec.executor.type, model, reason)
    run_session(session_id, quiet, with_ticket_service=with_tickets, collect_after=True)


# --------------------------------------------------------------------------------------------------
# Reading the record


WATCH_INTERVAL_S = 1.0

Selector = Annotated[
    str,
    typer.Option("--selector", "-l", help="Only sessions whose manifest labels match (k=v, k!=v, k, !k)."),
]


@app.command()
def sessions(
    as_json: Annotated[bool, typer.Option("--json", help="Rows and summary as JSON.")] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Print again whenever a session moves on, until Ctrl-C.")
    ] = False,
    selector: Selector = "",
) -> None:
    """Every session in this home: phase, what it waits on (you, an external condition, your
    review), the command that unblocks it, deliverables, age of the last event; and a summary."""

    def show(rows: list[FleetRow]) -> str:
        view = fleet_view(rows)
        return view.model_dump_json() if as_json else render_fleet(view, where=str(Context.home.root))

    _show_fleet(selector, show, watch)


@app.command()
def objective(
    name: Annotated[
        str,
        typer.Argument(
            metavar="OBJECTIVE",
            help="The belay.dev/objective label value (or an unlabelled coordinator's name).",
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w")] = False,
) -> None:
    """The sessions that serve one objective (label belay.dev/objective): each one's part and
    deliverables, and what the whole waits on."""

    def show(rows: list[FleetRow]) -> str:
        view = objective_view(name, rows)
        return view.model_dump_json() if as_json else render_objective(view)

    # Every session: with none labelled, it is the coordinator of that name and its children.
    _show_fleet("", show, watch)


def _show_fleet(selector: str, show: Callable[[list[FleetRow]], str], watch: bool) -> None:
    """Print the fleet once, or (watching) again whenever a row changes; a corrupt record ends a
    one-off listing with its error after the others are shown."""
    fleet = LocalFleet(Context.home, selector)
    try:
        rows = asyncio.run(fleet.rows())
    except SelectorError as error:
        raise fail(f"--selector: {error}") from None
    sys.stdout.write(show(rows) + "\n")
    sys.stdout.flush()
    if watch:
        shown = without_clock(rows)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(WATCH_INTERVAL_S)
                rows = asyncio.run(fleet.rows())
                if without_clock(rows) != shown:
                    shown = without_clock(rows)
                    sys.stdout.write(show(rows) + "\n")
                    sys.stdout.flush()
        return
    # The other sessions are listed; each corrupt record also ends the command with its error.
    for corrupt in fleet.corrupt.values():
        terminal.echo(f"error: {corrupt}", err=True)
    if fleet.corrupt:
        raise typer.Exit(1)


@app.command()
def brief(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    as_json: Annotated[bool, typer.Option("--json", help="The briefing as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="The briefing as Markdown.")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print it again as the session moves on, until it ends.")
    ] = False,
) -> None:
    """What was asked, what is done and verified, what waits on you, what is ready for review."""
    style = "json" if as_json else "markdown" if markdown else "text"
    if follow:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(follow_brief(session_id, "json-lines" if as_json else style))
    else:
        print_brief(session_id, style)


@app.command()
def events(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    from_seq: Annotated[int, typer.Option("--from", help="First seq to print.")] = 1,
) -> None:
    """The session's events, in order."""

    known_session(session_id)

    async def read() -> list[Event]:
        async with reading(home_of(session_id)) as store:
            return await store.read(session_id, from_seq=max(from_seq, 1))

    for event in asyncio.run(read()):
        if as_json:
            sys.stdout.write(event_json(event) + "\n")
        else:
            # Never wrapped: a wrapped line could start with whatever an event's text puts there.
            terminal.echo(event_line(event))


@app.command()
def report(
    session_ids: Annotated[
        list[str], typer.Argument(metavar="SESSION...", help="A session, or the sessions of one objective.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write the page (default ./SESSION-report.html)."),
    ] = None,
) -> None:
    """A timeline of the session as one HTML file that opens without a network: per subagent its
    steps, tool calls, checkpoints, waits and approvals, the interruptions and recoveries, the
    briefing beside it, and how to fetch each deliverable. Several sessions share one time axis."""

    def locator(session_id: str) -> Callable[[ArtifactRef], str | None]:
        home = home_of(session_id)
        store = home.open_artifact_store()

        def locate(ref: ArtifactRef) -> str | None:
            if not store.exists(ref.sha256):
                return None
            where = store.location(ref.sha256)
            return where if home.artifacts_url else Path(where).as_uri()  # a presigned URL, or a file

        return locate

    reports = []
    for session_id in dict.fromkeys(session_ids):
        opened, events = known_record(session_id)
        state, liveness = opened.state, opened.liveness
        children = asyncio.run(brief_command.children_of(home_of(session_id), state))
        rows = render_rows(brief_command.of_home(home_of(session_id), state, liveness, children))
        reports.append(
            session_report(events, state, liveness=liveness, briefing=rows, locate=locator(session_id))
        )
    target, size = write_page(reports, output)
    terminal.echo(written(target, size), err=True)


# --------------------------------------------------------------------------------------------------
# Deciding


def _decided_id(target: OnApproval | OnWait) -> str:
    return target.approval.approval_id if isinstance(target, OnApproval) else target.wait.wait_id


@app.command()
def approve(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    item_id: Annotated[
        str, typer.Argument(metavar="ID", help="An approval id (or its operation id), or a wait id.")
    ],
    reason: Annotated[str, typer.Option("--reason", "-m")] = "",
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Approve one pending operation (bound to its payload hash), or answer yes to a wait."""
    state = known_state(session_id)
    target = to_approve(OpenItems.of_state(state), item_id)
    console.print(decide(state, _decided_id(target), True, reason, by), highlight=False)


@app.command()
def reject(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    item_id: Annotated[
        str, typer.Argument(metavar="ID", help="A deliverable, an approval id, or a wait id.")
    ],
    reason: Annotated[
        str, typer.Option("--reason", "-m", help="Why: whoever redoes the step reads it.")
    ] = "",
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Reject a published deliverable or a pending operation: the step that made it is redone
    with your reason. Or answer no to a wait."""
    state = known_state(session_id)
    target = to_reject(OpenItems.of_state(state), item_id, reason)
    if isinstance(target, OnDeliverable) and state.parent is not None:
        # Bytes its coordinator collected are turned down at the coordinator, which collects anew.
        parent = known_state(state.parent.session)
        through = collected_by_parent(target, session_id, OpenItems.of_state(parent))
        if through is not None:
            session_id, state, target = parent.session_id, parent, through
    # Plain echo, never wrapped: the output names commands to copy.
    if isinstance(target, OnDeliverable) and target.child:
        outcome = reject_collected_deliverable(session_id, target, by)
    elif isinstance(target, OnDeliverable):
        named = target.deliverable
        rejection = Rejection(name=named.name, sha256=named.sha256, reason=target.reason, by=by)
        drafts = [EventDraft(payload=rejection, actor=Actor(kind="user", name=by))]
        append_decision(session_id, drafts, rejection_claim(named.name, named.sha256))
        outcome = f"rejected {named.name} (sha256 {named.sha256})"
    else:
        outcome = decide(state, _decided_id(target), False, reason, by)
    terminal.echo(outcome + reopened_after(session_id, state.last_seq))


@app.command()
def amend(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    goal: Annotated[str | None, typer.Option("--goal", help="The new goal.")] = None,
    parts: Annotated[
        list[str] | None, typer.Option("--part", metavar="KEY=VALUE", help="Set a request part (repeatable).")
    ] = None,
    removed: Annotated[
        list[str] | None,
        typer.Option("--remove-part", metavar="KEY", help="Drop a request part (repeatable)."),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Take the whole request (spec.request) from a manifest."),
    ] = None,
    summary: Annotated[str, typer.Option("--summary", "-m", help="One line on why.")] = "",
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Change the request: record request version N+1. The work that depended on what changed
    becomes invalid and is redone; the rest is reused."""
    state = known_state(session_id)
    if state.request.version == 0:
        raise fail(f"session {session_id} has no request recorded yet")
    old = state.request
    change = amended(
        Request(old.goal, old.parts),
        old.version,
        goal=goal,
        parts=parts or [],
        removed=removed or [],
        manifest=manifest,
    )
    version = old.version + 1
    scope_change = ScopeChange(
        request_version=version,
        summary=summary.strip() or "changed " + ", ".join(change.touched),
        goal=change.request.goal if change.goal_changed else None,
        changed_parts=change.changed_parts,
        removed_parts=change.removed_parts,
        by=by,
    )
    drafts = [EventDraft(payload=scope_change, actor=Actor(kind="user", name=by))]
    append_decision(session_id, drafts, scope_claim(version))
    children = asyncio.run(reopen_children(home_of(session_id), session_id, by))
    coordinator = asyncio.run(reopen_in_parent(home_of(session_id), session_id, by))
    after = known_state(session_id)
    recorded = briefing(after).scope_changes[-1]
    lines = [f"recorded request v{version} of {session_id} ({', '.join(change.touched)} changed, by {by})"]
    if after.children:
        lines.append(children_reopened(after, children, change.touched))
    # What the page says under this change, the same rows (belay.views.briefing.render).
    lines.append(render_change_verdicts(recorded))
    if recorded.invalid_steps or recorded.invalid_outputs:
        lines.append(
            f"a running harness takes it from here; otherwise continue with `belay resume {session_id}`"
        )
    elif not recorded.invalidated_count:
        lines.append("nothing recorded so far depended on it")
    if coordinator:
        lines.append(
            f"its coordinator {coordinator} no longer counts what it collected from {session_id}; "
            f"`belay resume {coordinator}` runs it again and collects its new end"
        )
    terminal.echo("\n".join(lines))


@app.command()
def reconcile(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    operation_id: Annotated[str, typer.Argument(metavar="OPERATION")],
    succeeded: Annotated[
        bool | None, typer.Option("--succeeded/--failed", help="Did the operation take effect?")
    ] = None,
    detail: Annotated[str, typer.Option("--detail", "-m")] = "",
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Settle an operation whose outcome is unknown: it took effect (--succeeded) or not (--failed)."""
    if succeeded is None:
        raise fail("say whether it took effect: --succeeded or --failed")
    state = known_state(session_id)
    to_reconcile(OpenItems.of_state(state), operation_id)
    try:
        write = reconcile_write(state, operation_id, succeeded, detail, by)
    except DecisionError as error:
        raise fail(str(error)) from None
    append_decision(session_id, list(write.drafts), write.claim)
    console.print(write.outcome, highlight=False, markup=False)


@app.command()
def answer(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    wait_id: Annotated[str, typer.Argument(metavar="WAIT")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Answer a wait on the user with text; the session goes on."""
    state = known_state(session_id)
    wait = to_answer(OpenItems.of_state(state), wait_id)
    console.print(decide(state, wait.wait_id, True, text, by), highlight=False, markup=False)


@app.command()
def message(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    text: Annotated[str, typer.Argument(help="What the subagent is told: its next turn.")],
    to: Annotated[
        str | None,
        typer.Option(
            "--to", metavar="SUBAGENT", help="The subagent, when more than one waits for a message."
        ),
    ] = None,
    by: terminal.DecidedBy = terminal.PERSON,
) -> None:
    """Send a message to a subagent whose turn ended without its deliverable: its next user turn (a
    user message to its remote session on a managed executor). It goes on from there."""
    state = known_state(session_id)
    wait = to_message(OpenItems.of_state(state), to)
    try:
        write = message_write(state, wait.wait_id, text, by)
    except DecisionError as error:
        raise fail(str(error)) from None
    append_decision(session_id, list(write.drafts), write.claim)
    alive = attempt_alive(state, read_liveness(session_id))
    then = "the running harness takes it from here" if alive else f"continue with `belay resume {session_id}`"
    terminal.echo(f"{write.outcome}; {then}")


# --------------------------------------------------------------------------------------------------
# Artifacts


@app.command()
def artifacts(
    words: Annotated[list[str], typer.Argument(metavar="SESSION | get SESSION NAME")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where `get` writes the bytes.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The list as JSON.")] = False,
) -> None:
    """List a session's artifacts, or `artifacts get SESSION NAME [-o PATH]` to download one
    (without -o, to ./NAME; NAME may be `sha256:HASH` for any blob the record names)."""
    if words[0] == "get":
        if len(words) != 3:
            raise fail("usage: belay artifacts get SESSION NAME [-o PATH]")
        _get_artifact(words[1], words[2], output)
        return
    if len(words) != 1:
        raise fail("usage: belay artifacts SESSION  |  belay artifacts get SESSION NAME [-o PATH]")
    state = known_state(words[0])
    store = home_of(words[0]).open_artifact_store()
    where = {
        sha256: store.location(sha256)
        for sha256 in {record.ref.sha256 for record in state.artifacts.values()}
        if store.exists(sha256)
    }
    rows = artifact_commands.rows_of_state(state, where)
    terminal.echo(artifact_commands.render(words[0], rows, as_json))


def _get_artifact(session_id: str, name: str, output: Path | None) -> None:
    state = known_state(session_id)
    found = artifact_commands.download(
        session_id,
        name,
        output,
        artifacts={n: record.ref.sha256 for n, record in state.artifacts.items()},
        blobs=artifact_commands.blobs_named(state),
    )
    data = home_of(session_id).open_artifact_store().get(found.sha256)
    artifact_commands.write_output(found.target, data)
    terminal.echo(f"wrote {found.target} ({len(data)} bytes, sha256 {found.sha256})", err=True)


# --------------------------------------------------------------------------------------------------
# Garbage


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")] = False,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            metavar="DURATION",
            help="How old a blob no record names must be to go (e.g. 0, 90s, 30m, 12h, 7d).",
        ),
    ] = f"{GRACE_S / 3600:g}h",
) -> None:
    """Remove what no record of the home needs: partial uploads, blobs no record names (older than
    the grace period), and superseded sandbox workspaces (also done after every `belay resume`);
    and stop the local stand-ins whose `belay` process is gone. Refused, removing nothing, while a
    record the home shows cannot be read."""
    try:
        grace_s = duration_s(grace)
    except ValueError as error:
        raise fail(f"--grace: {error}") from None
    collected = asyncio.run(collect(Context.home, dry_run=dry_run, grace_s=grace_s))
    for item in collected.removed:
        sys.stdout.write(f"{item.kind}: {item.path} ({shown_size(item.size)})\n")
    for directory in stop_orphan_standins(Context.home.root, dry_run=dry_run):
        verb = "would stop" if dry_run else "stopped"
        sys.stdout.write(f"orphan stand-in: {directory} ({verb}: the belay process that used it is gone)\n")
    sys.stdout.write(collected.summary("would remove" if dry_run else "removed") + "\n")
    if collected.live_attempt:
        terminal.echo("belay: an attempt is running: what was written since it started was kept", err=True)
    for note in collected.notes:
        terminal.echo(f"belay: {note}", err=True)


# --------------------------------------------------------------------------------------------------
# The interruption drill


@app.command()
def drill(
    manifest: Annotated[Path | None, typer.Argument(help="Default: examples/parser-fix/session.yaml")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="self-hosted (the plan as a scripted model), openai-agents or anthropic-managed (against "
            "the local stand-in). Default: the manifest's own.",
        ),
    ] = None,
    handover_to: Annotated[
        str | None,
        typer.Option(
            "--handover-to",
            metavar="EXECUTOR",
            help="Resume each interrupted run on this executor (`belay resume --executor`), another one "
            "of the three, and check the handover too.",
        ),
    ] = None,
    answer_waits: Annotated[
        bool,
        typer.Option(
            "--answer-waits",
            help="Answer the waits that decide nothing as a person would (an external condition met, a "
            "question answered with a neutral text) instead of stopping at them.",
        ),
    ] = False,
    change: Annotated[
        bool,
        typer.Option(
            "--change",
            help="Change the request instead of only killing: amend while a step runs, amend after the "
            "end, reject a deliverable after the end; each resumed and checked against an uninterrupted "
            "run of the final request.",
        ),
    ] = False,
    change_goal: Annotated[
        str | None,
        typer.Option(
            "--change-goal",
            metavar="TEXT",
            help="With --change: the goal the amend sets. Default (no --change-part either): the goal "
            "with a sentence added.",
        ),
    ] = None,
    change_parts: Annotated[
        list[str] | None,
        typer.Option(
            "--change-part", metavar="KEY=VALUE", help="With --change: a request part the amend sets."
        ),
    ] = None,
    reject: Annotated[
        str | None,
        typer.Option(
            "--reject",
            metavar="DELIVERABLE",
            help="With --change: the deliverable to reject. Default: the first one the subagents owe "
            "whose publication asked for no approval.",
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Run the task on self-hosted and on a managed executor (--executor; default the "
            "manifest's own, or openai-agents), each killed at the same point and resumed, and print "
            "one table of measured figures per side.",
        ),
    ] = False,
) -> None:
    """Interrupt a short session on purpose and check that the resumed session makes sense."""
    path, workdir = manifest or DEFAULT_MANIFEST, Context.home.root / "drill"
    if executor is not None and executor not in EXECUTORS:
        raise fail(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    try:
        session = load_manifest(path)
    except ManifestError as error:
        raise fail(f"bad manifest: {error}") from None
    if not change and (change_goal is not None or change_parts or reject is not None):
        raise fail("--change-goal, --change-part and --reject go with --change")
    if change and (compare or handover_to):
        raise fail("--change runs on one executor: drop --compare and --handover-to")
    if change:
        asked = drilling.ChangeAsked(change_goal, change_parts or [], reject)
        drilling.change(path, workdir, asked, executor, answer_waits, as_json)
        return
    if compare:
        if executor == "self-hosted":
            raise fail("--compare runs self-hosted beside a managed executor: name one with --executor")
        own = drill_executor(session.spec.executor.type)
        managed = executor or ("openai-agents" if own == "self-hosted" else own)
        drilling.compare(path, workdir, managed, as_json)
        return
    refusal = handover_refusal(executor or drill_executor(session.spec.executor.type), handover_to)
    if refusal:
        raise fail(refusal)
    drilling.interruption(path, workdir, executor, handover_to, answer_waits, as_json)


if __name__ == "__main__":
    app()
