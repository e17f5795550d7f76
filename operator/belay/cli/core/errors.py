"""A mistake a person can make with a command, or a refusal: one `error:` line, never a traceback."""

from __future__ import annotations


class CommandError(Exception):
    """What went wrong and what to do instead, in words for the person who ran the command."""
