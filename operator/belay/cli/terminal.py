"""Everything `belay` and `kubectl belay` print goes through here: each command runs inside
`printable_output`, entered by the app's callback.

Goals, notes, titles, reasons and names come from manifests, from people and from models, and a
model's text is hostile input: raw control bytes in it (ESC starts a terminal escape sequence, CR
rewrites a line) could repaint or corrupt a person's terminal. `printable`
(`belay.views.escaping`, the escaping every view uses) shows every control character except
newline and tab as `\\uXXXX`, which is also how JSON spells it, so a JSON line stays valid and
means the same. The views put record text into their lines with newlines escaped too, so a note
cannot print a line of its own. No styles either: with `color_system=None` rich emits no escape sequence
of its own, so nothing that reaches the terminal is one.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import os
import sys
from collections.abc import Iterator
from typing import Annotated, TextIO

import typer
from rich.console import Console

from belay.views.escaping import one_line, printable


class PrintableStream(io.TextIOBase):
    """A text stream that escapes control characters on their way to another."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self.target = target

    def write(self, text: str) -> int:
        self.target.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase's is a read-only None
        return getattr(self.target, "encoding", None) or "utf-8"


@contextlib.contextmanager
def printable_output() -> Iterator[None]:
    """stdout and stderr through `printable` while a command runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(saved[0]), PrintableStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print as it is: never wrapped (a line names a command to copy), never stripped of what
    looks like a terminal sequence (click's echo drops those when the output is no terminal; here
    the stream escapes them, so they are shown)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + ("\n" if nl else ""))
    stream.flush()


def console() -> Console:
    """A rich console that writes plain text to whatever `sys.stdout` is when it prints, and never
    breaks a line of its own (`soft_wrap`): rich wraps at 80 columns when the output is a pipe or
    a file, which cut printed commands in two for whoever copies or greps them."""
    return Console(color_system=None, highlight=False, soft_wrap=True)


# Click wraps its plain help at the terminal's width, 80 columns when there is none; as wide as
# this, nothing it prints is ever wrapped.
UNWRAPPED_CONTEXT = {"max_content_width": 1_000_000, "terminal_width": 1_000_000}


def plain_help_unless_terminal() -> None:
    """Help and usage errors drawn by rich in boxes as wide as the terminal are boxes of 80
    columns in a pipe or a file, their lines cut; there click's plain help (under
    `UNWRAPPED_CONTEXT`) prints each line whole."""
    if not sys.stdout.isatty():
        typer.core.HAS_RICH = False


plain_help_unless_terminal()


def person() -> str:
    """Who a decision is recorded as when `--by` does not say: the user the command runs as, the
    name a person would give (a fixed word such as "cli" says nothing of who decided)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no passwd entry and no LOGNAME/USER, as in some containers
        return f"uid {os.getuid()}"


PERSON = person()
DecidedBy = Annotated[str, typer.Option("--by", help="Who decides (default: the user running the command).")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """End a command with one `error:` line (on stderr) and the exit code. Printable here too: an
    error can be raised after the command's output filter was removed."""
    echo(f"error: {printable(one_line(message))}", err=True)
    return typer.Exit(code)
