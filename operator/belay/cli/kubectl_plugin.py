"""`kubectl belay`: the person's view of sessions in a cluster, for someone who may read and patch
AgentSessions (no pods, no Secrets; with `list` on Checkpoints the report shows them too), and,
to download artifacts and events, read the session's artifact store with their own access.

    kubectl belay sessions [-A] [-l SELECTOR] [--json] [--watch]   the fleet view
    kubectl belay objective OBJECTIVE [-A] [--json] [--watch]      the sessions of one objective
    kubectl belay brief NAME [-n NAMESPACE] [--json|--markdown]    the page `belay brief` prints
    kubectl belay approve NAME ID               approve one pending operation (bound to its payload
                                                hash), or say yes to a wait
    kubectl belay reject NAME ID --reason TEXT  turn down a pending operation or a published
                                                deliverable, or say no to a wait
    kubectl belay answer NAME WAIT TEXT         answer a wait on the user
    kubectl belay message NAME TEXT [--to SUB]  the next turn of a subagent that stopped short
    kubectl belay reconcile NAME OPERATION --succeeded|--failed
    kubectl belay amend NAME [--goal TEXT] [--part KEY=VALUE] [--remove-part KEY] [-f MANIFEST]
                                                change the request: request version N+1
    kubectl belay artifacts NAME | artifacts get NAME FILE [-o PATH]
    kubectl belay events NAME [--json] [--from SEQ]
    kubectl belay report NAME... | -l SELECTOR [-o FILE]  the timeline as one HTML file
    kubectl belay drill NAME --at POINT...      the interruption drill (`--change` is refused)

What each command means is `belay`'s (`belay.cli.core`); here it is carried out on the
AgentSession. An approval or a rejection is written into the session's spec (`spec.approvals`,
`spec.rejections`), exactly as a GitOps change would: the operator records it in the session
record, and only for the hash the pending request or the published deliverable carries, so a
payload that changed since is neither approved nor rejected. A rejected step is redone with the
reason. An amendment edits `spec.request` under the field manager `kubectl-belay/<user>`, which
the operator records as who changed the request. The other decisions (a yes, a no or an answer to
a wait, a message, a rejection of an approval without a reason, the verdict on an unknown outcome) go into
`spec.decisions`, which the operator records under the same claims the local commands take. A
deliverable, or a blob a pending approval binds, is read at the address the status names it by
in the artifact store (`s3://bucket/key`), with the user's own access to that store (the AWS
credentials of their environment; a file:// store where their machine reaches it): the status
carries no presigned URL, which anyone who may read it would hold as a bearer token. So are the
events, which the operator exports when the annotation `belay.dev/events-request` asks for them.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from belay.api.agentsession import AgentSession
from belay.cli import terminal
from belay.cli.cluster import GROUP, VERSION, Cluster, Kubeconfig, Namespace, fetch, typed
from belay.cli.core import artifacts as artifact_commands
from belay.cli.core import brief as brief_command
from belay.cli.core.amend import Request
from belay.cli.core.amend import amend as amended
from belay.cli.core.decide import (
    OnApproval,
    OnDeliverable,
    OnWait,
    OpenItems,
    OpenWait,
    PendingApproval,
    collected_by_parent,
    to_answer,
    to_approve,
    to_reconcile,
    to_reject,
)
from belay.cli.core.errors import CommandError
from belay.cli.core.events import event_line
from belay.cli.core.handover import moved_executor
from belay.cli.core.message import to_message
from belay.cli.core.report import write_page, written
from belay.cli.kubectl_drill import drill
from belay.cli.terminal import fail
from belay.journal import commands
from belay.journal.events import event_from_json
from belay.journal.handover import change_phrase
from belay.local.fleet import without_clock
from belay.views.briefing.render import render_rows
from belay.views.fleet.build import fleet_row, fleet_view, objective_view
from belay.views.fleet.model import OBJECTIVE_LABEL, FleetRow
from belay.views.fleet.render import render_fleet, render_objective
from belay.views.report.from_status import status_report
from belay.views.status.model import NOT_PROJECTED, SessionStatus

app = typer.Typer(
    name="kubectl-belay",
    help="Brief and approve Belay agent sessions in a cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=terminal.UNWRAPPED_CONTEXT,
)


@app.callback()
def _printable(ctx: typer.Context) -> None:
    ctx.with_resource(terminal.printable_output())


def _status(session: AgentSession) -> SessionStatus:
    return session.status or NOT_PROJECTED


@app.command()
def brief(
    name: str,
    as_json: Annotated[bool, typer.Option("--json", help="The briefing as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="The briefing as Markdown.")] = False,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """What was asked, what is done and verified, what waits on you, what is ready for review: the
    page `belay brief` prints, from the status the operator projects."""
    try:
        cluster = Cluster.connect(kubeconfig)
        session = cluster.session(namespace or cluster.namespace, name)
    except CommandError as error:
        raise fail(str(error)) from None
    style = "json" if as_json else "markdown" if markdown else "text"
    terminal.echo(
        brief_command.render(brief_command.of_cluster(session, now=datetime.now(UTC)), style), nl=False
    )


def _open_items(session: dict[str, Any]) -> OpenItems:
    """What a person can decide in the session as the apiserver returned it."""
    session_typed = typed(session)
    return OpenItems.of_status(session_typed.session_id, _status(session_typed))


@app.command()
def approve(name: str, item_id: str, namespace: Namespace = None, kubeconfig: Kubeconfig = None) -> None:
    """Approve one pending operation for exactly the payload it asked for, or say yes to a wait."""
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        target = to_approve(_open_items(cluster.raw(namespace, name)), item_id)
        if isinstance(target, OnWait):
            decision = {"id": target.wait.wait_id, "verdict": "yes", "by": cluster.user}
            terminal.echo(_decide(cluster, namespace, name, decision))
            return
        grant: dict[str, str] = {}

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            # Bound to the hash pending now, read again with every try.
            found = to_approve(_open_items(session), item_id)
            if not isinstance(found, OnApproval):
                raise CommandError(f"{item_id} no longer waits for an approval in {name}")
            grant.update(approval_grant(found.approval))
            approvals = list(session["spec"].get("approvals") or [])
            if any(_same_grant(existing, grant) for existing in approvals):
                return None
            return {"approvals": [*approvals, grant]}

        if cluster.update_spec(namespace, name, change) is None:
            terminal.echo(f"{grant['approvalId']} is already approved in the spec")
            return
        terminal.echo(f"approved {grant['approvalId']} for payload sha256 {grant['payloadSha256']}")
    except CommandError as error:
        raise fail(str(error)) from None


def approval_grant(approval: PendingApproval) -> dict[str, str]:
    """The `spec.approvals` entry for one pending approval: bound to the payload hash it was
    requested with."""
    return {
        "approvalId": approval.approval_id,
        "operationId": approval.operation_id,
        "payloadSha256": approval.payload_sha256,
    }


def _same_grant(existing: dict[str, Any], grant: dict[str, str]) -> bool:
    names_it = (
        existing.get("approvalId") == grant["approvalId"]
        or existing.get("operationId") == grant["operationId"]
    )
    return names_it and existing.get("payloadSha256") == grant["payloadSha256"]


def rejection_entry(target: OnApproval | OnDeliverable, reason: str, by: str) -> dict[str, str]:
    """The `spec.rejections` entry that turns down a pending approval or a published deliverable,
    bound to the hash the status shows for it now."""
    if isinstance(target, OnDeliverable):
        return {
            "item": target.deliverable.name,
            "sha256": target.deliverable.sha256,
            "reason": target.reason,
            "by": by,
        }
    return {
        "item": target.approval.approval_id,
        "sha256": target.approval.payload_sha256,
        "reason": reason,
        "by": by,
    }


@app.command()
def reject(
    name: str,
    item_id: str,
    reason: Annotated[
        str, typer.Option("--reason", "-m", help="Why: whoever redoes the step reads it.")
    ] = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Turn down a pending operation or a published deliverable (its step is redone with the
    reason), or say no to a wait."""
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        session = cluster.raw(namespace, name)
        target = to_reject(_open_items(session), item_id, reason)
        parent = _status(typed(session)).parent
        if isinstance(target, OnDeliverable) and parent is not None:
            # Bytes its coordinator collected: refused there, since the operator cannot reopen a child.
            collected_by_parent(target, name, _open_items(cluster.raw(namespace, parent.session)))
        if isinstance(target, OnWait) or (isinstance(target, OnApproval) and not reason.strip()):
            # A no to a wait, or to an approval without a reason (spec.rejections carry one).
            named = target.wait.wait_id if isinstance(target, OnWait) else target.approval.approval_id
            decision = {"id": named, "verdict": "no", "text": reason, "by": cluster.user}
            terminal.echo(_decide(cluster, namespace, name, decision))
            return
        entry: dict[str, str] = {}

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            found = to_reject(_open_items(session), item_id, reason)
            if isinstance(found, OnWait):
                raise CommandError(f"{item_id} is no longer a pending approval or a deliverable in {name}")
            entry.update(rejection_entry(found, reason.strip(), cluster.user))
            existing = list(session["spec"].get("rejections") or [])
            if any((r.get("item"), r.get("sha256")) == (entry["item"], entry["sha256"]) for r in existing):
                return None
            return {"rejections": [*existing, entry]}

        if cluster.update_spec(namespace, name, change) is None:
            terminal.echo(f"{entry['item']} (sha256 {entry['sha256']}) is already rejected in the spec")
            return
        terminal.echo(
            f"rejected {entry['item']} (sha256 {entry['sha256']}); the operator records it and the step is "
            f"redone with your reason: kubectl belay brief {name}"
        )
    except CommandError as error:
        raise fail(str(error)) from None


