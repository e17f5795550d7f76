"""The fleet view's renderers: the table of sessions and its summary line, and an objective's.

Names, objectives, problems and commands are record text: each cell and line is one line
(`belay.views.escaping.inline`), so no name can add a row."""

from __future__ import annotations

from collections.abc import Sequence

from belay.views.escaping import inline
from belay.views.fleet.model import FleetView, ObjectiveView


def age(seconds: int | None) -> str:
    """As kubectl shows ages: 42s, 5m, 3h, 2d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table: every cell in full, however wide (nothing is cut when the output is piped),
    each on one line, columns two spaces apart, no trailing blanks."""
    header, rows = [inline(cell) for cell in header], [[inline(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for line in (header, *rows):
        padded = [cell.ljust(width) for cell, width in zip(line[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*padded, line[-1]]).rstrip())
    return "\n".join(lines)


def _cell(items: Sequence[str]) -> str:
    return ",".join(items) if items else "-"


def render_fleet(view: FleetView, *, with_namespace: bool = False, where: str = "") -> str:
    """The table and the summary line; `where` names the place an empty fleet was looked for."""
    header = [
        "SESSION",
        "OBJECTIVE",
        "PHASE",
        "USER",
        "EXTERNAL",
        "REVIEW",
        "DELIVERABLES",
        "LAST EVENT",
        "COMMAND",
    ]
    if with_namespace:
        header.insert(0, "NAMESPACE")
    rows = []
    for row in view.sessions:
        cells = [
            row.session,
            row.objective or "-",
            row.phase if not row.problem else f"{row.phase} ({row.problem})",
            _cell(row.waits_on_user),
            _cell(row.waits_on_external),
            _cell(row.ready_for_review),
            _cell(row.deliverables),
            age(row.last_event_age_s),
            row.command or "-",
        ]
        if with_namespace:
            cells.insert(0, row.namespace or "-")
        rows.append(cells)
    table = columns(header, rows) if rows else f"no sessions{f' in {where}' if where else ''}"
    return f"{table}\n{inline(view.summary.line)}"


def render_objective(view: ObjectiveView, *, with_namespace: bool = False) -> str:
    lines = [inline(f"Objective {view.objective}: {view.summary.line}")]
    header = ["SESSION", "PART", "PARENT", "PHASE", "DELIVERABLES", "WAITS ON", "COMMAND"]
    if with_namespace:
        header.insert(0, "NAMESPACE")
    rows = []
    for row in view.sessions:
        # What the whole waits on, of this session: a child's reviews and a coordinator's waits on
        # its children are the objective's own business, not waits.
        waits = [
            f"review {w.what}" if w.kind == "review" else w.what
            for w in view.waits_on
            if w.session == row.session and w.kind in ("user", "external", "review")
        ]
        cells = [
            row.session,
            row.part or ("coordinator" if row.children else "-"),
            row.parent or "-",
            row.phase,
            _cell(row.deliverables),
            _cell(waits),
            row.command or "-",
        ]
        if with_namespace:
            cells.insert(0, row.namespace or "-")
        rows.append(cells)
    if not rows:
        lines.append("no session carries this objective, and no coordinator has this name")
        return "\n".join(lines)
    lines.append(columns(header, rows))
    if view.done and not view.waits_on:
        lines.append("The whole waits on nothing: every session succeeded.")
    elif view.done:
        lines.append("Every session succeeded; what is left is yours to review:")
        lines += [f"  {w.kind} {w.what} in {w.session}: {w.command or '-'}" for w in view.waits_on]
    elif not view.waits_on:
        lines.append("The whole waits on nothing a person or the world must do: its sessions are moving.")
    else:
        lines.append("The whole waits on:")
        for wait in view.waits_on:
            command = f": {wait.command}" if wait.command else ""
            lines.append("  " + inline(f"{wait.kind} {wait.what} in {wait.session}{command}"))
    return "\n".join(lines)
