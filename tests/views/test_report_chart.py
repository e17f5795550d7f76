"""The report's chart never prints a label over another: interruptions close together (a session
killed and resumed again and again, as `belay run`, `kill -9`, `belay resume` three times did
in 22 s, the moments below) each get a label that covers no other interruption's band and no other
label, shortened to its length or left to its tooltip where the words do not fit."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from belay.views.report.chart import GAP_LABEL_PX, PLOT_X0, Axis, chart
from belay.views.report.model import Bar, Gap, Row, SessionReport

START = datetime(2026, 12, 7, 13, 9, 58, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


# Three interruptions of 8.9 s, 3.9 s and 5.3 s, with attempts of 2 s and 1 s between them.
GAPS = [(5.0, 13.9), (15.9, 19.8), (20.8, 26.1)]


def report() -> SessionReport:
    attempts = [Bar(kind="attempt", label="attempt 1", start=at(0), end=at(5.0))]
    attempts += [
        Bar(
            kind="attempt", label=f"attempt {n + 2}", start=at(end), end=at(GAPS[n + 1][0] if n < 2 else 33.0)
        )
        for n, (_, end) in enumerate(GAPS)
    ]
    return SessionReport(
        session_id="s",
        phase="Succeeded",
        goal="g",
        now=at(33.0),
        source="the record",
        rows=[Row(kind="session", label="attempts", bars=attempts)],
        gaps=[
            Gap(attempt=n + 1, start=at(a), end=at(b), resumed_by=n + 2, why="lost")
            for n, (a, b) in enumerate(GAPS)
        ],
        scope_changes=[],
        steps=[],
        waits=[],
        deliverables=[],
    )


def test_interruption_labels_cover_no_other_band_and_no_other_label() -> None:
    shown = report()
    axis = Axis([at(0), at(33.0), *(at(s) for gap in GAPS for s in gap)], PLOT_X0, 770)
    svg = chart(shown, axis)
    bands = [(axis.x(at(a)), axis.x(at(b))) for a, b in GAPS]
    labels = []
    for x, anchor, words in re.findall(
        r'<text x="([\d.]+)" y="\d+" class="gaplabel"(?: text-anchor="(\w+)")?>([^<]*)</text>', svg
    ):
        anchor = anchor or "start"
        width = GAP_LABEL_PX * len(words)
        start = {"start": float(x), "end": float(x) - width, "middle": float(x) - width / 2}[anchor]
        labels.append((start, start + width, words))
    assert labels, svg
    for index, (a, b, words) in enumerate(labels):
        for other_index, (c, d, other) in enumerate(labels):
            if other_index != index:
                assert b <= c or d <= a, f"{words!r} and {other!r} overlap"
        inside = [band for band in bands if band[0] - 1 <= a and b <= band[1] + 1]
        for band in bands:
            if band not in inside:
                assert b <= band[0] or band[1] <= a, f"{words!r} covers the band {band}"
    # Every interruption says its length somewhere: on the chart, or in its tooltip.
    for a, b in GAPS:
        length = f"{b - a:.1f} s"
        assert length in svg
