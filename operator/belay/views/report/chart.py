"""The report's chart: one inline SVG timeline per session, on an axis shared by every session of
the page.

A long idle stretch (a night spent waiting for a person) would squeeze everything else into a
corner, so the axis is broken: no stretch between two consecutive moments takes more than
`MAX_GAP_SHARE` of the width, and a shortened one is drawn as a break labelled with its real
length. Every bar and wait says its duration in words, so nothing has to be read off the scale.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime

from belay.views.report.model import Bar, Mark, Row, SessionReport
from belay.views.report.words import duration, escaped, shortened, span

# A stretch between two consecutive moments is drawn at most this share of the axis.
MAX_GAP_SHARE = 0.2


class Axis:
    """Time to x: linear between consecutive moments, except that no stretch is wider than a cap
    (`MAX_GAP_SHARE` of everything drawn); a capped stretch is a break labelled with its length."""

    def __init__(self, moments: Iterable[datetime], x0: float, width: float) -> None:
        times = sorted({m.timestamp() for m in moments})
        if not times:
            times = [0.0]
        if len(times) == 1:
            times.append(times[0] + 1.0)
        self.times = times
        gaps = [b - a for a, b in itertools.pairwise(times)]
        cap = sum(gaps)
        for _ in range(60):  # the cap is a fixed point: a share of the width drawn with it
            new_cap = MAX_GAP_SHARE * sum(min(g, cap) for g in gaps)
            if abs(new_cap - cap) <= 1e-9 * max(cap, 1.0):
                break
            cap = new_cap
        drawn = [min(g, cap) if cap > 0 else g for g in gaps]
        total = sum(drawn) or 1.0
        self.xs = [x0]
        for d in drawn:
            self.xs.append(self.xs[-1] + width * d / total)
        self.breaks = [
            (times[i], times[i + 1], self.xs[i], self.xs[i + 1])
            for i, g in enumerate(gaps)
            if cap > 0 and g > cap * 1.000001
        ]
        self.start = datetime.fromtimestamp(times[0], UTC)
        self.end = datetime.fromtimestamp(times[-1], UTC)

    def x(self, moment: datetime) -> float:
        t = moment.timestamp()
        times, xs = self.times, self.xs
        if t <= times[0]:
            return xs[0]
        if t >= times[-1]:
            return xs[-1]
        low, high = 0, len(times) - 1
        while high - low > 1:
            mid = (low + high) // 2
            if times[mid] <= t:
                low = mid
            else:
                high = mid
        span = times[high] - times[low]
        return xs[low] + (xs[high] - xs[low]) * ((t - times[low]) / span if span else 0.0)

    def time_at(self, x: float) -> datetime:
        xs, times = self.xs, self.times
        for i in range(len(xs) - 1):
            if xs[i] <= x <= xs[i + 1]:
                share = (x - xs[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
                return datetime.fromtimestamp(times[i] + share * (times[i + 1] - times[i]), UTC)
        return self.end


def moments(report: SessionReport) -> list[datetime]:
    found: list[datetime] = []
    for row in report.rows:
        for bar in row.bars:
            found += [bar.start, bar.end or report.now]
        found += [m.at for m in row.marks]
    for gap in report.gaps:
        found += [gap.start, gap.end or report.now]
    found += [line.at for line in report.scope_changes]
    if any(bar.end is None for row in report.rows for bar in row.bars) or any(
        g.end is None for g in report.gaps
    ):
        found.append(report.now)
    return found


# --------------------------------------------------------------------------------------------------
# Drawing

VIEW_W = 1000
LABEL_W = 200
PLOT_X0 = 210
PLOT_W = 770
AXIS_H = 40
ROW_H = 20
GROUP_GAP = 8
CALL_BUCKET_PX = 2  # tool calls starting this close are drawn as one tick
CALLS_NAMED = 8  # calls a merged tick names on hover
MARK_SPACING = 10  # the least distance between two marks in a row

STEP_FILL = {
    "verified": "#2e7d32",
    "done": "#81c784",
    "running": "#1e88e5",
    "failed": "#c62828",
    "blocked": "#f9a825",
    "cancelled": "#9e9e9e",
    "planned": "#cfd8dc",
}
WAIT_FILL = {
    "wait_user": "#ef6c00",
    "approval": "#ef6c00",
    "wait_external": "#8e24aa",
    "review": "#00897b",
}
CALL_FILL = {"ok": "#546e7a", "failed": "#c62828", "open": "#ff8f00", "unknown": "#ff8f00"}


def chart(report: SessionReport, axis: Axis) -> str:
    """The timeline of one session as inline SVG."""
    body: list[str] = []
    y = AXIS_H
    previous_kind: str | None = None
    for row in report.rows:
        if row.kind in ("session", "subagent") and previous_kind is not None:
            y += GROUP_GAP
        body.append(_row(row, y, axis, report.now))
        y += ROW_H
        previous_kind = row.kind
    height = y + 6
    over: list[str] = []
    bands = [
        (axis.x(gap.start), max(axis.x(gap.end or report.now), axis.x(gap.start) + 4)) for gap in report.gaps
    ]
    placed: list[tuple[float, float]] = []
    for gap, (x0, x1) in zip(report.gaps, bands, strict=True):
        length = duration(span(gap.start, gap.end, report.now))
        state = f"resumed by attempt {gap.resumed_by}" if gap.resumed_by else "not resumed yet"
        tip = f"interrupted {length}: {gap.why}; {state}" + (
            f"; it was doing: {gap.doing}" if gap.doing else ""
        )
        over.append(
            f'<g class="gap"><title>{escaped(tip)}</title>'
            f'<rect x="{x0:.1f}" y="{AXIS_H - 10}" width="{x1 - x0:.1f}" height="{height - AXIS_H + 10}" '
            f'fill="url(#hatch)" fill-opacity="0.6" stroke="#c62828" stroke-width="1"/>'
            + _gap_label(x0, x1, length, [b for b in bands if b != (x0, x1)], placed)
            + "</g>"
        )
    for line in report.scope_changes:
        x = axis.x(line.at)
        over.append(
            f'<g class="scope"><title>scope change v{line.request_version}: {escaped(line.summary)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_H - 10}" y2="{height}" stroke="#1565c0" '
            f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{height - 2}" class="scopelabel">'
            f"scope v{line.request_version}</text></g>"
        )
    return (
        f'<svg class="chart" viewBox="0 0 {VIEW_W} {height}" width="100%" role="img" '
        f'aria-label="timeline of {escaped(report.session_id)}" xmlns="http://www.w3.org/2000/svg">'
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffebee"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#ef9a9a" stroke-width="3"/></pattern></defs>'
        + _axis_svg(axis, height)
        + "".join(body)
        + "".join(over)
        + "</svg>"
    )


GAP_LABEL_PX = 6.5  # the width of one character of a gap's label, at its size, at the most


def _gap_text(x: float, anchor: str, words: str) -> str:
    where = f'x="{x:.1f}" y="{AXIS_H - 2}" class="gaplabel" text-anchor="{anchor}"'
    return f"<text {where}>{escaped(words)}</text>"


def _gap_label(
    x0: float, x1: float, length: str, others: list[tuple[float, float]], placed: list[tuple[float, float]]
) -> str:
    """The band's label where it covers no other band and no label placed before: right of the band,
    else left of it, in words ("interrupted 3.3 s"), else its length alone; else inside the band if
    it fits there, else none (the band's tooltip says it all). Several interruptions close together
    would otherwise print their labels over each other and under each other's bands."""
    for words in (f"\u26a1 interrupted {length}", f"\u26a1 {length}"):
        width = GAP_LABEL_PX * len(words)
        for start, anchor, x in ((x1 + 3, "start", x1 + 3), (x0 - 3 - width, "end", x0 - 3)):
            extent = (start, start + width)
            if start < PLOT_X0 - 10 or extent[1] > VIEW_W:
                continue
            if any(a < extent[1] and extent[0] < b for a, b in (*others, *placed)):
                continue
            placed.append(extent)
            return _gap_text(x, anchor, words)
    words = f"\u26a1 {length}"
    if GAP_LABEL_PX * len(words) <= x1 - x0 - 4:
        placed.append((x0, x1))
        return _gap_text((x0 + x1) / 2, "middle", words)
    return ""


def _axis_svg(axis: Axis, height: int) -> str:
    parts = []
    same_day = axis.start.date() == axis.end.date()
    fmt = "%H:%M:%S" if same_day else "%m-%d %H:%M"
    # A session of a few seconds needs tenths, or neighbouring ticks read the same.
    tenths = same_day and (axis.end - axis.start).total_seconds() < 60
    placed: list[float] = []
    labels: set[str] = set()
    candidates = [PLOT_X0 + PLOT_W * i / 6 for i in range(7)]
    for _, _, bx0, bx1 in axis.breaks:
        candidates += [bx0, bx1]
    for x in sorted(candidates):
        if any(abs(x - other) < 70 for other in placed):
            continue
        moment = axis.time_at(x)
        label = moment.strftime(fmt) + (f".{moment.microsecond // 100_000}" if tenths else "")
        if label in labels:
            continue
        placed.append(x)
        labels.add(label)
        anchor = "end" if x > PLOT_X0 + PLOT_W - 30 else "middle"
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{height}" class="tick"/>'
            f'<text x="{x:.1f}" y="12" class="ticklabel" text-anchor="{anchor}">{label}</text>'
        )
    for start, end, bx0, bx1 in axis.breaks:
        middle = (bx0 + bx1) / 2
        parts.append(
            f'<g class="break"><title>the axis is shortened here: {duration(end - start)} pass between '
            f"these two moments</title>"
            f'<rect x="{bx0:.1f}" y="16" width="{bx1 - bx0:.1f}" height="{height - 16}" fill="#eceff1" '
            'opacity="0.6"/>'
            f'<text x="{middle:.1f}" y="26" class="breaklabel">\u2248 {duration(end - start)}</text></g>'
        )
    return "".join(parts)


