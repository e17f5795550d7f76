"""What a tool's output says once its escapes and invisible characters are read, with a map from
every offset of that reading back to the output itself.

A command can print a value so that its characters are not side by side in the text: JSON writes
`/` as `\\/` or `\\u002f`, HTML as `&#47;` or `&sol;`, `grep --color` puts ANSI colour codes around
(and inside) a match, a file may hold zero-width characters between the letters, and UTF-16 text
read as UTF-8 has a NUL after (or before) every ASCII character. A URL percent-encodes it
(`%2F`), C, Python and `printf` write `\\x2f` or `\\057`, `man` strikes each letter over with a
backspace, and fullwidth forms (U+FF01 to U+FF5E) read as ASCII to a person. `normalised(text)`
undoes all of these: the escapes repeatedly (for a value escaped twice), then ANSI codes,
overstrikes and invisible characters removed and fullwidth forms read (last, so that an escape
that spells one of those counts too), and `View.original(start, end)` maps a span of the reading
back to the span of the output it came from.

The map is exact: each character of the reading comes from one escape (or one character) of the
output, and a span maps to the output from the first character's source to the last one's, with
whatever was removed between them. So a value found in the reading is redacted in the output
exactly, escapes and colour codes inside it included, and nothing around it.

Case is folded by the caller (`fold`), which keeps every offset, so no map is needed for it.

Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

# A JSON escape: `\uXXXX` (with its low surrogate when it is the high one), or one character;
# and the escapes of C, Python, `printf` and `echo -e` for an ASCII character: `\x2f`, `\057`.
_JSON_ESCAPE = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\([\"\\/bfnrt])"
    r"|\\x([0-7][0-9a-fA-F])|\\(0?[0-1][0-7]{2})"
)
_JSON_SINGLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# An HTML character reference, numeric (its `;` optional, as browsers read it) or named
# (`html.unescape` knows which names exist); and a URL's percent-escape of an ASCII character.
_HTML_ENTITY = re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)")
_PERCENT = re.compile(r"%([0-7][0-9a-fA-F])")
# ANSI escape sequences (CSI such as colours and cursor moves, in 7 or 8 bits, OSC up to BEL or
# ST, and the short two-character ones), a character struck over by a backspace (`a\ba` bold and
# `_\ba` underlined, as `man` prints them), the other C1 controls, and the characters that print
# as nothing: zero-width spaces and joiners, the word joiner and invisible operators, the
# byte-order mark, the soft hyphen, the combining grapheme joiner, Mongolian and other variation
# selectors, Hangul fillers, direction marks and isolates, tag characters, and NUL (what is left
# of UTF-16 read as UTF-8: `s\0e\0c\0` for `sec`). Fullwidth forms of ASCII are read as
# ASCII.
_INVISIBLE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"
    r"|[^\n]\x08|[\x00\x80-\x9f\u00ad\u034f\u115f\u1160\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    r"\u2060-\u2064\u2066-\u2069\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
    r"|(?P<fullwidth>[\uff01-\uff5e\u3000])"
)
# How many times JSON and HTML escapes are read again, for a value escaped more than once
# (`\\\\u002f` in JSON inside JSON, `&amp;#47;`).
_ROUNDS = 3


def fold(text: str) -> str:
    """Lower case that keeps every offset: `str.lower` does, but for one character (U+0130, the
    dotted capital I, which lowers to two)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "I").lower()


@dataclass(frozen=True)
class _Pass:
    """One rewriting of a text: the pieces of the new text, each copied from the old one (its
    offsets map one to one) or made from one escape (its characters all map to the escape)."""

    starts: list[int] = field(default_factory=list)  # where each piece starts in the new text
    sources: list[tuple[int, int]] = field(default_factory=list)  # its span in the old text
    copied: list[bool] = field(default_factory=list)

    def source_start(self, position: int) -> int:
        piece = bisect.bisect_right(self.starts, position) - 1
        start = self.sources[piece][0]
        return start + (position - self.starts[piece]) if self.copied[piece] else start

    def source_end(self, position: int) -> int:
        """The end in the old text of the character before `position` in the new one."""
        piece = bisect.bisect_right(self.starts, position - 1) - 1
        start, end = self.sources[piece]
        return start + (position - self.starts[piece]) if self.copied[piece] else end


