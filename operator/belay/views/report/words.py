"""Words and escaping for the report's page: the only ways record text reaches it, and lengths
and moments in words.

Everything that came from the record (a goal, a note, a reason, a name a model chose) is hostile
input: it reaches the page only through `escaped` (the views' `inline`, so newlines and control
characters are shown as `\\n` and `\\uXXXX`, then HTML-escaped) and only through `href` into a
link (file, http and https URLs; anything else is shown as text).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from belay.views.escaping import inline

LINK_SCHEMES = ("file", "http", "https")


def escaped(value: object) -> str:
    """Record text as HTML text or an attribute value: escaped, control characters and newlines
    made visible (an item stays one line, as on the text page)."""
    return html.escape(inline(str(value)), quote=True)


def href(url: str) -> str | None:
    """A link target only for a file, http or https URL; anything else (javascript:, data:) is
    never a link."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    if scheme not in LINK_SCHEMES or inline(url) != url or any(c.isspace() for c in url):
        return None
    return escaped(url)


def shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def duration(seconds: float) -> str:
    """A length of time for a person: 0.04 s, 4.2 s, 42 s, 3 min 4 s, 2 h 14 min, 3 d 4 h."""
    seconds = max(0.0, seconds)
    # Each form is chosen by the value it prints, so 0.999 s is "1.0 s", never "1.00 s".
    if round(seconds, 2) < 1:
        return f"{seconds:.2f} s"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    if round(seconds) < 60:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def span(start: datetime, end: datetime | None, now: datetime) -> float:
    return ((end or now) - start).total_seconds()


def covered(spans: Iterable[tuple[datetime, datetime | None]], now: datetime) -> float:
    """Seconds during which at least one of the spans was open: waits that overlap count once."""
    total, reach = 0.0, None
    for start, end in sorted((start, end or now) for start, end in spans):
        if reach is None or start > reach:
            total += (end - start).total_seconds()
            reach = end
        elif end > reach:
            total += (end - reach).total_seconds()
            reach = end
    return total


def clock(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"
