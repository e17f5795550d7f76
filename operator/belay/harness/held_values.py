"""Where a value the harness holds appears in a text: as it is, base64- or hex-encoded, and split.

A held value is found
- **as it is** (the marker names its variable: `[REDACTED:OPENAI_API_KEY]`);
- **encoded**, as base64 (standard or URL-safe, at any of the three alignments it can have inside
  a longer encoded text, so `base64` of a file that holds it is found too) or as hex (lower or upper
  case): `[REDACTED:OPENAI_API_KEY base64]`, `[REDACTED:OPENAI_API_KEY hex]`;
- **split across lines**: the text with its line breaks taken out holds it (`echo ${K:0:20};
  echo ${K:20}`, base64 wrapped at 76 columns): each piece is replaced, the line breaks are kept,
  `[REDACTED:OPENAI_API_KEY split]`, `[REDACTED:OPENAI_API_KEY base64 split]`;
- **split across two outputs**: the caller passes the end of the subagent's previous output
  (`before`); a value that begins there and ends in this text is found, and its piece here is
  replaced. So that the first output does not carry the first half into the record, a text that
  ends with the first `MIN_FRAGMENT` or more characters of a held value has them replaced too.

Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import base64
import bisect
import functools
import re
from collections.abc import Iterator

from belay.harness.normalised import fold, normalised

# The shortest piece of a held value at the end of an output that is taken for its first half.
MIN_FRAGMENT = 10
# The longest end of an output kept to find a value split across two outputs.
MAX_TAIL_CHARS = 8 * 1024
_LINE = re.compile(r"[^\r\n]+")

Span = tuple[int, int, str]


@functools.cache
def variants(value: str) -> tuple[tuple[str, str | None], ...]:
    """The forms of a held value to look for, each with the detector that names it (None: as it
    is). The base64 forms are the characters that depend only on the value, at each alignment."""
    raw = value.encode()
    found: dict[str, str | None] = {value: None}
    for form in (raw.hex(), raw.hex().upper()):
        found.setdefault(form, "hex")
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        start = -(-8 * offset // 6)  # the first character whose six bits are all the value's
        end = 8 * (offset + len(raw)) // 6
        core = encoded[start:end]
        for form in (core, core.replace("+", "-").replace("/", "_")):
            if len(form) >= len(value):
                found.setdefault(form, "base64")
    return tuple(found.items())


def held_spans(text: str, held: tuple[tuple[str, str], ...], before: str = "") -> list[Span]:
    """(start, end, kind) in `text` of every form of each (value, kind) in `held`, whole, split
    across lines, split between `before` (the end of the previous output) and `text`, or begun at
    its end; in the text as it is, and in its reading (`belay.harness.normalised`: JSON and HTML
    escapes read, ANSI codes and invisible characters removed, lower-cased), the span of the text
    a form in the reading came from (exact: see that module), with ` normalised` in its kind."""
    combined = f"{before}\n{text}" if before else text
    shift = len(combined) - len(text)
    found: list[Span] = []
    for start, end, named in _spans(combined, held, fold_forms=False):
        if end > shift:  # else all in the previous output: found (and recorded) there
            found.append((max(start, shift) - shift, end - shift, named))
    view = normalised(combined)
    reading = fold(view.text)
    for start, end, named in _spans(reading, held, fold_forms=True):
        start, end = view.original(start, end)
        if end > shift:
            found.append((max(start, shift) - shift, end - shift, f"{named} normalised"))
    return found


def _spans(combined: str, held: tuple[tuple[str, str], ...], *, fold_forms: bool) -> Iterator[Span]:
    """Every form of each held value in `combined` (its forms lower-cased with `fold_forms`)."""
    pieces = _Lines(combined)
    for value, kind in held:
        seen = set()
        for form, detector in variants(value):
            form = fold(form) if fold_forms else form
            if form in seen:
                continue  # the hex forms, lower-cased, are one
            seen.add(form)
            label = kind if detector is None else f"{kind} {detector}"
            for start, end, split in pieces.find(form):
                yield start, end, f"{label} split" if split else label
            yield from _first_half(combined, form, f"{label} split")


def _first_half(text: str, form: str, label: str) -> Iterator[Span]:
    """The end of `text` (less a final line break) when it is the first piece of `form`."""
    end = len(text.rstrip("\r\n"))
    for length in range(min(len(form) - 1, end), MIN_FRAGMENT - 1, -1):
        if text.endswith(form[:length], 0, end):
            yield end - length, end, label
            return


class _Lines:
    """A text's lines joined without their line breaks, to find what a line break splits."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = [match.span() for match in _LINE.finditer(text)] if "\n" in text or "\r" in text else []
        self.joined = "".join(text[s:e] for s, e in self.lines)
        self.starts: list[int] = []
        position = 0
        for start, end in self.lines:
            self.starts.append(position)
            position += end - start

    def find(self, form: str) -> Iterator[tuple[int, int, bool]]:
        """(start, end, split) of each place `form` is in the text: each piece of a split one."""
        position = self.text.find(form)
        while position != -1:
            yield position, position + len(form), False
            position = self.text.find(form, position + len(form))
        if not self.lines:
            return
        position = self.joined.find(form)
        while position != -1:
            end = position + len(form)
            first = bisect.bisect_right(self.starts, position) - 1
            last = bisect.bisect_right(self.starts, end - 1) - 1
            if first != last:  # whole on one line: found above
                for index in range(first, last + 1):
                    line_start, line_end = self.lines[index]
                    offset = self.starts[index]
                    start_here = line_start + max(position - offset, 0)
                    end_here = line_start + min(end - offset, line_end - line_start)
                    yield start_here, end_here, True
            position = self.joined.find(form, end)


def tail_of(before: str, text: str, held: tuple[tuple[str, str], ...]) -> str:
    """What to keep of a subagent's output after `text`, to find a value it splits with the next
    one: as much as the longest form of a held value, at most MAX_TAIL_CHARS."""
    if not held:
        return ""
    longest = max(len(form) for value, _ in held for form, _ in variants(value))
    keep = min(longest, MAX_TAIL_CHARS)
    combined = f"{before}\n{text}" if before else text
    return combined[-keep:]