def _row(row: Row, y: int, axis: Axis, now: datetime) -> str:
    parts = [f'<g class="row row-{row.kind}">']
    if row.kind in ("session", "subagent"):
        parts.append(f'<rect x="0" y="{y}" width="{VIEW_W}" height="{ROW_H}" class="groupbg"/>')
    label = shortened(row.label, 32)
    tip = f"<title>{escaped(row.title or row.label)}</title>"
    parts.append(
        f'<text x="{8 if row.kind in ("session", "subagent") else 20}" y="{y + 14}" '
        f'class="label label-{row.kind}">{tip}{escaped(label)}</text>'
    )
    calls: dict[int, list[Bar]] = {}
    for bar in row.bars:
        if bar.kind == "call":
            calls.setdefault(int(axis.x(bar.start) // CALL_BUCKET_PX), []).append(bar)
        else:
            parts.append(_bar(bar, y, axis, now))
    parts += [_calls(bucket, y, axis, now) for bucket in calls.values()]
    placed: list[float] = []
    for mark in sorted(row.marks, key=lambda m: m.at):
        # Marks a few pixels apart would print over each other: each moves right of the one before.
        x = axis.x(mark.at)
        if placed and x < placed[-1] + MARK_SPACING:
            x = placed[-1] + MARK_SPACING
        placed.append(x)
        parts.append(_mark(mark, y, x))
    parts.append("</g>")
    return "".join(parts)


def _calls(bucket: list[Bar], y: int, axis: Axis, now: datetime) -> str:
    """Tool calls that start within one bucket of pixels, as one tick: a long session's thousands
    of calls stay a few hundred elements."""
    if len(bucket) == 1:
        return _bar(bucket[0], y, axis, now)
    statuses = {bar.status for bar in bucket}
    status = next((s for s in ("failed", "unknown", "open") if s in statuses), "ok")
    x0 = min(axis.x(bar.start) for bar in bucket)
    x1 = max(axis.x(bar.end or now) for bar in bucket)
    shown = "; ".join(bar.detail for bar in bucket[:CALLS_NAMED])
    more = f"; and {len(bucket) - CALLS_NAMED} more" if len(bucket) > CALLS_NAMED else ""
    tip = f"<title>{len(bucket)} tool calls: {escaped(shown)}{more}</title>"
    return (
        f'<rect x="{x0:.1f}" y="{y + 14}" width="{max(x1 - x0, 1.5):.1f}" height="5" '
        f'fill="{CALL_FILL[status]}">{tip}</rect>'
    )


def _bar(bar: Bar, y: int, axis: Axis, now: datetime) -> str:
    x0 = axis.x(bar.start)
    x1 = axis.x(bar.end or now)
    length = duration(span(bar.start, bar.end, now))
    still = " so far, still open" if bar.end is None else ""
    tip = f"<title>{escaped(f'{bar.detail or bar.label}: {length}{still}')}</title>"
    if bar.kind == "call":
        fill = CALL_FILL.get(bar.status, "#546e7a")
        width = max(x1 - x0, 1.5)
        return f'<rect x="{x0:.1f}" y="{y + 14}" width="{width:.1f}" height="5" fill="{fill}">{tip}</rect>'
    if bar.kind in ("attempt", "subagent"):
        width = max(x1 - x0, 2)
        fill = "#455a64" if bar.kind == "attempt" else "#90a4ae"
        text = (
            f'<text x="{x0 + 4:.1f}" y="{y + 13}" class="inbar">{escaped(bar.label)}</text>'
            if bar.kind == "attempt" and width > 60
            else ""
        )
        return (
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{width:.1f}" height="12" rx="2" fill="{fill}">'
            f"{tip}</rect>" + text
        )
    if bar.kind == "step":
        width = max(x1 - x0, 2)
        fill = STEP_FILL.get(bar.status, "#90a4ae")
        open_edge = (
            f'<rect x="{x1 - 2:.1f}" y="{y + 2}" width="2" height="12" fill="#0d47a1"/>'
            if bar.end is None
            else ""
        )
        return (
            f'<rect x="{x0:.1f}" y="{y + 3}" width="{width:.1f}" height="10" rx="2" fill="{fill}">'
            f"{tip}</rect>" + open_edge
        )
    fill = WAIT_FILL.get(bar.kind, "#ef6c00")
    width = max(x1 - x0, 3)
    by = f", {bar.status}" if bar.status not in ("", "open") else ""
    words = f"{length}{by}" if bar.end is not None else f"{length}, still waiting"
    if x0 + width + 6 + 6.2 * len(words) <= VIEW_W:
        text = f'<text x="{x0 + width + 4:.1f}" y="{y + 13}" class="waitlabel">{escaped(words)}</text>'
    else:
        text = (
            f'<text x="{x0 - 4:.1f}" y="{y + 13}" class="waitlabel" text-anchor="end">{escaped(words)}</text>'
        )
    pattern = ' stroke-dasharray="3 2" fill-opacity="0.55"' if bar.end is None else ""
    return (
        f'<rect x="{x0:.1f}" y="{y + 4}" width="{width:.1f}" height="11" rx="2" fill="{fill}" '
        f'stroke="{fill}"{pattern}>{tip}</rect>' + text
    )


# The marks drawn as one character: the character and its colour.
TEXT_GLYPHS: dict[str, tuple[str, str]] = {
    "deliverable": ("\u2605", "#f9a825"),
    "restored": ("\u21ba", "#1565c0"),
    "sandbox": ("\u21ba", "#c62828"),
    "unknown": ("?", "#ef6c00"),
    "reconciled": ("\u2713", "#2e7d32"),
    "rejected": ("\u2718", "#c62828"),
    "recovery_failed": ("\u2716", "#c62828"),
    "executor": ("\u21c4", "#6a1b9a"),  # the session moved to another executor
}


def _mark(mark: Mark, y: int, x: float) -> str:
    tip = f"<title>{escaped(mark.label)}</title>"
    cy = y + 8
    if mark.kind == "checkpoint":
        fill = "#1b5e20" if mark.ok else "#ffffff"
        return (
            f'<path d="M{x:.1f} {cy - 5} L{x + 5:.1f} {cy} L{x:.1f} {cy + 5} L{x - 5:.1f} {cy} Z" '
            f'fill="{fill}" stroke="#1b5e20" stroke-width="1.2">{tip}</path>'
        )
    if mark.kind in TEXT_GLYPHS:
        char, color = TEXT_GLYPHS[mark.kind]
        return f'<text x="{x:.1f}" y="{cy + 5}" class="glyph" fill="{color}">{char}{tip}</text>'
    color = "#2e7d32" if mark.ok else "#c62828"
    return f'<circle cx="{x:.1f}" cy="{cy}" r="3.5" fill="{color}" stroke="#fff">{tip}</circle>'
