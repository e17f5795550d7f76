"""`belay`: run agent sessions on the embedded runtime and ask them where they stand.

Every command reads or writes the session record in the home directory (`--home`, `BELAY_HOME`,
default `./.belay`), or in the stores the session's manifest names (`spec.stores`) or `--events` /
`--artifacts` name; nothing here keeps state of its own. Every command first stops the sandbox
servers that attempts whose harness process is gone left running, and says so on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from belay.api.agentsession import ManifestError, is_plain_file_name, load_manifest
from belay.cli import terminal
from belay.harness.attempt import HarnessResult
from belay.harness.stopping import StopRequest
from belay.journal.decisions import DecisionError, decision_write, reconcile_write
from belay.journal.events import (
    Actor,
    Approval,
    ArtifactRef,
    Event,
    EventDraft,
    OperationOutcome,
    Rejection,
    ScopeChange,
    Wait,
    event_line,
    rejection_claim,
    scope_claim,
)
from belay.journal.state import SessionState
from belay.journal.status import Liveness, Phase, phase_of
from belay.local.liveness import local_liveness, observed_sandboxes, reap_orphans
from belay.local.runtime import (
    ARTIFACTS_ENV,
    EVENTS_ENV,
    HOME_ENV,
    HomeError,
    LocalHome,
    install_session,
    load_installed,
    load_session_state,
    read_state,
    run_local,
    unknown_session,
)
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, ClaimTaken, RecordCorrupt, StoreError

STOP_AGAIN = "Ctrl-C or SIGTERM"

if TYPE_CHECKING:
    from belay.journal.briefing import Briefing


def write_output(target: Path, data: bytes) -> None:
    """Writes what a command was asked for with -o, or ends it with one error line."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as error:
        raise fail(f"cannot write {target}: {error.strerror or error}; choose another -o PATH") from None


def fail(message: str, code: int = 1) -> typer.Exit:
    # Printable here too: an error can be raised after the command's output filter was removed.
    typer.echo(f"error: {terminal.printable(terminal.one_line(message))}", err=True)
    return typer.Exit(code)


def artifact_problem(error: ArtifactCorrupted | ArtifactNotFound) -> str:
    """What a failed artifact read means for the person, and what they can do."""
    if isinstance(error, ArtifactCorrupted):
        return (
            f"the artifact store holds a corrupt blob: {error}, not the sha256 the record names; "
            "restore the file from a backup (`belay artifacts SESSION` shows where each one lives)"
        )
    return (
        f"the artifact store has lost a blob the record names ({error}): restore it from a backup, "
        "or point --home at the home the session ran in"
    )


def global_options_first(args: list[str], names: tuple[str, ...]) -> list[str]:
    """`belay brief NAME --home DIR` means `belay --home DIR brief NAME`: click reads a group's
    options only before the subcommand, and a person types them where they think of them. Each
    of `names` takes one value; nothing after `--` moves."""
    moved: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if arg in names and index + 1 < len(args):
            moved.extend(args[index : index + 2])
            index += 2
            continue
        if arg.partition("=")[0] in names and "=" in arg:
            moved.append(arg)
        else:
            rest.append(arg)
        index += 1
    return moved + rest


class UserErrorsAsOneLine(TyperGroup):
    """Failures a person can cause in any command end it with one `error:` line saying what to do,
    never a traceback: a home that is not one, an artifact store that lost or damaged a blob, and
    every other store failure (a record that fails its integrity check, RecordCorrupt; a record key
    that cannot be read; a store that does not answer)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, global_options_first(args, ("--home", "--events", "--artifacts")))

    def invoke(self, ctx: Any) -> Any:  # typer's own click Context, whose module is private
        try:
            return super().invoke(ctx)
        except HomeError as error:
            raise fail(str(error)) from None
        except (ArtifactCorrupted, ArtifactNotFound) as error:
            raise fail(artifact_problem(error)) from None
        except StoreError as error:
            raise fail(str(error)) from None


app = typer.Typer(
    name="belay",
    help="Long-lived AI agent sessions whose record outlives every process.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=UserErrorsAsOneLine,
)
console = terminal.console()


class Context:
    home: LocalHome = LocalHome.resolve(None)


def home_of(session_id: str) -> LocalHome:
    """Where the session's record and artifacts are: the stores its manifest names, else those
    `--events` / `--artifacts` name, else the home's own."""
    return Context.home.for_session(session_id)


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
    ctx.with_resource(terminal.printable_output())
    Context.home = LocalHome.resolve(home, events_url, artifacts_url)
    Context.home.check()  # before any command reads or writes it; UserErrorsAsOneLine words a refusal
    stop_orphans(Context.home)