def request_patch(old: Request, new: Request) -> dict[str, Any]:
    """A merge patch of `spec.request` from one request to another: a removed part is set to null."""
    parts: dict[str, Any] = dict(new.parts)
    for key in old.parts:
        parts.setdefault(key, None)
    return {"goal": new.goal, "parts": parts}


@app.command()
def amend(
    name: str,
    goal: Annotated[str | None, typer.Option("--goal", help="The new goal.")] = None,
    parts: Annotated[list[str] | None, typer.Option("--part", metavar="KEY=VALUE")] = None,
    removed: Annotated[list[str] | None, typer.Option("--remove-part", metavar="KEY")] = None,
    manifest: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take spec.request from a manifest.")
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Change the request (request version N+1): the work that depended on what changed is redone."""
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace

        def change(session: dict[str, Any]) -> dict[str, Any]:
            read = typed(session)
            old = Request(read.spec.request.goal, dict(read.spec.request.parts))
            version = _status(read).request_version or 1
            new = amended(
                old, version, goal=goal, parts=parts or [], removed=removed or [], manifest=manifest
            )
            return {"request": request_patch(old, new.request)}

        cluster.update_spec(namespace, name, change)
        terminal.echo(
            f"changed the request of {name} (by {cluster.field_manager}); the operator records the next "
            "request version, and the work that depended on what changed is redone: "
            f"kubectl belay brief {name}"
        )
    except CommandError as error:
        raise fail(str(error)) from None


@app.command()
def resume(
    name: str,
    executor: Annotated[
        str | None,
        typer.Option("--executor", metavar="TYPE", help="Go on with another executor (spec.executor.type)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", metavar="ID", help="The model it runs.")] = None,
    credentials_secret: Annotated[
        str | None,
        typer.Option("--credentials-secret", metavar="SECRET", help="The Secret with the provider's key."),
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Move the session to another executor (or model): the operator records the move, the
    running attempt ends at its next step boundary, and the next attempt runs there."""
    if executor is None and model is None:
        raise fail(
            "the operator resumes a session by itself; name --executor TYPE (and --model ID) to move it"
        )
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        moved: list[str] = []

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            read = typed(session)
            current = read.spec.executor
            on_new = moved_executor(read, executor or current.type, model)
            if on_new is None:
                return None
            new = on_new.spec.executor
            spec = new.model_dump(mode="json", by_alias=True, exclude_none=True)
            if credentials_secret is not None:
                spec["credentialsSecret"] = credentials_secret
            elif new.type != "scripted" and "credentialsSecret" not in spec:
                raise CommandError(
                    f"{new.type} needs --credentials-secret SECRET: the Secret with its API key"
                )
            moved.append(change_phrase(current.type, current.model, new.type, new.model))
            # A merge patch: every field of the old executor the new one does not name is removed.
            old = current.model_dump(mode="json", by_alias=True, exclude_none=True)
            return {"executor": {**dict.fromkeys(old), **spec}}

        written_to = cluster.update_spec(namespace, name, change)
    except CommandError as error:
        raise fail(str(error)) from None
    if written_to is None:
        terminal.echo(f"{name} is on that executor already: nothing to change")
        return
    terminal.echo(
        f"{name}: {moved[-1]} (spec.executor, by {cluster.field_manager}); the operator records the "
        "move, the running attempt ends at its next step boundary and the next runs there: "
        f"kubectl belay brief {name}"
    )


def _decide(cluster: Cluster, namespace: str, name: str, decision: dict[str, str]) -> str:
    """Write one decision into `spec.decisions`, for the operator to record under its claim."""

    def change(session: dict[str, Any]) -> dict[str, Any] | None:
        decisions = list(session["spec"].get("decisions") or [])
        earlier = next((d for d in decisions if d["id"] == decision["id"]), None)
        if earlier is not None:
            if earlier["verdict"] == decision["verdict"]:
                return None
            raise CommandError(f"{decision['id']} is already decided in the spec: {earlier['verdict']}")
        return {"decisions": [*decisions, decision]}

    written_to = cluster.update_spec(namespace, name, change)
    said = f"{decision['verdict']} to {decision['id']}"
    if written_to is None:
        return f"{said} is already in the spec"
    return f"{said} written to spec.decisions; the operator records it in the session record"


@app.command()
def answer(
    name: str,
    wait_id: Annotated[str, typer.Argument(metavar="WAIT")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Answer a wait on the user with text; the session goes on."""
    _yes_with_text(name, text, lambda items: to_answer(items, wait_id), namespace, kubeconfig)


@app.command()
def message(
    name: str,
    text: Annotated[str, typer.Argument(help="What the subagent is told: its next turn.")],
    to: Annotated[str | None, typer.Option("--to", metavar="SUBAGENT")] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Send a message to a subagent whose turn ended without its deliverable: its next user turn."""
    _yes_with_text(name, text, lambda items: to_message(items, to), namespace, kubeconfig)


def _yes_with_text(
    name: str,
    text: str,
    find: Callable[[OpenItems], OpenWait],
    namespace: str | None,
    kubeconfig: str | None,
) -> None:
    """A yes with words to the open wait `find` picks (an answer, a message), in spec.decisions."""
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        wait = find(_open_items(cluster.raw(namespace, name)))
        decision = {"id": wait.wait_id, "verdict": "yes", "text": text, "by": cluster.user}
        terminal.echo(_decide(cluster, namespace, name, decision))
    except CommandError as error:
        raise fail(str(error)) from None


@app.command()
def reconcile(
    name: str,
    operation_id: Annotated[str, typer.Argument(metavar="OPERATION")],
    succeeded: Annotated[
        bool | None, typer.Option("--succeeded/--failed", help="Did the operation take effect?")
    ] = None,
    detail: Annotated[str, typer.Option("--detail", "-m")] = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Settle an operation whose outcome is unknown: it took effect (--succeeded) or not (--failed)."""
    try:
        if succeeded is None:
            raise CommandError("say whether it took effect: --succeeded or --failed")
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        operation = to_reconcile(_open_items(cluster.raw(namespace, name)), operation_id)
        verdict = "succeeded" if succeeded else "failed"
        decision = {"id": operation, "verdict": verdict, "text": detail, "by": cluster.user}
        terminal.echo(_decide(cluster, namespace, name, decision))
    except CommandError as error:
        raise fail(str(error)) from None


@app.command()
def artifacts(
    words: Annotated[list[str], typer.Argument(metavar="NAME | get NAME FILE")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where `get` writes the bytes.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The list as JSON.")] = False,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """List a session's deliverables, or `artifacts get NAME FILE [-o PATH]` to download one (FILE
    may be `sha256:HASH` for a blob a pending approval binds) through the short-lived URL the
    operator publishes (no store credentials needed)."""
    try:
        if words[0] == "get":
            if len(words) != 3:
                raise CommandError("usage: kubectl belay artifacts get NAME FILE [-o PATH]")
            _download(words[1], words[2], output, namespace, kubeconfig)
            return
        if len(words) != 1:
            raise CommandError(
                "usage: kubectl belay artifacts NAME  |  kubectl belay artifacts get NAME FILE"
            )
        cluster = Cluster.connect(kubeconfig)
        status = _status(cluster.session(namespace or cluster.namespace, words[0]))
        rows = artifact_commands.rows_of_status(status)
        terminal.echo(artifact_commands.render(words[0], rows, as_json))
    except CommandError as error:
        raise fail(str(error)) from None


def _blob_locations(status: SessionStatus) -> dict[str, tuple[str, int | None]]:
    """Where each blob the status gives a URL for is, with its size where the status records it."""
    found: dict[str, tuple[str, int | None]] = {d.sha256: (d.location, d.size) for d in status.deliverables}
    for approval in status.pending_approvals:
        if approval.payload_location:
            found.setdefault(approval.payload_sha256, (approval.payload_location, None))
        if approval.content_sha256 and approval.content_location:
            found.setdefault(approval.content_sha256, (approval.content_location, None))
    return found


def _download(
    name: str, file: str, output: Path | None, namespace: str | None, kubeconfig: str | None
) -> None:
    cluster = Cluster.connect(kubeconfig)
    status = _status(cluster.session(namespace or cluster.namespace, name))
    found = artifact_commands.download(
        name,
        file,
        output,
        artifacts={d.name: d.sha256 for d in status.deliverables},
        blobs=artifact_commands.blobs_of_status(status),
    )
    location, size = _blob_locations(status)[found.sha256]
    data = fetch(location, found.sha256, file, size)
    artifact_commands.write_output(found.target, data)
    terminal.echo(f"wrote {found.target} ({len(data)} bytes, sha256 {found.sha256})", err=True)


EVENTS_REQUEST_ANNOTATION = "belay.dev/events-request"
EVENTS_WAIT_S = 120.0


@app.command()
def events(
    name: str,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    from_seq: Annotated[int, typer.Option("--from", help="First seq to print.", min=1)] = 1,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The session's events, in order: asked of the operator with an annotation, which exports
    them to the artifact store and publishes where to fetch them in the status."""
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        request = f"{from_seq}/{secrets.token_hex(8)}"
        cluster.annotate(namespace, name, {EVENTS_REQUEST_ANNOTATION: request}, "the events")

        def answered(status: dict[str, Any]) -> dict[str, Any] | None:
            export = status.get("eventsExport") or {}
            return export if export.get("request") == request else None

        export = cluster.await_status(namespace, name, answered, EVENTS_WAIT_S)
        if export is None:
            raise CommandError(
                f"the operator did not export the events of {name} within {EVENTS_WAIT_S:.0f} s; "
                "is it running? (kubectl get agentsession shows whether it observes the session)"
            )
        data = fetch(export["location"], export["sha256"], f"the events of {name}", int(export["size"]))
    except CommandError as error:
        raise fail(str(error)) from None
    for line in data.decode().splitlines():
        if as_json:
            terminal.echo(line)
            continue
        event = event_from_json(_with_session(line, name))
        terminal.echo(event_line(event, commands.in_cluster))


def _with_session(line: str, name: str) -> str:
    """An exported line with the session id the event model requires (the export leaves it out)."""
    item = json.loads(line)
    item["session_id"] = name
    return json.dumps(item)


# The interruption drill in the cluster (`belay.cli.kubectl_drill`).
app.command()(drill)


# --------------------------------------------------------------------------------------------------
# The timeline report, from what the status and the Checkpoints hold


def _sessions_named(cluster: Cluster, names: list[str], selector: str | None, namespace: str) -> list[str]:
    """Each session named, or each that the label selector picks."""
    if bool(names) == bool(selector):
        raise CommandError(
            "name the sessions, or pick them with -l SELECTOR (such as -l team=parsers), not both"
        )
    if selector:
        items, _ = cluster.sessions(namespace, selector)
        names = sorted(item["metadata"]["name"] for item in items)
        if not names:
            raise CommandError(f"no AgentSession matches -l {selector!r} in namespace {namespace!r}")
    return list(dict.fromkeys(names))


@app.command()
def report(
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME...", help="One session or several.")
    ] = None,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="The sessions with these labels, e.g. -l team=parsers."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write the page (default ./NAME-report.html)."),
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The timeline as one HTML file that opens without a network, from what `kubectl belay brief`
    reads: the status and the Checkpoints. Several sessions share one time axis."""
    now = datetime.now(UTC)
    try:
        cluster = Cluster.connect(kubeconfig)
        namespace = namespace or cluster.namespace
        reports = []
        for name in _sessions_named(cluster, names or [], selector, namespace):
            session = cluster.session(namespace, name)
            rows = render_rows(brief_command.of_cluster(session, now=now))
            reports.append(
                status_report(
                    name,
                    _status(session),
                    goal=session.spec.request.goal,
                    checkpoints=cluster.checkpoints(namespace, name) or [],
                    briefing=rows,
                    now=now,
                )
            )
        target, size = write_page(reports, output)
    except CommandError as error:
        raise fail(str(error)) from None
    terminal.echo(written(target, size), err=True)


# --------------------------------------------------------------------------------------------------
# The fleet: many sessions at a glance, and an objective's sessions

AllNamespaces = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Sessions of every namespace.")]
Selector = Annotated[str, typer.Option("--selector", "-l", help="A label selector, as kubectl takes it.")]


def fleet_rows(items: list[dict[str, Any]], *, all_namespaces: bool, now: datetime) -> list[FleetRow]:
    """The fleet rows of AgentSession objects: their status, as the operator projected it, with
    every command spelled for kubectl (and `-n NAMESPACE` when listing every namespace)."""
    rows = []
    for item in items:
        session = typed(item)
        namespace = session.metadata.namespace

        def style(command: str, namespace: str | None = namespace) -> str:
            return commands.in_cluster(command, namespace if all_namespaces else None)

        rows.append(
            fleet_row(
                session.session_id,
                session.status,
                now=now,
                labels=session.metadata.labels,
                namespace=namespace if all_namespaces else None,
                style=style,
            )
        )
    return rows


def _show_fleet(
    kubeconfig: str | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str,
    watch: bool,
    show: Callable[[list[FleetRow]], str],
) -> None:
    """Print once, or (watching) again on every change the apiserver reports, until Ctrl-C."""
    cluster = Cluster.connect(kubeconfig)
    where = None if all_namespaces else (namespace or cluster.namespace)
    items, version = cluster.sessions(where, selector)

    def render() -> tuple[str, list[dict[str, object]]]:
        rows = fleet_rows(items, all_namespaces=all_namespaces, now=datetime.now(UTC))
        return show(rows), without_clock(rows)

    text, shown = render()
    terminal.echo(text)
    if not watch:
        return
    by_key = {(i["metadata"].get("namespace"), i["metadata"]["name"]): i for i in items}
    if where is None:
        lister: Any = cluster.api.list_cluster_custom_object
        args: tuple[Any, ...] = (GROUP, VERSION, "agentsessions")
    else:
        lister = cluster.api.list_namespaced_custom_object
        args = (GROUP, VERSION, where, "agentsessions")
    watcher = kube_watch.Watch()
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            try:
                for change in watcher.stream(
                    lister, *args, label_selector=selector, resource_version=version
                ):
                    obj = change["object"]
                    key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
                    version = obj["metadata"].get("resourceVersion", version)
                    if change["type"] == "DELETED":
                        by_key.pop(key, None)
                    else:
                        by_key[key] = obj
                    items = list(by_key.values())
                    text, rows = render()
                    if rows != shown:
                        shown = rows
                        terminal.echo(text)
            except ApiException as error:
                if error.status != 410:  # a resourceVersion too old: list again and go on
                    raise CommandError(f"the watch ended: {error.status} {error.reason}") from None
                items, version = cluster.sessions(where, selector)
                by_key = {(i["metadata"].get("namespace"), i["metadata"]["name"]): i for i in items}


@app.command()
def sessions(
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    selector: Selector = "",
    as_json: Annotated[bool, typer.Option("--json", help="Rows and summary as JSON.")] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Print again on every change, until Ctrl-C.")
    ] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Every session: phase, what it waits on (you, an external condition, your review), the
    kubectl command that unblocks it, deliverables, age of the last event; and a summary."""

    def show(rows: list[FleetRow]) -> str:
        view = fleet_view(rows)
        return view.model_dump_json() if as_json else render_fleet(view, with_namespace=all_namespaces)

    try:
        _show_fleet(kubeconfig, namespace, all_namespaces, selector, watch, show)
    except CommandError as error:
        raise fail(str(error)) from None


@app.command()
def objective(
    name: Annotated[str, typer.Argument(metavar="OBJECTIVE", help="The belay.dev/objective label value.")],
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w")] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The sessions that serve one objective: each one's part and deliverables, and what the
    whole waits on."""

    def show(rows: list[FleetRow]) -> str:
        view = objective_view(name, rows)
        return view.model_dump_json() if as_json else render_objective(view, with_namespace=all_namespaces)

    try:
        _show_fleet(kubeconfig, namespace, all_namespaces, f"{OBJECTIVE_LABEL}={name}", watch, show)
    except CommandError as error:
        raise fail(str(error)) from None


def main() -> None:
    app(prog_name="kubectl-belay")


if __name__ == "__main__":
    main()
