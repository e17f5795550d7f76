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
import io
import sys
from collections.abc import Iterator
from typing import TextIO

import typer
from rich.console import Console

from belay.views.escaping import printable


def one_line(text: str) -> str:
    """A message as one line: an `error:` line never spans several."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


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
    """A rich console that writes plain text to whatever `sys.stdout` is when it prints."""
    return Console(color_system=None, highlight=False)


def fail(message: str, code: int = 1) -> typer.Exit:
    """End a command with one `error:` line (on stderr) and the exit code. Printable here too: an
    error can be raised after the command's output filter was removed."""
    echo(f"error: {printable(one_line(message))}", err=True)
    return typer.Exit(code)
