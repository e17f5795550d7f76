"""`belay objective NAME` where no session carries the label: the coordinator of that name and the
children it started are the objective a person means; with neither, the view says so and claims
nothing about sessions moving."""

from __future__ import annotations

from belay.views.fleet.build import objective_view
from belay.views.fleet.model import FleetRow
from belay.views.fleet.render import render_objective


def _row(session: str, **fields: object) -> FleetRow:
    return FleetRow.model_validate(
        {"session": session, "phase": "Succeeded", "bucket": "succeeded", **fields}
    )


ROWS = [
    _row("deps-upgrade", children=["deps-core", "deps-cli"]),
    _row("deps-core", parent="deps-upgrade", part="core"),
    _row("deps-cli", parent="deps-upgrade", part="cli"),
    _row("release-notes", objective="release-notes", children=["notes-parser"]),
    _row("notes-parser", objective="release-notes", parent="release-notes", part="parser"),
    _row("deps-upgrade-old"),  # a session of another name: not the coordinator's
]


def test_an_unlabelled_coordinator_and_its_children_are_its_objective() -> None:
    view = objective_view("deps-upgrade", ROWS)
    assert sorted(r.session for r in view.sessions) == ["deps-cli", "deps-core", "deps-upgrade"]


def test_a_labelled_objective_is_its_labelled_sessions_only() -> None:
    view = objective_view("release-notes", ROWS)
    assert sorted(r.session for r in view.sessions) == ["notes-parser", "release-notes"]


def test_a_name_nothing_carries_says_so_and_nothing_more() -> None:
    shown = render_objective(objective_view("deps-core", ROWS))  # a child, not a coordinator
    assert "no session carries this objective, and no coordinator has this name" in shown
    assert "moving" not in shown.split("\n", 1)[1]
