"""`kubectl belay drill`: the interruption drill in the cluster. The operator runs a copy of the
session whose k-th attempt stops itself at the k-th fault point and reports the verdict in
`status.drill` (`belay.controller.drill`); this command asks for it and prints it as `belay drill`
prints its own (`belay.cli.core.drill`).

The change drill (`belay drill --change`) has no cluster counterpart: it amends and rejects on
copies of the session run on one machine. `--change` is refused here with the command that runs
it, never accepted and ignored."""

from __future__ import annotations

import json
import secrets
from typing import Annotated, Any

import typer

from belay.cli import terminal
from belay.cli.cluster import Cluster, Kubeconfig, Namespace
from belay.cli.core.drill import drill_lines
from belay.cli.core.errors import CommandError
from belay.cli.terminal import fail

DRILL_REQUEST_ANNOTATION = "belay.dev/drill-request"
CHANGE_REFUSED = (
    "kubectl belay drill has no change drill: the operator drills interruptions only; run "
    "`belay drill MANIFEST --change` on the session's manifest on one machine"
)


def drill(
    name: str,
    at: Annotated[
        list[str] | None,
        typer.Option("--at", help="A fault point (`<event type>:<identity>`, as `belay drill` names them)."),
    ] = None,
    change: Annotated[
        bool,
        typer.Option(
            "--change",
            help="Refused: the change drill runs on one machine only (`belay drill MANIFEST --change`).",
        ),
    ] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the verdict.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the verdict.")] = 1800.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The interruption drill in the cluster: the operator runs a copy of the session whose k-th
    attempt stops itself at the k-th point, replaces each, and checks that the copy completes
    without repeating a step and delivers the same bytes as the session."""
    try:
        if change:
            raise CommandError(CHANGE_REFUSED)
        if not at:
            raise CommandError("name at least one fault point with --at `<event type>:<identity>`")
        if any(not p or "," in p or ":" not in p for p in at):
            raise CommandError("each --at is one fault point, `<event type>:<identity>`, without commas")
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        nonce = secrets.token_hex(4)
        request = json.dumps({"nonce": nonce, "points": at})
        cluster.annotate(namespace, name, {DRILL_REQUEST_ANNOTATION: request}, "a drill")
        if not wait:
            terminal.echo(f"drill {nonce} of {name} asked for; its verdict will be in status.drill")
            return

        def judged(status: dict[str, Any]) -> dict[str, Any] | None:
            report = status.get("drill") or {}
            return report if report.get("request") == nonce and report.get("passed") is not None else None

        report = cluster.await_status(namespace, name, judged, timeout)
        if report is None:
            raise CommandError(f"drill {nonce} of {name} has no verdict after {timeout:.0f} s; try --timeout")
    except CommandError as error:
        raise fail(str(error)) from None
    terminal.echo(json.dumps(report, sort_keys=True) if as_json else drill_lines(report))
    if not report["passed"]:
        raise typer.Exit(1)