def stop_orphans(home: LocalHome) -> None:
    """Stop the sandbox servers of dead attempts before doing anything else, and say so."""
    found = asyncio.run(
        reap_orphans(
            home.root / "sessions", lambda session_id: home.for_session(session_id).open_event_store()
        )
    )
    for reaped in found:
        typer.echo(reaped.message(), err=True)


# --------------------------------------------------------------------------------------------------
# Running


def progress_line(event: Event) -> str | None:
    """One line of foreground progress for the events a person cares about."""
    p: Any = event.payload
    who = f"{event.actor.subagent} " if event.actor.subagent else ""
    match event.type:
        case "lifecycle":
            return f"{event.seq:>4} {who}{p.kind} {p.detail or p.reason}".rstrip()
        case "task" if "/" in p.task_id and p.status in ("running", "done", "verified"):
            return f"{event.seq:>4} {who}step {p.task_id.split('/', 1)[1]} {p.status} {p.detail}".rstrip()
        case "tool_request" if p.tool != "update_plan":
            return f"{event.seq:>4} {who}-> {p.tool} ({p.operation_id})"
        case "tool_result" if not p.ok:
            return f"{event.seq:>4} {who}x {p.operation_id}: {p.error}"
        case "approval_request":
            return (
                f"{event.seq:>4} {who}waits for approval {p.approval_id}: "
                f"belay approve {event.session_id} {p.approval_id}"
            )
        case "approval":
            decision = "granted" if p.granted else "rejected"
            return f"{event.seq:>4} {who}approval {p.approval_id} {decision} by {p.by}"
        case "note":
            return f"{event.seq:>4} {who}{p.kind} [{p.status}] {p.text}"
        case "artifact":
            return f"{event.seq:>4} {who}published {p.name} sha256 {p.ref.sha256[:12]}"
        case "checkpoint":
            status = p.verification.status if p.verification else "no verification"
            return f"{event.seq:>4} {who}checkpoint {p.checkpoint_id} ({status})"
        case "operation_outcome":
            return f"{event.seq:>4} {who}outcome {p.outcome} {p.operation_id}: {p.detail}"
        case "wait" if p.kind != "ready_for_review":
            return f"{event.seq:>4} {who}waits ({p.kind}) {p.reason}"
        case "remote" if p.kind == "session":
            return (
                f"{event.seq:>4} {who}{p.executor} session {p.remote_session_id} at {p.endpoint} ({p.detail})"
            )
        case "remote" if p.kind in ("call_refused", "interrupted", "failed"):
            return f"{event.seq:>4} {who}{p.executor} {p.kind} {p.operation_id or ''}: {p.detail}"
    return None


def print_progress(event: Event) -> None:
    line = progress_line(event)
    if line is not None:
        console.print(line, highlight=False, markup=False)