@dataclass(frozen=True)
class View:
    """The reading of a text (`text`), and the passes that made it, to map offsets back."""

    text: str
    passes: tuple[_Pass, ...] = ()

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that the non-empty span `start:end` of `text` came from."""
        for rewriting in reversed(self.passes):
            start, end = rewriting.source_start(start), rewriting.source_end(end)
        return start, end

    @property
    def changed(self) -> bool:
        return bool(self.passes)


def normalised(text: str) -> View:
    """`text` with its JSON and HTML escapes read and its ANSI codes and invisible characters
    removed, and the map back."""
    passes: list[_Pass] = []
    for _ in range(_ROUNDS):
        before = len(passes)
        if "\\" in text:
            text = _rewrite(text, _JSON_ESCAPE, _json_character, passes)
        if "&" in text:
            text = _rewrite(text, _HTML_ENTITY, _html_character, passes)
        if "%" in text:
            text = _rewrite(text, _PERCENT, lambda match: chr(int(match.group(1), 16)), passes)
        if len(passes) == before:
            break
    text = _rewrite(text, _INVISIBLE, _visible, passes)
    return View(text, tuple(passes))


# What may make a line read differently: the start of an escape, a reference or an invisible
# character (a superset of what `normalised` rewrites, found in one scan).
_MAY_CHANGE = re.compile(_INVISIBLE.pattern + r"|\\[\"\\/bfnrtux0-7]|&#?[A-Za-z0-9]+|%[0-7][0-9a-fA-F]")


def changed_regions(text: str) -> list[tuple[int, int]]:
    """The runs of whole lines of `text` that its reading may change: only there can a secret
    be spelled so that the text as it is does not show it. Reading only these keeps the cost of
    a text with a few escapes (source code with a `\\n` here and there) near that of the text."""
    regions: list[tuple[int, int]] = []
    for match in _MAY_CHANGE.finditer(text):
        if regions and match.start() < regions[-1][1]:
            continue
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end == -1 else end + 1
        if regions and start <= regions[-1][1]:
            regions[-1] = (regions[-1][0], end)
        else:
            regions.append((start, end))
    return regions


def _visible(match: re.Match[str]) -> str:
    fullwidth = match.group("fullwidth")
    if fullwidth is None:
        return ""
    return " " if fullwidth == "\u3000" else chr(ord(fullwidth) - 0xFEE0)


def _json_character(match: re.Match[str]) -> str | None:
    high, low, code, single, hexadecimal, octal = match.groups()
    if hexadecimal is not None:
        return chr(int(hexadecimal, 16))
    if octal is not None:
        return chr(int(octal, 8))
    if high is not None:
        return (int(high, 16).to_bytes(2, "big") + int(low, 16).to_bytes(2, "big")).decode("utf-16-be")
    if code is not None:
        return chr(int(code, 16))
    return _JSON_SINGLE.get(single, single)


def _html_character(match: re.Match[str]) -> str | None:
    read = html.unescape(match.group())
    return None if read == match.group() else read  # an unknown name is text, not an entity


def _rewrite(
    text: str,
    pattern: re.Pattern[str],
    replacement: Callable[[re.Match[str]], str | None],
    passes: list[_Pass],
) -> str:
    """`text` with each match of `pattern` replaced (None: kept as it is), the pass added to
    `passes` when anything changed."""
    rewriting = _Pass()
    pieces: list[str] = []
    position = length = 0
    for match in pattern.finditer(text):
        new = replacement(match)
        if new is None:
            continue
        if match.start() > position:
            _add(rewriting, length, (position, match.start()), True)
            pieces.append(text[position : match.start()])
            length += match.start() - position
        if new:
            _add(rewriting, length, match.span(), False)
            pieces.append(new)
            length += len(new)
        position = match.end()
    if not rewriting.starts and position == 0:
        return text
    if position < len(text):
        _add(rewriting, length, (position, len(text)), True)
        pieces.append(text[position:])
    passes.append(rewriting)
    return "".join(pieces)


def _add(rewriting: _Pass, start: int, source: tuple[int, int], copied: bool) -> None:
    rewriting.starts.append(start)
    rewriting.sources.append(source)
    rewriting.copied.append(copied)
