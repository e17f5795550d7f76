"""`belay drill` once its options are read: the interruption drill, the change drill (`--change`)
or the comparison (`--compare`), run on one machine, printed, and the exit status they end with."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import typer

from belay.cli import terminal
from belay.cli.terminal import fail
from belay.local.drill import Change, run_change_drill, run_drill
from belay.local.drill.change import parse_parts
from belay.local.drill.compare import compare_table, run_compare
from belay.local.drill.pages import drill_ending
from belay.local.drill.report import DrillReport


class ChangeAsked(NamedTuple):
    """The change options as given: `--change-goal`, each `--change-part KEY=VALUE`, `--reject`."""

    goal: str | None
    parts: list[str]
    reject: str | None


def interruption(
    path: Path,
    workdir: Path,
    executor: str | None,
    handover_to: str | None,
    answer_waits: bool,
    as_json: bool,
) -> None:
    try:
        report = run_drill(
            path,
            workdir,
            progress=not as_json,
            executor=executor,
            handover_to=handover_to,
            answer_waits=answer_waits,
        )
    except ValueError as error:
        raise fail(str(error)) from None
    shown(report, as_json)


def change(
    path: Path, workdir: Path, asked: ChangeAsked, executor: str | None, answer_waits: bool, as_json: bool
) -> None:
    try:
        report = run_change_drill(
            path,
            workdir,
            Change(goal=asked.goal, parts=parse_parts(asked.parts), reject=asked.reject),
            progress=not as_json,
            executor=executor,
            answer_waits=answer_waits,
        )
    except ValueError as error:
        raise fail(str(error)) from None
    shown(report, as_json)


def shown(report: DrillReport, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        terminal.echo(drill_ending(report))
    if not report.passed:
        raise typer.Exit(1)


def compare(path: Path, workdir: Path, managed: str, as_json: bool) -> None:
    try:
        report = run_compare(path, workdir / "compare", managed, progress=not as_json)
    except ValueError as error:
        raise fail(str(error)) from None
    sys.stdout.write((report.model_dump_json(indent=2) if as_json else compare_table(report)) + "\n")
    if not all(side.completed for side in report.sides) or not report.same_deliverables:
        raise typer.Exit(1)