def _run(session_id: str, quiet: bool, with_ticket_service: bool = True) -> None:
    home = home_of(session_id)
    try:
        session = load_installed(home, session_id)
        stop = StopRequest(on_request=tell_stopping)
    except (ManifestError, ValueError) as error:
        raise fail(str(error)) from None

    async def attempt() -> HarnessResult:
        # SIGTERM, Ctrl-C (SIGINT) and SIGHUP stop the attempt cleanly (belay.harness.stopping); a
        # second one stops it at once. (A SIGKILL leaves no way out: the next `belay` command stops
        # its sandboxes.)
        stop.install(asyncio.get_running_loop(), hard_deadline=True)
        return await run_local(
            home,
            session,
            on_event=None if quiet else print_progress,
            with_ticket_service=with_ticket_service,
            stop=stop,
        )

    try:
        result = asyncio.run(attempt())
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise fail(f"interrupted; continue with `belay resume {session_id}`", 130) from None
    except (RecordCorrupt, ManifestError) as error:
        raise fail(str(error)) from None
    except (ArtifactCorrupted, ArtifactNotFound, HomeError):
        raise  # a resume would fail the same way: UserErrorsAsOneLine says what to do instead
    except Exception as error:
        raise fail(
            f"the harness stopped: {type(error).__name__}: {error}; "
            f"the record is intact, continue with `belay resume {session_id}`"
        ) from None
    finally:
        stop.disarm()
    if result.stopped_by is not None:
        typer.echo(f"belay: attempt {result.attempt} stopped cleanly: {result.detail}", err=True)
        raise fail(
            f"stopped by {result.stopped_by.name}; continue with `belay resume {session_id}`",
            128 + result.stopped_by,
        )
    if not quiet:
        console.print()
        print_brief(session_id, "text")
    if not result.completed:
        raise fail(f"session {session_id} did not complete: {result.detail}")


def tell_stopping(stop: StopRequest, first: bool) -> None:
    """What a person sees when a stop signal arrives (stderr, also with --quiet)."""
    name = stop.received.name if stop.received is not None else "a signal"
    if first:
        message = (
            f"belay: {name}: stopping; no new tool call is dispatched, calls in flight may finish "
            f"for up to {stop.drain_s:g} s ({STOP_AGAIN} again to stop at once)"
        )
    else:
        message = "belay: stopping at once: calls still in flight are cut off"
    typer.echo(message, err=True)


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
    state = asyncio.run(load_session_state(home_of(session.session_id), session.session_id))
    if state.lifecycle.completed:
        typer.echo(
            f"session {session.session_id} already completed in {home.root}; its briefing follows "
            "(use another --home for a fresh run)",
            err=True,
        )
        if not quiet:
            print_brief(session.session_id, "text")
        return
    if state.last_seq:
        raise fail(
            f"session {session.session_id} already exists in {home.root}; "
            f"continue it with `belay resume {session.session_id}`"
        )
    _run(session.session_id, quiet)


@app.command()
def resume(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    no_ticket_service: Annotated[
        bool, typer.Option("--no-ticket-service", hidden=True, help="Drill: the tracker is unreachable.")
    ] = False,
) -> None:
    """Start a new harness attempt that recovers the session from its record and continues it."""
    try:
        load_installed(Context.home, session_id)
    except ManifestError as error:
        raise fail(str(error)) from None
    # The record is checked before a new attempt takes the session over (RecordCorrupt): the events
    # after the latest snapshot here, those before it when the snapshot was taken.
    asyncio.run(load_session_state(home_of(session_id), session_id))
    _run(session_id, quiet, with_ticket_service=not no_ticket_service)


# --------------------------------------------------------------------------------------------------
# Reading the record


def _known_record(session_id: str) -> tuple[SessionState, list[Event]]:
    """The whole record and its fold, for what shows every event (the report's timeline)."""
    home = home_of(session_id)
    state, events = asyncio.run(read_state(home, session_id))
    if not events:
        raise fail(unknown_session(session_id, home))
    return state, events


def _known_state(session_id: str) -> SessionState:
    home = home_of(session_id)
    state = asyncio.run(load_session_state(home, session_id))
    if not state.last_seq:
        raise fail(unknown_session(session_id, home))
    return state


# How often `belay sessions --watch` and `belay objective --watch` look again.
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
    from belay.journal.fleet import fleet_view, render_fleet

    def show(rows: list[Any]) -> str:
        view = fleet_view(rows)
        return view.model_dump_json() if as_json else render_fleet(view, where=str(Context.home.root))

    _show_fleet(selector, show, watch)


