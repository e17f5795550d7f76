"""`belay run` and `belay resume`: one harness attempt in the foreground, with its progress, stopped
cleanly on a signal."""

from __future__ import annotations

import asyncio

from belay.api.agentsession import ManifestError
from belay.cli import terminal
from belay.cli.core.events import progress_line
from belay.cli.home import Context, home_of, print_brief
from belay.cli.terminal import fail
from belay.harness.attempt import HarnessResult
from belay.harness.stopping import StopRequest
from belay.journal.events import Event
from belay.local.children import LocalChildren
from belay.local.garbage import CollectionRefused, collect
from belay.local.runtime import HomeError, load_installed, run_local
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, RecordCorrupt, StoreError

console = terminal.console()


STOP_AGAIN = "Ctrl-C or SIGTERM"


def print_progress(event: Event) -> None:
    line = progress_line(event)
    if line is not None:
        # Never wrapped: a wrapped line could start with whatever an event's text puts there.
        terminal.echo(line)


def run_session(
    session_id: str, quiet: bool, with_ticket_service: bool = True, collect_after: bool = False
) -> None:
    """One attempt; with `collect_after` (a resume), then what no record needs any more: what the
    attempt it follows left behind (a partial upload, an orphan blob, the old workspaces)."""
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
            children=LocalChildren.follower(home, say=None if quiet else say),
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
    if collect_after:
        collect_garbage()
    if result.stopped_by is not None:
        terminal.echo(f"belay: attempt {result.attempt} stopped cleanly: {result.detail}", err=True)
        raise fail(
            f"stopped by {result.stopped_by.name}; continue with `belay resume {session_id}`",
            128 + result.stopped_by,
        )
    if not quiet:
        console.print()
        print_brief(session_id, "text")
    if not result.completed:
        raise fail(f"session {session_id} did not complete: {result.detail}")


def say(line: str) -> None:
    console.print(f"belay: {line}", highlight=False, markup=False)


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
    terminal.echo(message, err=True)


def collect_garbage() -> None:
    """`belay gc` for the whole home, said in one line when it removed anything; a failure to
    collect is said, never the attempt's failure."""
    try:
        collected = asyncio.run(collect(Context.home))
    except CollectionRefused as error:
        terminal.echo(f"belay: {error}", err=True)
        return
    except (StoreError, HomeError, OSError) as error:
        terminal.echo(f"belay: nothing was collected: {error}", err=True)
        return
    if collected.removed:
        terminal.echo(f"belay: {collected.summary()}", err=True)
    for note in collected.notes:
        terminal.echo(f"belay: {note}", err=True)
