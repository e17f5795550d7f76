"""The report's page: one self-contained HTML file that shows one session, or an objective's
sessions on one time axis, each with its briefing beside its timeline, what a person reads first,
and tables of interruptions, recoveries, waits, steps and deliverables with how to fetch each.

The page is one file: inline CSS and SVG, no script, no font, nothing fetched, and a
Content-Security-Policy that forbids all of those to the browser as well. Record text reaches it
only through `belay.views.report.words`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from belay.views.report.chart import PLOT_W, PLOT_X0, Axis, chart, moments
from belay.views.report.model import BarKind, MarkKind, SessionReport
from belay.views.report.words import clock, covered, duration, escaped, href, span

PHASE_CLASS = {
    "Succeeded": "good",
    "Running": "info",
    "ReadyForReview": "good",
    "WaitingOnUser": "user",
    "WaitingOnExternal": "ext",
    "Interrupted": "bad",
    "Recovering": "bad",
    "RecoveryFailed": "bad",
    "NeedsAttention": "bad",
    "Failed": "bad",
    "Pending": "info",
}

_ON_YOU = ("on_user", "approval")


def _interruption_lines(report: SessionReport) -> list[tuple[str, str]]:
    lines = []
    for gap in report.gaps:
        length = duration(span(gap.start, gap.end, report.now))
        doing = f" It was doing: {gap.doing}." if gap.doing else ""
        if gap.resumed_by:
            after = f"; attempt {gap.resumed_by} resumed it at {clock(gap.end)}."
        else:
            after = "; not resumed yet." + (f" Next: {gap.next}." if gap.next else "")
        lines.append(
            (
                "bad",
                f"Interrupted {length}: {gap.why}.{doing} Attempt {gap.attempt}'s last recorded event was at "
                f"{clock(gap.start)}{after}",
            )
        )
    if report.harness_lost_untimed:
        lines.append(
            ("bad", f"Harness attempts lost: {report.harness_lost_untimed} (times not in the status).")
        )
    return lines


def _change_lines(report: SessionReport) -> list[tuple[str, str]]:
    """The recoveries (one line per who recovered), rejections and scope changes."""
    lines = []
    for who, group in itertools.groupby(report.recoveries, key=lambda line: line.by):
        recovered = list(group)
        css = "recovery" if all(line.ok for line in recovered) else "bad"
        lines.append(
            (
                css,
                f"Recovery by {who}, from {clock(recovered[0].at)}: "
                + "; ".join(r.text for r in recovered)
                + ".",
            )
        )
    for rejection in report.rejections:
        lines.append(
            (
                "bad",
                f"Rejected {rejection.name} at {clock(rejection.at)} by {rejection.by}: {rejection.reason}.",
            )
        )
    for line in report.scope_changes:
        lines.append(
            (
                "scope",
                f"Scope changed at {clock(line.at)} by {line.by} (request v{line.request_version}): "
                f"{line.summary}",
            )
        )
    return lines


def _wait_lines(report: SessionReport) -> list[tuple[str, str]]:
    """How long the session waited on you, on external conditions and on your review."""
    now = report.now
    lines = []
    for kinds, css, whom in (
        (_ON_YOU, "user", "you"),
        (("on_external",), "ext", "external conditions"),
        (("review",), "review", "your review"),
    ):
        waits = [w for w in report.waits if w.kind in kinds]
        if not waits:
            continue
        total = covered([(w.opened, w.resolved) for w in waits if w.opened is not None], now)
        items = []
        for w in waits:
            if w.opened is None:
                items.append(f"{w.wait_id} (open)")
                continue
            length = duration(span(w.opened, w.resolved, now))
            state = f"{w.outcome} by {w.by}" if w.resolved else "still open"
            items.append(f"{w.wait_id} {length}, {state}")
        open_count = sum(w.resolved is None for w in waits)
        still = f", {open_count} still open" if open_count else ""
        lines.append(
            (css, f"Waited on {whom} {duration(total)} in {len(waits)} wait(s){still}: " + "; ".join(items))
        )
    return lines


def step_counts(report: SessionReport) -> tuple[int, int, int]:
    """(done, of how many, verified) steps, a subagent's own task not being a step: what the
    glance line and the table of sessions both say."""
    steps = [s for s in report.steps if s.step_id != s.subagent]
    done = sum(s.status in ("done", "verified") for s in steps) + report.steps_omitted_done
    verified = sum(s.status == "verified" for s in steps) + report.steps_omitted_verified
    return done, len(steps) + report.steps_omitted, verified


def _done_line(report: SessionReport) -> tuple[str, str]:
    done, total, verified = step_counts(report)
    running = [s.step_id for s in report.steps if s.step_id != s.subagent and s.status == "running"]
    text = f"Done: {done} of {total} steps ({verified} verified)"
    complete = done == total and bool(total)
    if not report.steps_known:
        text, complete = "Done: steps not known yet", False
    if running:
        text += "; running: " + ", ".join(running)
    if report.deliverables:
        names = ", ".join(
            d.name + (" (ready for review)" if d.ready_for_review else "") for d in report.deliverables
        )
        text += f"; deliverables: {names}"
    return ("good" if complete else "info", text + ".")


def _glance(report: SessionReport) -> list[tuple[str, str]]:
    """(class, text) lines a person reads first: interruptions, waits on them and on others, what
    is done."""
    return [
        *_interruption_lines(report),
        *_change_lines(report),
        *_wait_lines(report),
        _done_line(report),
    ]


CSS = """
body{font-family:"DejaVu Sans",Verdana,sans-serif;font-size:13px;color:#212121;margin:16px 20px;
background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:14px 0 6px}h3{font-size:13px;margin:10px 0 2px}
.phase{display:inline-block;padding:1px 8px;border-radius:10px;font-size:13px;color:#fff;
vertical-align:middle;background:#607d8b}
.phase.good{background:#2e7d32}.phase.bad{background:#c62828}.phase.user{background:#ef6c00}
.phase.ext{background:#8e24aa}.phase.info{background:#1e88e5}
.goal{margin:2px 0 8px;color:#424242;max-width:1100px}
ul.glance{list-style:none;padding:0;margin:6px 0}
ul.glance li{margin:3px 0;padding:4px 8px;border-left:5px solid #90a4ae;background:#fff}
ul.glance li.bad{border-color:#c62828;background:#ffebee}
ul.glance li.user{border-color:#ef6c00;background:#fff3e0}
ul.glance li.ext{border-color:#8e24aa;background:#f3e5f5}
ul.glance li.good{border-color:#2e7d32;background:#e8f5e9}
ul.glance li.review{border-color:#00897b;background:#e0f2f1}
ul.glance li.recovery{border-color:#1565c0;background:#e3f2fd}
ul.glance li.scope{border-color:#1565c0;background:#fff}
.layout{display:grid;grid-template-columns:minmax(0,7fr) minmax(260px,3fr);gap:16px;align-items:start}
.panel{background:#fff;border:1px solid #e0e0e0;border-radius:4px;padding:8px 10px}
.legend{font-size:11px;color:#424242;margin:0 0 4px}
.legend span{display:inline-block;margin-right:10px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:9px;border-radius:2px;margin-right:3px;vertical-align:middle}
svg.chart{display:block}
svg .label{font-size:11px;fill:#212121}svg .label-session,svg .label-subagent{font-weight:bold}
svg .groupbg{fill:#eceff1}svg .tick{stroke:#e0e0e0}
svg .ticklabel{font-size:10px;fill:#616161}
svg .breaklabel{font-size:10px;fill:#455a64;text-anchor:middle}
svg .gaplabel{font-size:11px;font-weight:bold;fill:#c62828}svg .scopelabel{font-size:10px;fill:#1565c0}
svg .waitlabel{font-size:10px;fill:#424242}svg .inbar{font-size:10px;fill:#fff}
svg .glyph{font-size:13px;font-weight:bold;text-anchor:middle;paint-order:stroke;stroke:#fff;stroke-width:3px}
aside .brief{font-size:11.5px;line-height:1.35;overflow-wrap:anywhere}
aside .brief .l0{font-weight:bold;margin-top:7px}aside .brief .l1{padding-left:10px}
aside .brief .l2{padding-left:22px;color:#424242}
table{border-collapse:collapse;background:#fff;font-size:12px;margin-bottom:6px}
th,td{border:1px solid #e0e0e0;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eceff1}td.num{text-align:right;white-space:nowrap}td.when{white-space:nowrap}code{font-size:11.5px;overflow-wrap:anywhere}
.flag{color:#c62828;font-weight:bold}.muted{color:#757575}
section.session{margin-bottom:28px}footer{color:#757575;font-size:11px;margin-top:16px}
"""

# Each colour, and the bars (kind, status; None: any status) it is shown for in the legend.
LEGEND: tuple[tuple[str, str, tuple[tuple[BarKind, str | None], ...]], ...] = (
    ("#2e7d32", "step verified", (("step", "verified"),)),
    ("#81c784", "step done", (("step", "done"),)),
    ("#1e88e5", "step running", (("step", "running"),)),
    ("#f9a825", "step blocked", (("step", "blocked"),)),
    ("#9e9e9e", "step cancelled", (("step", "cancelled"),)),
    ("#c62828", "failed", (("step", "failed"), ("call", "failed"))),
    ("#546e7a", "tool call", (("call", None),)),
    ("#ff8f00", "tool call without a result", (("call", "open"), ("call", "unknown"))),
    ("#ef6c00", "waits on you / approval", (("wait_user", None), ("approval", None))),
    ("#8e24aa", "waits on external", (("wait_external", None),)),
    ("#00897b", "ready for review", (("review", None),)),
    ("#455a64", "harness attempt", (("attempt", None),)),
    ("#90a4ae", "subagent at work", (("subagent", None),)),
)


# What each glyph on the chart means, shown in the legend only where the chart has one.
GLYPHS: tuple[tuple[MarkKind, bool | None, str], ...] = (
    ("checkpoint", True, '<b style="color:#1b5e20">\u25c6</b> verified checkpoint'),
    ("checkpoint", False, '<b style="color:#1b5e20">\u25c7</b> checkpoint, not verified'),
    ("deliverable", None, '<b style="color:#f9a825">\u2605</b> deliverable published'),
    ("sandbox", None, '<b style="color:#c62828">\u21ba</b> sandbox lost'),
    ("restored", None, '<b style="color:#1565c0">\u21ba</b> new sandbox restored from a checkpoint'),
    ("unknown", None, '<b style="color:#ef6c00">?</b> outcome unknown after an interruption'),
    ("reconciled", None, '<b style="color:#2e7d32">\u2713</b> outcome reconciled'),
    ("recovery_failed", None, '<b style="color:#c62828">\u2716</b> recovery failed'),
    ("rejected", None, '<b style="color:#c62828">\u2718</b> deliverable rejected'),
    ("executor", None, '<b style="color:#6a1b9a">\u21c4</b> moved to another executor'),
    ("asked", None, '<b style="color:#2e7d32">\u25cf</b> asked'),
    ("ended", None, '<b style="color:#2e7d32">\u25cf</b> session ended'),
)


def _legend(report: SessionReport) -> str:
    bars = {(bar.kind, bar.status) for row in report.rows for bar in row.bars}
    shown = [
        f'<span><i class="sw" style="background:{color}"></i>{label}</span>'
        for color, label, kinds in LEGEND
        if any(kind == k and status in (None, s) for kind, status in kinds for k, s in bars)
    ]
    marks = {(m.kind, m.ok) for row in report.rows for m in row.marks}
    for kind, ok, label in GLYPHS:
        if any(k == kind and (ok is None or o == ok) for k, o in marks):
            shown.append(f"<span>{label}</span>")
    if report.scope_changes:
        shown.append('<span><b style="color:#1565c0">\u2506</b> scope change</span>')
    if report.gaps:
        shown.append('<span class="flag">\u26a1 interrupted: no attempt alive (hatched)</span>')
    return "".join(shown)


def render_html(reports: Sequence[SessionReport], *, title: str | None = None) -> str:
    """One self-contained page: every report on one shared time axis, each with its briefing,
    its interruptions, waits, steps and deliverables."""
    if not reports:
        raise ValueError("a report needs at least one session")
    instants = [m for r in reports for m in moments(r)]
    axis = Axis(instants, PLOT_X0, PLOT_W)
    heading = title or (
        f"Session {reports[0].session_id}" if len(reports) == 1 else f"{len(reports)} sessions"
    )
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        # Nothing is fetched and nothing runs, whatever the record holds.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escaped(heading)}: timeline</title><style>{CSS}</style></head><body>",
    ]
    if len(reports) > 1:
        parts.append(f"<h1>{escaped(heading)}</h1>")
        parts.append(_overview(reports))
    for report in reports:
        parts.append(_session_section(report, axis, single=len(reports) == 1))
    now = max(r.now for r in reports)
    parts.append(
        f"<footer>Made at {clock(now)} from "
        + "; ".join(f"{escaped(r.session_id)}: {escaped(r.source)}" for r in reports)
        + ". This file needs no network: it has no script, font or image to fetch.</footer></body></html>\n"
    )
    return "".join(parts)


def _overview(reports: Sequence[SessionReport]) -> str:
    rows = []
    for r in reports:
        user = covered([(w.opened, w.resolved) for w in r.waits if w.kind in _ON_YOU and w.opened], r.now)
        ext = covered(
            [(w.opened, w.resolved) for w in r.waits if w.kind == "on_external" and w.opened], r.now
        )
        lost = covered([(g.start, g.end) for g in r.gaps], r.now)
        done, total, _ = step_counts(r)
        names = ", ".join(d.name for d in r.deliverables) or "-"
        rows.append(
            f'<tr><td><a href="#session-{escaped(r.session_id)}">{escaped(r.session_id)}</a></td>'
            f"<td>{_phase_badge(r.phase)}</td><td>{len(r.gaps)} ({duration(lost)})</td>"
            f"<td>{duration(user)}</td><td>{duration(ext)}</td>"
            f"<td>{f'{done} of {total}' if r.steps_known else '-'}</td><td>{escaped(names)}</td></tr>"
        )
    return (
        "<table><tr><th>session</th><th>phase</th><th>interruptions</th><th>waited on you</th>"
        "<th>waited on external</th><th>steps done</th><th>deliverables</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _phase_badge(phase: str) -> str:
    return f'<span class="phase {PHASE_CLASS.get(phase, "")}">{escaped(phase)}</span>'


def _session_section(report: SessionReport, axis: Axis, *, single: bool) -> str:
    tag = "h1" if single else "h2"
    parts = [
        f'<section class="session" id="session-{escaped(report.session_id)}">',
        f"<{tag}>Session {escaped(report.session_id)} {_phase_badge(report.phase)}</{tag}>",
        f'<p class="goal">{escaped(report.goal or "(no request recorded)")}</p>',
        '<ul class="glance">',
    ]
    parts += [f'<li class="{css_class}">{escaped(text)}</li>' for css_class, text in _glance(report)]
    parts.append("</ul>")
    legend = _legend(report)
    parts.append('<div class="layout"><div class="panel timeline"><h2>Timeline</h2>')
    parts.append(f'<p class="legend">{legend}</p>')
    parts.append(chart(report, axis))
    parts.append("</div>")
    parts.append('<aside class="panel"><h2>Briefing</h2><div class="brief">')
    for level, text in report.briefing:
        parts.append(f'<div class="l{min(level, 2)}">{escaped(text)}</div>')
    if not report.briefing:
        parts.append('<div class="muted">no briefing</div>')
    parts.append("</div></aside></div>")
    parts.append(_history_tables(report) + _work_tables(report))
    parts.append("</section>")
    return "".join(parts)


Cell = str | tuple[str, str]  # HTML, or (HTML, the cell's class)


def _table(title: str, heads: Sequence[str], rows: Sequence[Sequence[Cell]], empty: str | None) -> str:
    """A titled table of rows of cells that are already HTML; with no rows, `empty` in words (None:
    the table is left out)."""
    if not rows:
        return "" if empty is None else f'<h2>{title}</h2><p class="muted">{empty}</p>'
    head = "".join(f"<th>{h}</th>" for h in heads)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c}</td>" if isinstance(c, str) else f'<td class="{c[1]}">{c[0]}</td>' for c in row)
        + "</tr>"
        for row in rows
    )
    return f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>"


def _history_tables(report: SessionReport) -> str:
    """The interruptions, recoveries, scope changes and rejections."""
    interruptions: list[list[Cell]] = [
        [
            str(gap.attempt),
            (clock(gap.start), "when"),
            escaped(f"{clock(gap.end)} by attempt {gap.resumed_by}" if gap.resumed_by else "not yet"),
            (duration(span(gap.start, gap.end, report.now)), "num"),
            escaped(gap.why),
            escaped(gap.doing or "-"),
        ]
        for gap in report.gaps
    ]
    recoveries: list[list[Cell]] = [
        [
            (clock(line.at), "when"),
            escaped(line.by),
            (
                escaped(line.text)
                + (f'<br><span class="muted">{escaped(line.detail)}</span>' if line.detail else ""),
                "" if line.ok else "flag",
            ),
        ]
        for line in report.recoveries
    ]
    scope: list[list[Cell]] = [
        [(clock(c.at), "when"), f"v{c.request_version}", escaped(c.by), escaped(c.summary)]
        for c in report.scope_changes
    ]
    rejections: list[list[Cell]] = [
        [(clock(r.at), "when"), escaped(r.name), escaped(r.by), escaped(r.reason)] for r in report.rejections
    ]
    return "".join(
        [
            _table(
                "Interruptions",
                ["attempt", "last recorded event", "resumed", "for", "why", "running then"],
                interruptions,
                "none",
            ),
            _table("Recoveries", ["at", "by", "what"], recoveries, "none"),
            _table("Scope changes", ["at", "request", "by", "what changed"], scope, None),
            _table("Rejections", ["at", "deliverable", "by", "reason"], rejections, None),
        ]
    )


def _work_tables(report: SessionReport) -> str:
    """The waits and approvals, the steps and the deliverables."""
    now = report.now
    waits: list[list[Cell]] = [
        [
            escaped(w.wait_id),
            escaped(w.subagent or "-"),
            escaped(w.on),
            (clock(w.opened), "when"),
            ("-" if w.opened is None else duration(span(w.opened, w.resolved, now)), "num"),
            escaped(f"{w.outcome} by {w.by} at {clock(w.resolved)}" if w.resolved else "still open"),
            escaped(w.reason),
        ]
        for w in report.waits
    ]
    steps: list[list[Cell]] = [
        [
            escaped(s.step_id),
            escaped(s.subagent or "-"),
            escaped(s.title),
            escaped(s.status),
            (clock(s.started), "when"),
            ("-" if s.started is None else duration(span(s.started, s.ended, now)), "num"),
            (f"{s.calls}" + (f" ({s.failed_calls} failed)" if s.failed_calls else ""), "num"),
            '<span class="flag">\u26a1 interrupted</span>' if s.interrupted else "",
        ]
        for s in report.steps
        if s.step_id != s.subagent  # a subagent's own task is its row in the chart
    ]
    deliverables: list[list[Cell]] = []
    for d in report.deliverables:
        link = href(d.location) if d.location else None
        where = f'<br><a href="{link}">{escaped(d.location)}</a>' if link else ""
        where = where or (f"<br>{escaped(d.location)}" if d.location else "")
        deliverables.append(
            [
                escaped(d.name) + (" (ready for review)" if d.ready_for_review else ""),
                escaped(d.subagent or "-"),
                ("-" if d.size is None else f"{d.size} bytes", "num"),
                f"<code>{escaped(d.sha256)}</code>",
                f"<code>{escaped(d.command)}</code>{where}",
            ]
        )
    return "".join(
        [
            _table(
                "Waits and approvals",
                ["wait", "subagent", "on", "opened", "for", "ended", "reason"],
                waits,
                "none",
            ),
            _table(
                "Steps",
                ["step", "subagent", "title", "status", "started", "took", "tool calls", ""],
                steps,
                "no step recorded",
            ),
            _table("Deliverables", ["name", "subagent", "size", "sha256", "fetch"], deliverables, "none yet"),
        ]
    )