@app.command()
def objective(
    name: Annotated[str, typer.Argument(metavar="OBJECTIVE", help="The belay.dev/objective label value.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w")] = False,
) -> None:
    """The sessions that serve one objective (label belay.dev/objective): each one's part and
    deliverables, and what the whole waits on."""
    from belay.journal.fleet import OBJECTIVE_LABEL, objective_view, render_objective

    def show(rows: list[Any]) -> str:
        view = objective_view(name, rows)
        return view.model_dump_json() if as_json else render_objective(view)

    _show_fleet(f"{OBJECTIVE_LABEL}={name}", show, watch)


def _show_fleet(selector: str, show: Any, watch: bool) -> None:
    """Print the fleet once, or (watching) again whenever a row changes; a corrupt record ends a
    one-off listing with its error after the others are shown."""
    import time

    from belay.journal.fleet import SelectorError
    from belay.local.fleet import LocalFleet, without_clock

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
        typer.echo(f"error: {corrupt}", err=True)
    if fleet.corrupt:
        raise typer.Exit(1)


def session_briefing(state: SessionState, liveness: Liveness | None) -> Briefing:
    """The briefing as this home sees it: artifact locations, observed sandboxes, budgets."""
    from belay.journal.briefing import briefing

    home = home_of(state.session_id)
    store = home.open_artifact_store()

    def locate(ref: ArtifactRef) -> str:
        return store.location(ref.sha256) if store.exists(ref.sha256) else ref.uri

    sandboxes = []
    budgets: dict[str, int] = {}
    if home.session_exists(state.session_id):
        spec = load_installed(home, state.session_id).spec
        profiles = {sub.name: sub.network_profile for sub in spec.subagents}
        sandboxes = observed_sandboxes(home.sandboxes_dir(state.session_id), profiles)
        budgets = spec.budgets.model_dump(by_alias=True, exclude_none=True)
    return briefing(
        state,
        locate=locate,
        artifact_store=home.artifacts_location,
        record=home.events_location if home.stores_elsewhere else "",
        liveness=liveness,
        sandboxes=sandboxes,
        budgets=budgets,
    )


def render_brief(state: SessionState, style: str, liveness: Liveness | None) -> str:
    from belay.journal.briefing import render_json, render_markdown, render_text

    brief = session_briefing(state, liveness)
    if style == "json-lines":  # one compact object per line, for a follower's stream
        return brief.model_dump_json()
    render = {"json": render_json, "markdown": render_markdown, "text": render_text}[style]
    return render(brief)


def print_brief(session_id: str, style: str) -> None:
    state = _known_state(session_id)
    sys.stdout.write(render_brief(state, style, read_liveness(session_id)) + "\n")


def read_liveness(session_id: str) -> Liveness:
    async def read() -> Liveness:
        store = home_of(session_id).open_event_store()
        try:
            return await local_liveness(store, session_id)
        finally:
            await store.close()

    return asyncio.run(read())


# A follower prints once per burst of events, not once per event.
FOLLOW_SETTLE_S = 0.3


