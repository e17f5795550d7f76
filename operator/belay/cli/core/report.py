"""`report`: where the timeline page goes, and writing it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from belay.cli.core.artifacts import write_output
from belay.views.report.html import render_html
from belay.views.report.model import SessionReport


def write_page(reports: Sequence[SessionReport], output: Path | None) -> tuple[Path, int]:
    """Writes the page of one session or several (one time axis) to `output` (a file, or a
    directory for `<first session>-report.html`; default ./<first session>-report.html); returns
    where, and how many bytes."""
    first = reports[0].session_id
    target = output or Path(f"{first}-report.html")
    if target.is_dir():
        target = target / f"{first}-report.html"
    page = render_html(reports).encode()
    write_output(target, page)
    return target, len(page)


def written(target: Path, size: int) -> str:
    return f"wrote {target} ({size} bytes); open it in a browser, it needs no network"
