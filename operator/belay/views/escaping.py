"""What came from the record is shown as data, never as markup: the one escaping of every view.

Notes, step titles, reasons, file names, tool output, wait descriptions: a model, a plan or a
sandbox wrote them, and each is hostile input. A newline in a note could open a section of its own
on the page (a fake `Waiting on you` with a command to run under it), a carriage return or an ESC
could rewrite what a terminal shows, a bidirectional control could make a line read backwards, a
leading `#` could make a Markdown heading. So:

- `inline` is how every renderer puts record text into a line of its page (text, Markdown,
  HTML, the CLI's event lines, the tables): every control character, the newline and the tab
  included, the Unicode line and paragraph separators and the bidirectional controls are shown as
  an escape (`\\n`, `\\t`, else `\\uXXXX`, as JSON spells them), so one row of the page stays one
  row.
- `markdown` is `inline` and then Markdown's own: the characters that make inline markup
  (emphasis, links and images, raw HTML, entities, a backtick that opens no code span) are
  backslash-escaped wherever they are, a code span is kept (its content is shown as it is), and a
  row that begins with what would start a block (a heading, a list item, a quote, a rule) is
  escaped there.
- `printable` is the terminal's last filter on everything the CLI prints (`belay.cli.terminal`):
  the same escapes, but newline and tab kept, since a command's output has many lines.

HTML takes `inline`'s text and escapes it as HTML (`belay.views.report.words.escaped`).
"""

from __future__ import annotations

import re

# C0, DEL, C1; the line and paragraph separators (a line break to Unicode, to Python's splitlines
# and to JavaScript); the bidirectional marks, embeddings, overrides and isolates.
_SPECIAL = "\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ANY_CONTROL = re.compile(f"[\x00-\x1f{_SPECIAL}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_SPECIAL}]")
# The two that `printable` keeps have their short forms; every other one is `\\uXXXX`.
_SHORT = {"\n": "\\n", "\t": "\\t"}

# Markdown's inline markup: emphasis, strikethrough, links and images, raw HTML and entities, and
# a backtick outside a code span. An underscore makes emphasis only at the edge of a word, so one
# inside a name (`OPENAI_API_KEY`) is left as it is.
_MARKDOWN_INLINE = re.compile(r"[\\`*\[\]<>&~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# A code span of one backtick each side: its content is shown as it is, code, never markup, and
# it cannot leave the row, so it is kept (the page puts its commands in them).
_CODE_SPAN = re.compile(r"(?<!`)`[^`]+`(?!`)")
# What starts a block at the beginning of a line: an ATX heading, a list item or a rule (`-`, `+`,
# `*`), an ordered list item (`1.`, `1)`), a setext underline or a quote. `*` and `>` are
# escaped everywhere already.
_MARKDOWN_BLOCK = re.compile(r"^([#+=-]|\d+(?=[.)]))")


def _shown(match: re.Match[str]) -> str:
    character = match.group()
    return _SHORT.get(character) or f"\\u{ord(character):04x}"


def inline(text: str) -> str:
    """Record text as part of one line: no character in it can break the line, move the
    cursor or reorder what is read."""
    return _ANY_CONTROL.sub(_shown, text)


def printable(text: str) -> str:
    """Text for a terminal: as `inline`, but its newlines and tabs kept."""
    return _CONTROL_BUT_LINES.sub(_shown, text)


def markdown(text: str) -> str:
    """Record text as one line of Markdown that renders as the text itself."""
    # Leading spaces go: the row's indentation is its level (four would make a code block).
    text = inline(text).lstrip(" ")
    pieces, position = [], 0
    for span in _CODE_SPAN.finditer(text):
        pieces += [_markup_escaped(text[position : span.start()]), span.group()]
        position = span.end()
    pieces.append(_markup_escaped(text[position:]))
    return _MARKDOWN_BLOCK.sub(_block_escaped, "".join(pieces), count=1)


def _markup_escaped(text: str) -> str:
    return _MARKDOWN_INLINE.sub(lambda match: "\\" + match.group(), text)


def _block_escaped(match: re.Match[str]) -> str:
    marker = match.group(1)
    # An ordered list item is made by its digits and the `.` or `)` after them: escaping that
    # punctuation (`1\.`) unmakes it.
    return marker + "\\" if marker[0].isdigit() else "\\" + marker


def one_line(text: str) -> str:
    """A message as one line, losing none of its lines: an error (an `error:` line, a tool call's
    error result) never spans several, whatever a traceback or a subprocess's stderr put in it."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())