async def follow_brief(session_id: str, style: str) -> None:
    """Print the briefing, then again whenever the record moves on or the phase changes without
    an event (an attempt that stops proving it is alive), until the session ends. The state is
    folded incrementally from the store's watch, which re-reads after any cut."""
    from belay.journal.state import apply
    from belay.journal.status import HEARTBEAT_INTERVAL_S

    home = home_of(session_id)
    state = await load_session_state(home, session_id)
    if not state.last_seq:
        raise fail(unknown_session(session_id, home))
    store = home.open_event_store()
    liveness = await local_liveness(store, session_id)
    sys.stdout.write(render_brief(state, style, liveness) + "\n")
    sys.stdout.flush()
    arrived: asyncio.Queue[Event | None] = asyncio.Queue()
    first_new_seq = state.last_seq + 1

    # A timeout on the watch itself would close it; the pump keeps it open and the loop waits on
    # the queue instead. None in the queue means the watch ended (with an error to show).
    async def pump() -> None:
        try:
            async for event in store.watch(session_id, from_seq=first_new_seq):
                await arrived.put(event)
        finally:
            await arrived.put(None)

    async def next_event(timeout: float | None = None) -> Event:
        event = await asyncio.wait_for(arrived.get(), timeout)
        if event is None:
            pumping.result()  # raises what ended the watch
            raise fail("the event store's watch ended")
        return event

    pumping = asyncio.create_task(pump())
    shown = phase_of(state, liveness)
    try:
        while shown not in (Phase.SUCCEEDED, Phase.FAILED):
            try:
                state = apply(state, await next_event(HEARTBEAT_INTERVAL_S))
            except TimeoutError:
                liveness = await local_liveness(store, session_id)
                if phase_of(state, liveness) == shown:
                    continue
            else:
                with contextlib.suppress(TimeoutError):
                    while True:
                        state = apply(state, await next_event(FOLLOW_SETTLE_S))
                liveness = await local_liveness(store, session_id)
            separator = "" if style == "json-lines" else f"--- seq {state.last_seq} ---\n"
            sys.stdout.write(separator + render_brief(state, style, liveness) + "\n")
            sys.stdout.flush()
            shown = phase_of(state, liveness)
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        await store.close()


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

    home = home_of(session_id)

    async def read() -> tuple[int, list[Event]]:
        store = home.open_event_store()
        try:
            return await store.last_seq(session_id), await store.read(session_id, from_seq=max(from_seq, 1))
        finally:
            await store.close()

    last_seq, found = asyncio.run(read())
    if not last_seq:
        raise fail(unknown_session(session_id, home))
    for event in found:
        if as_json:
            sys.stdout.write(event_line(event) + "\n")
        else:
            line = progress_line(event) or f"{event.seq:>4} {event.type}"
            console.print(line, highlight=False, markup=False)


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
    from belay.journal.briefing import render_rows
    from belay.journal.report import render_html, session_report

    def locator(session_id: str) -> Any:
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
        state, events = _known_record(session_id)
        liveness = read_liveness(session_id)
        brief = render_rows(session_briefing(state, liveness))
        reports.append(
            session_report(events, state, liveness=liveness, briefing=brief, locate=locator(session_id))
        )
    target = output or Path(f"{session_ids[0]}-report.html")
    if target.is_dir():
        target = target / f"{session_ids[0]}-report.html"
    page = render_html(reports).encode()
    write_output(target, page)
    typer.echo(f"wrote {target} ({len(page)} bytes); open it in a browser, it needs no network", err=True)


# --------------------------------------------------------------------------------------------------
# Deciding


def decide(session_id: str, item_id: str, granted: bool, reason: str, by: str) -> str:
    """Record one decision under its claim, so that of two people deciding at once, one decision
    is recorded and the other person is told who decided first."""
    state = _known_state(session_id)
    try:
        write = decision_write(state, item_id, granted, reason, by)
    except DecisionError as error:
        raise fail(str(error)) from None
    _append(session_id, list(write.drafts), write.claim)
    return write.outcome


@app.command()
def approve(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    item_id: Annotated[str, typer.Argument(metavar="ID", help="An approval id, or a wait id.")],
    reason: Annotated[str, typer.Option("--reason", "-m")] = "",
    by: Annotated[str, typer.Option("--by")] = "cli",
) -> None:
    """Approve one pending operation (bound to its payload hash), or answer yes to a wait."""
    console.print(decide(session_id, item_id, True, reason, by), highlight=False)


@app.command()
def reject(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    item_id: Annotated[
        str, typer.Argument(metavar="ID", help="A deliverable, an approval id, or a wait id.")
    ],
    reason: Annotated[
        str, typer.Option("--reason", "-m", help="Why: whoever redoes the step reads it.")
    ] = "",
    by: Annotated[str, typer.Option("--by")] = "cli",
) -> None:
    """Reject a published deliverable or a pending operation: the step that made it is redone
    with your reason. Or answer no to a wait."""
    state = _known_state(session_id)
    deliverable = _deliverable_named(state, item_id)
    # Plain echo, never wrapped: the output names commands to copy.
    if deliverable is not None:
        typer.echo(reject_deliverable(session_id, deliverable, reason, by))
        return
    withdrawn = state.artifacts.get(item_id)
    if withdrawn is not None and item_id not in state.approvals and item_id not in state.waits:
        raise fail(
            f"{item_id} (sha256 {withdrawn.ref.sha256}) is not a published deliverable now: it was rejected, "
            f"or a scope change withdrew it; `belay brief {session_id}` shows where its step stands"
        )
    outcome = decide(session_id, item_id, False, reason, by)
    typer.echo(outcome + _reopened_after(session_id, state.last_seq))


