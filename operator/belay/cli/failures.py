"""How `belay` ends a command a person's mistake or a damaged home stops: one `error:` line that
says what to do, never a traceback."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

from belay.cli.core.errors import CommandError
from belay.cli.terminal import fail
from belay.local.runtime import HomeError
from belay.stores.base import ArtifactCorrupted, ArtifactNotFound, StoreError


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
    that cannot be read; a store that does not answer); and every mistake the commands' core
    refuses (`CommandError`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, global_options_first(args, ("--home", "--events", "--artifacts")))

    def invoke(self, ctx: Any) -> Any:  # typer's own click Context, whose module is private
        try:
            return super().invoke(ctx)
        except (HomeError, CommandError) as error:
            raise fail(str(error)) from None
        except (ArtifactCorrupted, ArtifactNotFound) as error:
            raise fail(artifact_problem(error)) from None
        except StoreError as error:
            raise fail(str(error)) from None