def _deliverable_named(state: Any, item_id: str) -> str | None:
    """The published deliverable an id names: its name, or the id of its review wait."""
    if item_id in state.deliverables:
        return str(item_id)
    wait = state.waits.get(item_id)
    if wait is not None and wait.kind == "ready_for_review" and wait.artifact in state.deliverables:
        return str(wait.artifact)
    return None


def reject_deliverable(session_id: str, name: str, reason: str, by: str) -> str:
    state = _known_state(session_id)
    if not reason.strip():
        raise fail(f'say why with --reason "...": the step that made {name} is redone with it')
    sha256 = state.artifacts[name].ref.sha256
    rejection = Rejection(name=name, sha256=sha256, reason=reason.strip(), by=by)
    drafts = [EventDraft(payload=rejection, actor=Actor(kind="user", name=by))]
    _append(session_id, drafts, rejection_claim(name, sha256))
    return f"rejected {name} (sha256 {sha256})" + _reopened_after(session_id, state.last_seq)


def _reopened_after(session_id: str, seq: int) -> str:
    """What a decision just recorded reopened, and how the work goes on."""
    state = _known_state(session_id)
    steps = [t.task_id for t in state.tasks.values() if t.reopened_seq is not None and t.reopened_seq > seq]
    if not steps:
        return ""
    return (
        f"; to redo: {', '.join(sorted(steps))}. A running harness takes it from here; "
        f"otherwise continue with `belay resume {session_id}`"
    )


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
    by: Annotated[str, typer.Option("--by")] = "cli",
) -> None:
    """Change the request: record request version N+1. The work that depended on what changed
    becomes invalid and is redone; the rest is reused."""
    state = _known_state(session_id)
    if state.request.version == 0:
        raise fail(f"session {session_id} has no request recorded yet")
    new_goal, new_parts = state.request.goal, dict(state.request.parts)
    if manifest is not None:
        if goal is not None or parts or removed:
            raise fail("give either -f MANIFEST or --goal/--part/--remove-part, not both")
        try:
            request = load_manifest(manifest).spec.request
        except ManifestError as error:
            raise fail(f"bad manifest: {error}") from None
        new_goal, new_parts = request.goal, dict(request.parts)
    if goal is not None:
        if not goal.strip():
            raise fail("--goal cannot be empty")
        new_goal = goal
    for item in parts or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise fail(f"--part {item!r}: expected KEY=VALUE")
        new_parts[key.strip()] = value
    for key in removed or []:
        if key not in new_parts:
            known = ", ".join(sorted(new_parts)) or "none"
            raise fail(f"--remove-part {key!r}: the request has no such part (parts: {known})")
        del new_parts[key]
    old = state.request
    changed = {k: v for k, v in new_parts.items() if old.parts.get(k) != v}
    dropped = tuple(sorted(k for k in old.parts if k not in new_parts))
    goal_changed = new_goal != old.goal
    if not (changed or dropped or goal_changed):
        raise fail(f"nothing changes: this is request v{old.version} as it stands")
    touched = (["goal"] if goal_changed else []) + sorted(changed) + list(dropped)
    version = old.version + 1
    change = ScopeChange(
        request_version=version,
        summary=summary.strip() or "changed " + ", ".join(touched),
        goal=new_goal if goal_changed else None,
        changed_parts=changed,
        removed_parts=dropped,
        by=by,
    )
    _append(session_id, [EventDraft(payload=change, actor=Actor(kind="user", name=by))], scope_claim(version))
    from belay.journal.briefing import briefing

    after = _known_state(session_id)
    recorded = briefing(after).scope_changes[-1]
    lines = [f"recorded request v{version} of {session_id} ({', '.join(touched)} changed, by {by})"]
    if recorded.invalid_steps or recorded.invalid_outputs:
        more = f" and {recorded.invalid_steps_omitted:,} more" if recorded.invalid_steps_omitted else ""
        lines.append("to redo: " + (", ".join(v.step for v in recorded.invalid_steps) or "nothing") + more)
        lines.append(
            "invalid now: " + (", ".join(o.label for o in recorded.invalid_outputs) or "nothing else")
        )
        lines.append("still reusable: " + (", ".join(v.step for v in recorded.reusable_steps) or "nothing"))
        lines.append(
            f"a running harness takes it from here; otherwise continue with `belay resume {session_id}`"
        )
    else:
        lines.append("nothing recorded so far depended on it: every result stays reusable")
    typer.echo("\n".join(lines))


@app.command()
def reconcile(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    operation_id: Annotated[str, typer.Argument(metavar="OPERATION")],
    succeeded: Annotated[
        bool | None, typer.Option("--succeeded/--failed", help="Did the operation take effect?")
    ] = None,
    detail: Annotated[str, typer.Option("--detail", "-m")] = "",
    by: Annotated[str, typer.Option("--by")] = "cli",
) -> None:
    """Settle an operation whose outcome is unknown: it took effect (--succeeded) or not (--failed)."""
    if succeeded is None:
        raise fail("say whether it took effect: --succeeded or --failed")
    state = _known_state(session_id)
    try:
        write = reconcile_write(state, operation_id, succeeded, detail, by)
    except DecisionError as error:
        raise fail(str(error)) from None
    _append(session_id, list(write.drafts), write.claim)
    console.print(write.outcome, highlight=False, markup=False)


@app.command()
def answer(
    session_id: Annotated[str, typer.Argument(metavar="SESSION")],
    wait_id: Annotated[str, typer.Argument(metavar="WAIT")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    by: Annotated[str, typer.Option("--by")] = "cli",
) -> None:
    """Answer a wait on the user with text; the session goes on."""
    console.print(decide(session_id, wait_id, True, text, by), highlight=False, markup=False)


def _append(session_id: str, drafts: list[EventDraft], claim: str) -> None:
    """Append a decision under its claim; when someone else's decision holds the claim, fail
    with what they decided."""

    async def write() -> str | None:
        store = home_of(session_id).open_event_store()
        try:
            await store.append(session_id, drafts, claim=claim)
        except ClaimTaken as taken:
            [first] = await store.read(session_id, taken.seq, taken.seq)
            return decided_first(first)
        finally:
            await store.close()
        return None

    earlier = asyncio.run(write())
    if earlier is not None:
        raise fail(f"{earlier}; yours was not recorded (see `belay brief {session_id}`)")


def decided_first(event: Event) -> str:
    """What the decision that got there first decided, by whom, at which seq."""
    p: Any = event.payload
    who = (
        p.by if isinstance(p, Approval | OperationOutcome) and p.by else event.actor.name or event.actor.kind
    )
    match p:
        case Approval():
            decision = "granted" if p.granted else "rejected"
            return f"approval {p.approval_id} was already {decision} by {who} (seq {event.seq})"
        case OperationOutcome():
            verdict = "took effect" if p.succeeded else "did not take effect"
            return f"{p.operation_id} was already reconciled by {who}: it {verdict} (seq {event.seq})"
        case Wait():
            return f"{p.wait_id} was already answered by {who}: {p.reason} (seq {event.seq})"
        case Rejection():
            return f"{p.name} (sha256 {p.sha256}) was already rejected by {who}: {p.reason} (seq {event.seq})"
        case ScopeChange():
            return (
                f"request v{p.request_version} was already recorded by {who}: {p.summary} (seq {event.seq})"
            )
    return f"this was already decided by {who} (seq {event.seq})"


# --------------------------------------------------------------------------------------------------
# Artifacts


@app.command()
def artifacts(
    words: Annotated[list[str], typer.Argument(metavar="SESSION | get SESSION NAME")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where `get` writes the bytes.")
    ] = None,
) -> None:
    """List a session's artifacts, or `artifacts get SESSION NAME [-o PATH]` to download one
    (without -o, to ./NAME)."""
    if words[0] == "get":
        if len(words) != 3:
            raise fail("usage: belay artifacts get SESSION NAME [-o PATH]")
        _get_artifact(words[1], words[2], output)
        return
    if len(words) != 1:
        raise fail("usage: belay artifacts SESSION  |  belay artifacts get SESSION NAME [-o PATH]")
    state = _known_state(words[0])
    table = Table("NAME", "DELIVERABLE", "SUBAGENT", "SIZE", "SHA256", "LOCATION")
    store = home_of(words[0]).open_artifact_store()
    for record in sorted(state.artifacts.values(), key=lambda r: r.seq):
        table.add_row(
            record.name,
            "yes" if record.deliverable else "",
            record.subagent or "",
            str(record.ref.size),
            record.ref.sha256,
            store.location(record.ref.sha256) if store.exists(record.ref.sha256) else "(missing)",
        )
    console.print(table)


def _get_artifact(session_id: str, name: str, output: Path | None) -> None:
    state = _known_state(session_id)
    if name.startswith("sha256:"):
        sha256 = name.removeprefix("sha256:")
        if sha256 not in blobs_named(state):
            raise fail(
                f"session {session_id} names no blob sha256:{sha256} (its artifacts, approval payloads "
                "and checkpoint patches can be fetched by hash)"
            )
        target = output or Path(sha256)
    else:
        record = state.artifacts.get(name)
        if record is None:
            known = ", ".join(sorted(state.artifacts)) or "none"
            raise fail(f"session {session_id} has no artifact {name!r} (artifacts: {known})")
        if output is None and not is_plain_file_name(name):
            # A name chosen by a model may be `../../x` or `/abs/x`: only -o says where to write it.
            raise fail(
                f"artifact {name!r} is not a plain file name, so it is not written into the working "
                f"directory by its name: choose where with -o PATH"
            )
        sha256, target = record.ref.sha256, output or Path(name)
    data = home_of(session_id).open_artifact_store().get(sha256)
    write_output(target, data)
    typer.echo(f"wrote {target} ({len(data)} bytes, sha256 {sha256})", err=True)


def blobs_named(state: Any) -> set[str]:
    """Every blob the session's record refers to: artifacts, what approvals bind, checkpoint
    patches and declared files."""
    named = {record.ref.sha256 for record in state.artifacts.values()}
    for approval in state.approvals.values():
        named.update(ref.sha256 for ref in (approval.payload_ref, approval.content_ref) if ref is not None)
    for checkpoints in state.subagent_checkpoints.values():
        for record in checkpoints:
            if record.checkpoint.patch is not None:
                named.add(record.checkpoint.patch.sha256)
            named.update(entry.sha256 for entry in record.checkpoint.declared_artifacts)
    return named


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
) -> None:
    """Interrupt a short session on purpose and check that the resumed session makes sense."""
    from belay.local.drill import DEFAULT_MANIFEST, EXECUTORS, run_drill

    path = manifest or DEFAULT_MANIFEST
    if executor is not None and executor not in EXECUTORS:
        raise fail(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    try:
        load_manifest(path)
    except ManifestError as error:
        raise fail(f"bad manifest: {error}") from None
    try:
        report = run_drill(path, Context.home.root / "drill", progress=not as_json, executor=executor)
    except ValueError as error:
        raise fail(str(error)) from None
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        # Each check was printed as it ran; repeat only the failures beside the verdict.
        failed = [check for check in report.checks if not check.passed]
        for check in failed:
            console.print(f"[red]FAIL[/red] {check.name}: {check.detail}", highlight=False)
        verdict = f"drill {'passed' if report.passed else 'failed'}: {len(report.checks) - len(failed)}"
        console.print(f"{verdict} of {len(report.checks)} checks passed", highlight=False)
    if not report.passed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
